"""Queue selection with fault avoidance: MQFaultStrategy and LatencyFaultToleranceImpl.

A broker whose last send took ``latency`` ms is not chosen for the matching "not available"
duration; a broker that failed (connection error, timeout, error answer) is isolated as if its
latency had been 30 s. When every broker is marked, the least bad one is tried anyway.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..protocol.route import MessageQueue, TopicPublishInfo

#: Latency thresholds (ms) and the not-available durations (ms) they earn (MQFaultStrategy).
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
#: The latency a failure counts as (isolation).
ISOLATION_LATENCY_MS = 30000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def not_available_duration_ms(latency_ms: int) -> int:
    if latency_ms < LATENCY_MAX_MS[2]:  # the usual answer: not avoided at all
        return 0
    for limit, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_DURATION_MS), strict=True):
        if latency_ms >= limit:
            return duration
    return 0


@dataclass
class FaultItem:
    name: str
    current_latency: int
    start_timestamp: int

    def is_available(self, now: int) -> bool:
        return now >= self.start_timestamp


class LatencyFaultTolerance:
    """Brokers that recently answered slowly or failed, and until when they are avoided.

    Lock-free: a broker's first mark is one dict operation (atomic in CPython), later ones rewrite
    its item's two fields; a reader reads each field once.
    """

    def __init__(self, clock: Callable[[], int] = now_ms) -> None:
        self._items: dict[str, FaultItem] = {}
        self._clock = clock
        self._which_worst = itertools.count(random.randrange(1 << 16))

    def update_fault_item(self, name: str, current_latency: int, not_available_ms: int) -> None:
        start = self._clock() + not_available_ms
        item = self._items.get(name)
        if item is None:
            self._items[name] = FaultItem(name, current_latency, start)
        else:  # as LatencyFaultToleranceImpl updates its FaultItem: no new object per answer
            item.current_latency = current_latency
            item.start_timestamp = start

    def is_available(self, name: str) -> bool:
        item = self._items.get(name)
        return item is None or item.is_available(self._clock())

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """Among marked brokers, one of the better half (available first, then lower latency, earlier end)."""
        items = list(self._items.values())
        if not items:
            return None
        now = self._clock()
        items.sort(key=lambda i: (not i.is_available(now), i.current_latency, i.start_timestamp))
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        return items[next(self._which_worst) % half].name


class MQFaultStrategy:
    """Round-robin over a topic's writable queues, skipping brokers under a fault mark."""

    def __init__(self, enabled: bool = True, clock: Callable[[], int] = now_ms) -> None:
        self.enabled = enabled
        self.tolerance = LatencyFaultTolerance(clock)

    def select_one_message_queue(
        self, info: TopicPublishInfo, last_broker_name: str | None, counter: itertools.count[int]
    ) -> MessageQueue:
        """The queue for the next attempt; ``counter`` is the topic's sendWhichQueue."""
        queues = info.message_queues
        n = len(queues)
        if self.enabled:
            index = next(counter)
            # First choice: an available broker other than the one that just failed; then any available one.
            fallback: MessageQueue | None = None
            for i in range(n):
                mq = queues[(index + i) % n]
                if self.tolerance.is_available(mq.broker_name):
                    if last_broker_name is None or mq.broker_name != last_broker_name:
                        return mq
                    if fallback is None:
                        fallback = mq
            if fallback is not None and len(info.broker_names) == 1:
                return fallback
            not_best = self.tolerance.pick_one_at_least()
            if not_best is not None:
                write_queue_nums = info.write_queue_nums(not_best)
                if write_queue_nums > 0:
                    return MessageQueue(info.topic, not_best, next(counter) % write_queue_nums)
                self.tolerance.remove(not_best)
            if fallback is not None:
                return fallback
            return queues[next(counter) % n]
        if last_broker_name is not None:
            for _ in range(n):
                mq = queues[next(counter) % n]
                if mq.broker_name != last_broker_name:
                    return mq
        return queues[next(counter) % n]

    def update_fault_item(self, broker_name: str, latency_ms: int, isolation: bool) -> None:
        if self.enabled:
            duration = not_available_duration_ms(ISOLATION_LATENCY_MS if isolation else latency_ms)
            self.tolerance.update_fault_item(broker_name, latency_ms, duration)

    def is_available(self, broker_name: str) -> bool:
        return not self.enabled or self.tolerance.is_available(broker_name)
