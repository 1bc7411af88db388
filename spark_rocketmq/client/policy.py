"""Retry waits and time limits, each written once with tenacity's wait and stop strategies.

The send engine and the sink's writer are event driven: a retry is a call the engine's RetryScheduler
runs later, or a request the writer parks until its time comes, never a blocking retry loop. So no
``tenacity.Retrying`` runs here: a ``Backoff`` asks its strategies directly, about one
``tenacity.RetryCallState`` it fills with the attempt number and the caller's clock readings.

The policies (attempt 1 is the first try; its failure waits ``first_s``):

- ``BUSY_BACKOFF`` (sender.py): a broker answered busy (SYSTEM_BUSY, FLOW_CONTROL, a 4.x broker's
  TIMEOUT_CLEAN_QUEUE): 50 ms, doubled at each busy answer of the send, 1 s at most; the send's own
  deadline (send_msg_timeout_ms) ends it.
- ``resend_backoff(delivery_timeout_s)`` (spark/writer.py): a sink request still failed after the
  client's retries: 100 ms, doubled at each send of the request, 2 s at most, never later than
  ``delivery_timeout_ms`` after the writer took its rows, and no resend once that time is up.
- ``PUBLISHED_CHECK_BACKOFF`` (spark/commit.py): the driver asking whether halves left to the brokers'
  check-backs are published: 0.5 s, doubled at each round, 5 s at most, within its own deadline.
"""

from __future__ import annotations

from tenacity import RetryCallState, Retrying, stop_after_delay, stop_never, wait_exponential
from tenacity.stop import stop_base

__all__ = ["BUSY_BACKOFF", "PUBLISHED_CHECK_BACKOFF", "Backoff", "resend_backoff"]

#: The RetryCallState's owner: never run, only named (tenacity's strategies do not look at it).
_OWNER = Retrying()


class Backoff:
    """Exponential waits (``first_s`` doubled per attempt, ``max_s`` at most), within ``within_s`` when given.

    Thread-safe: it keeps no state between calls.
    """

    __slots__ = ("stop", "wait", "within_s")

    def __init__(self, *, first_s: float, max_s: float, within_s: float | None = None) -> None:
        if first_s <= 0 or max_s < first_s:
            raise ValueError(f"a backoff needs 0 < first_s <= max_s (got first_s={first_s}, max_s={max_s})")
        self.wait = wait_exponential(multiplier=first_s, max=max_s)
        self.stop: stop_base = stop_never if within_s is None else stop_after_delay(within_s)
        self.within_s = within_s

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th try (1 for the first) failed."""
        return self.wait(_state(attempt, 0.0, 0.0))

    def next_try(self, attempt: int, *, started: float, now: float) -> float | None:
        """When to try again after the ``attempt``-th try failed at ``now``, on the clock of ``started`` (when
        the first try began): ``now + delay(attempt)``, never past ``started + within_s``; None when the
        time is up (``now - started >= within_s``): no more tries."""
        state = _state(attempt, started, now)
        if self.stop(state):
            return None
        at = now + self.wait(state)
        return at if self.within_s is None else min(at, started + self.within_s)


def _state(attempt: int, started: float, now: float) -> RetryCallState:
    state = RetryCallState(_OWNER, None, (), {})
    state.attempt_number = attempt
    state.start_time = started
    state.outcome_timestamp = now
    return state


BUSY_BACKOFF = Backoff(first_s=0.05, max_s=1.0)
PUBLISHED_CHECK_BACKOFF = Backoff(first_s=0.5, max_s=5.0)


def resend_backoff(delivery_timeout_s: float) -> Backoff:
    """The sink's resends of one request, within ``delivery_timeout_s`` of the writer taking its rows."""
    return Backoff(first_s=0.1, max_s=2.0, within_s=delivery_timeout_s)
