"""A broker's in-flight window: how much a producer keeps on the wire to one broker, adapting to its answers.

Counted in units of WINDOW_UNIT_BYTES of request (a 1 MiB request weighs 65, a 100-byte one 1), like a
TCP congestion window: it starts at INITIAL_WINDOW_UNITS and doubles per round trip (slow start) until
a busy answer or a timeout halves it (at most once per round trip); from then on it grows by
GROWTH_UNITS per window's worth of answers (AIMD), never past WINDOW_MAX_UNITS: at most 1,024 small
requests or 16 MiB of larger ones on the wire to one broker. Not thread-safe: its owner locks.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

#: Bytes per window unit: requests smaller than this (single messages) weigh one unit each.
WINDOW_UNIT_BYTES = 16 * 1024
#: The most a broker's window grows to: 16 MiB of request.
WINDOW_MAX_UNITS = 1024
#: A broker's window when the producer first sends to it: 2 MiB of request.
INITIAL_WINDOW_UNITS = 128
#: Growth per window's worth of answers above the slow-start threshold: 256 KiB of request.
GROWTH_UNITS = 16


def request_cost(body_bytes: int) -> int:
    """A request's weight in window units."""
    return 1 + body_bytes // WINDOW_UNIT_BYTES


class Weighted(Protocol):
    @property
    def cost(self) -> int: ...


W = TypeVar("W", bound=Weighted)


class BrokerWindow(Generic[W]):
    """Units in use, the current limit, and the requests waiting for room, in order."""

    def __init__(self, max_units: int = WINDOW_MAX_UNITS) -> None:
        self.max_units = max_units
        self.limit = float(min(INITIAL_WINDOW_UNITS, max_units))
        self.threshold = float(max_units)  # slow start below it
        self.used = 0
        self.last_cut = 0.0
        self.waiting: deque[W] = deque()

    def admit(self, item: W) -> bool:
        """Take room for ``item`` now (True), or queue it behind those already waiting (False)."""
        if self.waiting or not self._fits(item.cost):
            self.waiting.append(item)
            return False
        self.used += item.cost
        return True

    def release(self, cost: int) -> list[W]:
        """Give ``cost`` units back; the waiting requests that now fit, in order, their room taken."""
        self.used -= cost
        ready: list[W] = []
        while self.waiting and self._fits(self.waiting[0].cost):
            item = self.waiting.popleft()
            self.used += item.cost
            ready.append(item)
        return ready

    def _fits(self, cost: int) -> bool:
        return self.used == 0 or self.used + cost <= self.limit

    def cut(self, sent_at: float) -> None:
        """A busy answer or a timeout to a request sent at ``sent_at`` (monotonic)."""
        if sent_at >= self.last_cut:  # answers to requests sent before the last cut do not count again
            self.limit = self.threshold = max(1.0, self.limit / 2)
            self.last_cut = time.monotonic()

    def grow(self, cost: int) -> None:
        """An answer: slow start below the threshold, additive increase above it."""
        step = cost if self.limit < self.threshold else cost * GROWTH_UNITS / self.limit
        self.limit = min(float(self.max_units), self.limit + step)

    def take_expired(self, now: float, deadline_of: Callable[[W], float]) -> list[W]:
        """Remove and return the waiting requests whose deadline passed."""
        late = [w for w in self.waiting if deadline_of(w) <= now]
        if late:
            self.waiting = deque(w for w in self.waiting if deadline_of(w) > now)
        return late
