"""Message trace records as the Java client writes them (TraceDataEncoder), and the trace messages that
carry them (AsyncTraceDispatcher): no I/O, no clock.

A record is its fields joined by CONTENT_SPLITOR (\\x01) and ended by FIELD_SPLITOR (\\x02); a trace
message's body is records one after the other, and its KEYS are every record's message id and keys,
which is how `mqadmin queryMsgTraceById` and the dashboard find the records of a message (QUERY_MESSAGE
by key in the trace topic, then the records whose message id matches). A missing tag or key is written
"null", as Java's StringBuilder writes a null String.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from ..errors import ProtocolError

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
#: TopicValidator.RMQ_SYS_TRACE_TOPIC: where traces go unless a customized trace topic is given.
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: MixAll.DEFAULT_TRACE_REGION_ID: the region of a trace when the broker named none.
DEFAULT_TRACE_REGION_ID = "DefaultRegion"
#: TraceConstants.GROUP_NAME_PREFIX: the trace producer's group is this, the host group and a counter.
TRACE_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"
#: MessageConst.KEY_SEPARATOR: between the keys of a message's KEYS property.
KEY_SEPARATOR = " "


class TraceType(StrEnum):
    """The trace types a producer writes (TraceType.Pub and TraceType.EndTransaction)."""

    PUB = "Pub"
    END_TRANSACTION = "EndTransaction"


class MessageType(IntEnum):
    """org.apache.rocketmq.common.message.MessageType: a trace record carries its ordinal."""

    NORMAL_MSG = 0
    TRANS_MSG_HALF = 1
    TRANS_MSG_COMMIT = 2
    DELAY_MSG = 3
    ORDER_MSG = 4


#: LocalTransactionState names by END_TRANSACTION's TransactionState name.
TRANSACTION_STATE_NAMES = {"COMMIT": "COMMIT_MESSAGE", "ROLLBACK": "ROLLBACK_MESSAGE", "UNKNOWN": "UNKNOW"}


def _text(value: str | None) -> str:
    return "null" if value is None else value


def _bool(value: bool) -> str:
    return "true" if value else "false"


@dataclass(frozen=True, slots=True)
class PubTrace:
    """One sent message (TraceType.Pub): when, from which group, where it was stored, how long it took."""

    timestamp_ms: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str | None
    keys: str | None
    store_host: str
    body_length: int
    cost_ms: int
    msg_type: MessageType
    offset_msg_id: str
    success: bool

    def encode(self) -> str:
        fmt = PubFormat(self.timestamp_ms, self.region_id, self.group, self.topic)
        fmt.answered(self.store_host, self.cost_ms, self.msg_type, self.success)
        return fmt.record(self.msg_id, self.tags, self.keys, self.body_length, self.offset_msg_id)


class PubFormat:
    """Pub records of the messages of one request: the fields they share are joined once."""

    __slots__ = ("_end", "_head", "_mid", "_store")

    def __init__(self, timestamp_ms: int, region_id: str, group: str, topic: str) -> None:
        s = CONTENT_SPLITOR
        self._head = f"{TraceType.PUB.value}{s}{timestamp_ms}{s}{region_id}{s}{group}{s}{topic}{s}"
        self._store = self._mid = self._end = ""

    def answered(self, store_host: str, cost_ms: int, msg_type: MessageType, success: bool) -> None:
        s = CONTENT_SPLITOR
        self._store = f"{s}{store_host}{s}"
        self._mid = f"{s}{cost_ms}{s}{int(msg_type)}{s}"
        self._end = f"{s}{_bool(success)}{FIELD_SPLITOR}"

    def record(self, msg_id: str, tags: str | None, keys: str | None, body_length: int, offset_msg_id: str) -> str:
        s = CONTENT_SPLITOR
        return (
            f"{self._head}{msg_id}{s}{_text(tags)}{s}{_text(keys)}{self._store}{body_length}{self._mid}"
            f"{offset_msg_id}{self._end}"
        )


@dataclass(frozen=True, slots=True)
class EndTransactionTrace:
    """One END_TRANSACTION (TraceType.EndTransaction): the half's id, the decision, from a check-back or not."""

    timestamp_ms: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str | None
    keys: str | None
    store_host: str
    transaction_id: str | None
    #: LocalTransactionState's name: COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW.
    transaction_state: str
    from_transaction_check: bool
    msg_type: MessageType = MessageType.TRANS_MSG_COMMIT

    def encode(self) -> str:
        return (
            CONTENT_SPLITOR.join(
                (
                    TraceType.END_TRANSACTION.value,
                    str(self.timestamp_ms),
                    self.region_id,
                    self.group,
                    self.topic,
                    self.msg_id,
                    _text(self.tags),
                    _text(self.keys),
                    self.store_host,
                    str(int(self.msg_type)),
                    _text(self.transaction_id),
                    self.transaction_state,
                    _bool(self.from_transaction_check),
                )
            )
            + FIELD_SPLITOR
        )


TraceRecord = PubTrace | EndTransactionTrace


def trace_keys(msg_id: str, keys: str | None) -> list[str]:
    """The keys a record adds to its trace message's KEYS: its message id, then the message's keys."""
    if not keys:
        return [msg_id]
    return [msg_id, *(k for k in keys.split(KEY_SEPARATOR) if k)]


def encoded(record: TraceRecord) -> tuple[str, list[str]]:
    """A record as pack_trace_messages takes it: its text and its keys."""
    return record.encode(), trace_keys(record.msg_id, record.keys)


def _none(text: str) -> str | None:
    return None if text == "null" else text


def decode_trace_records(body: str) -> list[TraceRecord]:
    """The records of a trace message's body (TraceDataEncoder.decoderFromTraceDataString, for the two
    producer types; the consumer types are skipped). Raises ProtocolError for a record it cannot read."""
    out: list[TraceRecord] = []
    for text in body.split(FIELD_SPLITOR):
        if not text:
            continue
        f = text.split(CONTENT_SPLITOR)
        try:
            if f[0] == TraceType.PUB.value:
                # 13 fields: no offset id; 14: with it; 15 and more: a client host follows (older writers).
                offset_msg_id, success = (f[12], f[13]) if len(f) >= 14 else ("", f[12])
                out.append(
                    PubTrace(
                        int(f[1]), f[2], f[3], f[4], f[5], _none(f[6]), _none(f[7]), f[8], int(f[9]), int(f[10]),
                        MessageType(int(f[11])), offset_msg_id, success == "true",
                    )
                )  # fmt: skip
            elif f[0] == TraceType.END_TRANSACTION.value:
                out.append(
                    EndTransactionTrace(
                        int(f[1]), f[2], f[3], f[4], f[5], _none(f[6]), _none(f[7]), f[8], _none(f[10]), f[11],
                        f[12] == "true", MessageType(int(f[9])),
                    )
                )  # fmt: skip
        except (IndexError, ValueError) as exc:
            raise ProtocolError(f"trace record {text[:80]!r} cannot be read: {exc}") from None
    return out


@dataclass(frozen=True, slots=True)
class TraceMessage:
    """The body and KEYS of one trace message."""

    body: str
    keys: list[str]


def pack_trace_messages(
    records: Iterable[tuple[str, list[str]]], max_body: int, max_keys: int
) -> Iterator[TraceMessage]:
    """Encoded records (text, keys) joined into trace messages of at most ``max_body`` characters of body
    and ``max_keys`` characters of KEYS (AsyncTraceDispatcher sends a segment once it passes maxMsgSize -
    10,000; the KEYS bound keeps the properties under the 32 KiB a broker takes). Keys are deduplicated,
    in order."""
    parts: list[str] = []
    keys: dict[str, None] = {}
    size = keys_size = 0
    for text, record_keys in records:
        added = sum(len(k) + 1 for k in record_keys if k not in keys)
        if parts and (size + len(text) > max_body or keys_size + added > max_keys):
            yield TraceMessage("".join(parts), list(keys))
            parts, keys, size, keys_size = [], {}, 0, 0
            added = sum(len(k) + 1 for k in dict.fromkeys(record_keys))
        parts.append(text)
        size += len(text)
        keys.update(dict.fromkeys(record_keys))
        keys_size += added
    if parts:
        yield TraceMessage("".join(parts), list(keys))


def split_ids(joined: str, count: int) -> Sequence[str]:
    """A batch's comma-joined ids, one per message (padded with "" when the answer named fewer)."""
    ids = joined.split(",") if joined else []
    return ids + [""] * (count - len(ids)) if len(ids) < count else ids
