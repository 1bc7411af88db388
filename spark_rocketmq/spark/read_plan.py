"""Which task reads what: queues' offset ranges into Spark input partitions, and a micro-batch's share of
each queue's backlog under maxOffsetsPerTrigger.

A queue's range is read by one task unless min_partitions asks for more tasks than there are ranges with
messages: then the largest ranges are split into pieces of about equal size (Spark's Kafka source splits
the same way). Ranges much smaller than a task's share are packed together, so a topic of many nearly
empty queues is not read by as many nearly idle tasks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..protocol.route import MessageQueue

#: Ranges smaller than this many offsets are packed with others into one task (when min_partitions does
#: not ask for a smaller share).
PACK_BELOW = 4096


@dataclass(frozen=True)
class QueueRange:
    """Offsets [start, end) of one queue."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    @property
    def size(self) -> int:
        return self.end - self.start


def queue_ranges(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int]) -> list[QueueRange]:
    """The non-empty ranges from start to end, queue by queue. A queue missing from start has no range: a
    streaming read records a new queue's earliest offset as its end, and reads it from the next micro-batch."""
    out = []
    for mq in sorted(end, key=lambda q: (q.topic, q.broker_name, q.queue_id)):
        first = start.get(mq)
        if first is not None and end[mq] > first:
            out.append(QueueRange(mq.topic, mq.broker_name, mq.queue_id, first, end[mq]))
    return out


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[list[QueueRange]]:
    """Tasks' shares: each a list of ranges, in queue order."""
    if not ranges:
        return []
    total = sum(r.size for r in ranges)
    share = math.ceil(total / min_partitions) if min_partitions and min_partitions > len(ranges) else None
    pieces: list[QueueRange] = []
    for r in ranges:
        parts = max(1, math.ceil(r.size / share)) if share else 1
        step = math.ceil(r.size / parts)
        for first in range(r.start, r.end, step):
            pieces.append(QueueRange(r.topic, r.broker_name, r.queue_id, first, min(r.end, first + step)))
    pack_limit = min(PACK_BELOW, share) if share else PACK_BELOW
    tasks: list[list[QueueRange]] = []
    current: list[QueueRange] = []
    size = 0
    for piece in pieces:
        if piece.size >= pack_limit:
            tasks.append([piece])
            continue
        if current and size + piece.size > pack_limit:
            tasks.append(current)
            current, size = [], 0
        current.append(piece)
        size += piece.size
    if current:
        tasks.append(current)
    return tasks


def admit(
    start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int], limit: int | None
) -> dict[MessageQueue, int]:
    """End offsets of a micro-batch reading at most ``limit`` offsets in all, spread by backlog.

    Each queue gets a share of the limit proportional to its backlog, rounded down, and at least one
    offset while the limit allows it, so a small queue is not starved by a large one; what rounding leaves
    goes to the largest backlogs."""
    if limit is None:
        return dict(latest)
    backlog = {mq: max(0, latest[mq] - start.get(mq, 0)) for mq in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    grant = {mq: (b * limit) // total for mq, b in backlog.items()}
    left = limit - sum(grant.values())
    for mq in sorted(backlog, key=lambda q: backlog[q], reverse=True):
        if left <= 0:
            break
        if backlog[mq] > grant[mq] and grant[mq] == 0:
            grant[mq] += 1
            left -= 1
    for mq in sorted(backlog, key=lambda q: backlog[q] - grant[q], reverse=True):
        if left <= 0:
            break
        more = min(left, backlog[mq] - grant[mq])
        grant[mq] += more
        left -= more
    return {mq: start.get(mq, 0) + grant[mq] if backlog[mq] else latest[mq] for mq in latest}
