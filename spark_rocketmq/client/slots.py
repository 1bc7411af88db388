"""The producer's in-flight bound: at most max_in_flight sends pending (Java's semaphoreAsyncSendNum, for
every kind of send), and waiting until none is, for close()."""

from __future__ import annotations

import threading
import time
from queue import Empty, SimpleQueue


class SendSlots:
    """At most ``limit`` sends pending. Tokens in a SimpleQueue: taking and giving one back involve no
    Python-level lock, so a sender and the reader thread completing its sends never queue on a lock."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._tokens: SimpleQueue[None] = SimpleQueue()
        for _ in range(limit):
            self._tokens.put(None)
        self._idle = threading.Event()
        self._idle.set()

    @property
    def pending(self) -> int:
        return self._limit - self._tokens.qsize()

    def acquire(self, timeout_s: float) -> bool:
        try:
            if timeout_s <= 0:
                self._tokens.get_nowait()
            else:
                self._tokens.get(timeout=timeout_s)
        except Empty:
            return False
        if self._idle.is_set():
            self._idle.clear()
        return True

    def release(self) -> None:
        self._tokens.put(None)
        if self._tokens.qsize() == self._limit:
            self._idle.set()

    def wait_idle(self, deadline: float) -> bool:
        """Wait until no send is pending, or the monotonic deadline; True when idle."""
        while self.pending > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # A set() may race an acquire's clear(): wait in short slices and look at the count again.
            self._idle.wait(min(left, 0.05))
        return True
