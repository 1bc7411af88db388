"""The first offset of a queue stored at or after a time, from a broker's SEARCH_OFFSET_BY_TIMESTAMP answer.

A 5.x broker answers that offset itself (boundaryType LOWER, the default). A 4.9.8 broker answers the unit
its binary search over the consume queue meets (ConsumeQueue.getOffsetInQueueByTime): with several messages
stored in the time's millisecond, whichever of them it meets, not the first; with none, the closer of the
two neighbours, which may be stored before the time. Store times grow along a queue (a broker stamps a
message under its commit-log lock), so the answer is mended by reading the store times just before it and
at it: back over the messages of the same millisecond, forward past one stored before the time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.stored import decode_stored_messages

if TYPE_CHECKING:
    from ..protocol.route import MessageQueue
    from .pull_consumer import PullConsumer

#: Messages whose store times are read at a time while stepping back from the broker's answer.
WINDOW = 32

#: store_times(start, end): (queue offset, store time) of the messages stored at offsets start .. end - 1,
#: in offset order (fewer when some are not there any more).
StoreTimes = Callable[[int, int], list[tuple[int, int]]]


def first_at_or_after(answer: int, timestamp_ms: int, min_offset: int, store_times: StoreTimes) -> int:
    """The first offset stored at or after ``timestamp_ms``, from the broker's ``answer``: moved back over
    earlier messages of the same millisecond, or one forward when its message was stored before the time."""
    at = store_times(answer, answer + 1)
    if at and at[0][1] < timestamp_ms:
        return answer + 1  # the next message, if any, is stored at or after the time
    offset = answer
    while offset > min_offset:
        start = max(min_offset, offset - WINDOW)
        times = store_times(start, offset)
        if not times:
            break
        before = [o for o, t in times if t < timestamp_ms]
        if before:
            return max(before) + 1
        offset = times[0][0]  # every one of them is at or after the time: further back
    return offset


def pulled_store_times(consumer: PullConsumer, mq: MessageQueue) -> StoreTimes:
    """StoreTimes of ``mq`` read with the consumer's pulls (every tag)."""

    def store_times(start: int, end: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        while start < end:
            result = consumer.pull(mq, start, min(WINDOW, end - start))
            messages = [m for m in decode_stored_messages(result.body) if m.queue_offset < end]
            if not messages:  # nothing found there (not stored, or not any more)
                break
            out += [(m.queue_offset, m.store_timestamp) for m in messages]
            start = messages[-1].queue_offset + 1
        return out

    return store_times
