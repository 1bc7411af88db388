"""What a broker's store answers a pull (DefaultMessageStore.getMessage): the status, the records, the next
begin offset and the queue's min and max offsets; and the tag filter of a subscription."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from .consume_queue import java_string_hash
from .store import MessageStore

#: maxTransferCountOnMessageInMemory / maxTransferBytesOnMessageInMemory (4.9.8 and 5.3.3 defaults): one
#: pull answers at most this many messages and bytes (the first message always, whatever its size).
MAX_TRANSFER_COUNT = 32
MAX_TRANSFER_BYTES = 256 * 1024
#: maxFilterMessageSize / the consume-queue unit size: a pull looks at most max(this, maxMsgNums) units.
MAX_FILTER_UNITS = 16000 // 20

SUB_ALL = "*"


class GetMessageStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"


class SubscriptionParseError(ValueError):
    """A subscription the broker cannot build (SUBSCRIPTION_PARSE_FAILED)."""


@dataclass(frozen=True)
class TagFilter:
    """A TAG subscription as the broker holds it: every message ("*"), or the hash codes of its tags."""

    codes: frozenset[int] | None

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """FilterAPI's rule: "*" or empty takes all; else the trimmed, non-empty parts between "||"."""
        if not expression or expression == SUB_ALL:
            return cls(None)
        parts = expression.split("||")
        while parts and not parts[-1]:
            parts.pop()  # as Java's String.split drops trailing empty strings
        if not parts:
            raise SubscriptionParseError(expression)
        return cls(frozenset(java_string_hash(t.strip()) for t in parts if t.strip()))

    def matches(self, tags_code: int) -> bool:
        """By the consume queue's tags hash code: a colliding tag passes (the client checks again)."""
        return self.codes is None or tags_code in self.codes


@dataclass
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)


def get_message(
    store: MessageStore, topic: str, queue_id: int, offset: int, max_nums: int, tag_filter: TagFilter, master: bool
) -> GetMessageResult:
    """The store's answer to a pull from `offset`. A slave (`master` False) keeps the requested offset where a
    master corrects it (nextOffsetCorrection without offsetCheckInSlave)."""
    min_offset, max_offset = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)

    def corrected(status: GetMessageStatus, new_offset: int) -> GetMessageResult:
        return GetMessageResult(status, new_offset if master else offset, min_offset, max_offset)

    if max_offset == 0:
        return corrected(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)
    if offset < min_offset:
        return corrected(GetMessageStatus.OFFSET_TOO_SMALL, min_offset)
    if offset == max_offset:
        return corrected(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset)
    if offset > max_offset:
        return corrected(GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset)
    taken: list[tuple[int, int]] = []
    total = 0
    looked = 0
    for position, size, code in store.units(topic, queue_id, offset, max(MAX_FILTER_UNITS, max_nums)):
        if taken and (len(taken) >= max_nums or len(taken) >= MAX_TRANSFER_COUNT or total + size > MAX_TRANSFER_BYTES):
            break
        looked += 1
        if tag_filter.matches(code):
            taken.append((position, size))
            total += size
    status = GetMessageStatus.FOUND if taken else GetMessageStatus.NO_MATCHED_MESSAGE
    return GetMessageResult(status, offset + looked, min_offset, max_offset, store.read_units(taken))
