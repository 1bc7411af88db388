"""Runs retries after a delay on a small thread pool, never on a connection's reader thread (a retry may
wait for a route from the NameServer), and calls a housekeeping tick every SWEEP_INTERVAL_S."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .in_flight import mark_settling_thread

SWEEP_INTERVAL_S = 0.1


class RetryScheduler:
    def __init__(self, tick: Callable[[], None]) -> None:
        # Retries settle sends, so their callbacks run on these threads too: marked as never to block.
        self._pool = ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="rocketmq-retry", initializer=mark_settling_thread
        )
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._tick = tick
        self._thread = threading.Thread(target=self._loop, name="rocketmq-retry-scheduler", daemon=True)
        self._thread.start()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> bool:
        """Run ``fn`` on the pool after ``delay_s``; False once stopped."""
        with self._cond:
            if self._stopped:
                return False
            if delay_s <= 0:
                self._pool.submit(fn)
            else:
                heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn))
                self._cond.notify()
        return True

    def _loop(self) -> None:
        mark_settling_thread()  # the tick fails sends past their deadline: their callbacks run here
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    self._pool.submit(heapq.heappop(self._heap)[2])
                wait = min(self._heap[0][0] - now, SWEEP_INTERVAL_S) if self._heap else SWEEP_INTERVAL_S
                self._cond.wait(wait)
            self._tick()  # outside the lock: it may settle sends, whose callbacks may schedule retries

    def stop(self, join_s: float = 1.0) -> list[Callable[[], None]]:
        """Stop taking calls; those already handed to the pool still run (without waiting for them here).
        Returns the delayed calls that had not come due, for the caller to settle: dropping them silently
        would leave whatever waits on them waiting for ever."""
        with self._cond:
            self._stopped = True
            due, self._heap = [fn for _, _, fn in sorted(self._heap)], []
            self._cond.notify()
        self._pool.shutdown(wait=False)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=join_s)
        return due
