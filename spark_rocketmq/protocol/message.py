"""Messages: properties, validation (Validators), batch bodies (MessageDecoder.encodeMessages), compression."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import InvalidMessageError, ProtocolError
from .javamap import hashmap_ordered
from .timer import timer_properties

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"

#: MessageConst.STRING_HASH_SET of 5.x (4.9.8's 31 names and 20 more): names a user property may
#: not take. 5.x brokers act on the later ones: a TIMER_* property schedules a message sent alone,
#: and is ignored inside a batch (the delay would be lost), so no user property may set one.
RESERVED_PROPERTY_NAMES = frozenset(
    {
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
        "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
        "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
        "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "INSTANCE_ID", "CORRELATION_ID",
        "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        # 5.x
        "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO",
        "EXTEND_UNIQ_INFO", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
        "__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#",
    }
)  # fmt: skip

TOPIC_MAX_LENGTH = 127
#: Properties are written with a 2-byte signed length: Short.MAX_VALUE bytes at most.
MAX_PROPERTIES_LENGTH = 32767
MAX_DELAY_LEVEL = 18
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024

#: TopicValidator.VALID_PATTERN_STR (matched whole: fullmatch).
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")

#: MixAll.RETRY_GROUP_TOPIC_PREFIX and DLQ_GROUP_TOPIC_PREFIX: a consumer group's retry and dead-letter topics.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: TopicValidator.SYSTEM_TOPIC_SET: topics the broker keeps for itself.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    }
)  # fmt: skip
#: TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: the only topics a 4.9.8 producer refuses to send to.
#: Other system topics stay legitimate targets (a trace dispatcher writes RMQ_SYS_TRACE_TOPIC).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
    }
)  # fmt: skip

#: Fixed bytes of one record in a batch body: totalSize, magic, bodyCRC, flag, bodyLen, propsLen.
BATCH_RECORD_OVERHEAD = 4 + 4 + 4 + 4 + 4 + 2
#: The 20 bytes before a batch record's body: totalSize, magic (0), bodyCRC (0), flag, bodyLength.
BATCH_RECORD_HEAD = struct.Struct(">iiiii")
#: A Java short, big-endian (a record's properties length).
JAVA_SHORT = struct.Struct(">h")


@dataclass
class Message:
    """A message to send: what DefaultMQProducer's Message carries, in Python names."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: Mapping[str, str] | None = None
    delay_level: int = 0
    flag: int = 0
    wait_store_msg_ok: bool = True
    #: Set to a 32-hex-char id to choose the UNIQ_KEY; otherwise the producer makes one.
    uniq_key: str | None = None
    #: Properties the client adds itself (INSTANCE_ID, __SHARDINGKEY); no dict of its own when empty.
    _extra: Mapping[str, str] | None = field(default=None, repr=False)
    #: RocketMQ 5 timer messages (Message.setDeliverTimeMs / setDelayTimeMs / setDelayTimeSec of the Java
    #: 5.x client): when a 5.x broker delivers the message; at most one of them, never with delay_level.
    deliver_time_ms: int | None = None
    delay_time_ms: int | None = None
    delay_time_sec: int | None = None

    @property
    def is_timer(self) -> bool:
        """True when the message asks for a delivery time (sent alone, to 5.x brokers only)."""
        return self.deliver_time_ms is not None or self.delay_time_ms is not None or self.delay_time_sec is not None

    @property
    def keys_string(self) -> str | None:
        if self.keys is None:
            return None
        if isinstance(self.keys, str):
            return self.keys
        return " ".join(self.keys)


def is_legal_topic_name(topic: str) -> bool:
    """TopicValidator's name rule: at most TOPIC_MAX_LENGTH characters of [%|a-zA-Z0-9_-]."""
    return len(topic) <= TOPIC_MAX_LENGTH and TOPIC_PATTERN.fullmatch(topic) is not None


#: Topic names validate_topic accepted: a send checks its topic with one set lookup. Bounded: cleared
#: when it grows past _VALID_TOPICS_MAX names.
_valid_topics: set[str] = set()
_VALID_TOPICS_MAX = 4096


def validate_topic(topic: object) -> str:
    """Validators.checkTopic + Validators.isNotAllowedSendTopic, with messages that say what to do."""
    if type(topic) is str and topic in _valid_topics:
        return topic
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidMessageError("topic is blank: give every message a topic name")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidMessageError(
            f"topic {topic[:40]!r}... is {len(topic)} characters long; RocketMQ allows {TOPIC_MAX_LENGTH}"
        )
    if not TOPIC_PATTERN.fullmatch(topic):  # fullmatch: "$" alone would accept a trailing newline
        raise InvalidMessageError(f"topic {topic!r} contains illegal characters; allowed are ^[%|a-zA-Z0-9_-]+$")
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise InvalidMessageError(
            f"topic {topic!r} is a RocketMQ system topic that producers may not send to; choose another topic"
        )
    if len(_valid_topics) >= _VALID_TOPICS_MAX:
        _valid_topics.clear()
    _valid_topics.add(topic)
    return topic


def _check_property_text(topic: str, what: str, text: str) -> None:
    if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
        raise InvalidMessageError(
            f"topic {topic!r}: {what} {text[:40]!r} contains \\x01 or \\x02, which RocketMQ uses "
            "as property separators; remove those bytes"
        )


def message_properties(msg: Message, uniq_key: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Check a message's metadata and lay out its properties as the Java client's HashMap does;
    ``extra``: properties the sender adds (a namespace's INSTANCE_ID, a half message's), after the message's.

    Raises InvalidMessageError naming the topic and the offending field.
    """
    topic = msg.topic
    props: dict[str, str] = {}
    if msg.tags:
        _check_property_text(topic, "tags", msg.tags)
        props[PROPERTY_TAGS] = msg.tags
    keys = msg.keys_string
    if keys:
        _check_property_text(topic, "keys", keys)
        props[PROPERTY_KEYS] = keys
    props[PROPERTY_WAIT_STORE_MSG_OK] = "true" if msg.wait_store_msg_ok else "false"
    if msg.delay_level:
        if not isinstance(msg.delay_level, int) or not 1 <= msg.delay_level <= MAX_DELAY_LEVEL:
            raise InvalidMessageError(
                f"topic {topic!r}: delay level {msg.delay_level!r} is outside 1..{MAX_DELAY_LEVEL}; use 0 for no delay"
            )
        props[PROPERTY_DELAY_TIME_LEVEL] = str(msg.delay_level)
    if msg.is_timer:
        if msg.delay_level:
            raise InvalidMessageError(
                f"topic {topic!r}: delay_level and a delivery time are both set; give one of them"
            )
        try:
            props.update(timer_properties(msg.deliver_time_ms, msg.delay_time_ms, msg.delay_time_sec))
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"topic {topic!r}: {exc}") from None
    for name, value in (msg.properties or {}).items():
        if not isinstance(name, str) or not isinstance(value, str) or not name.strip() or not value.strip():
            raise InvalidMessageError(
                f"topic {topic!r}: property {name!r}={value!r}: names and values must be non-blank strings"
            )
        if name in RESERVED_PROPERTY_NAMES:
            raise InvalidMessageError(f"topic {topic!r}: property name {name!r} is reserved by RocketMQ; rename it")
        _check_property_text(topic, "property", name)
        _check_property_text(topic, "property", value)
        props[name] = value
    if msg._extra:
        props.update(msg._extra)
    if extra:
        props.update(extra)
    if uniq_key is not None:
        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_key
    return hashmap_ordered(props)


def encode_hashmap_properties(props: Mapping[str, str], leave_out: str | None = None) -> str:
    """encode_properties of a java.util.HashMap into which ``props`` were put in their order (the
    table sized for all of them), ``leave_out`` then removed."""
    return encode_properties({k: v for k, v in hashmap_ordered(props).items() if k != leave_out})


def encode_properties(props: Mapping[str, str]) -> str:
    """MessageDecoder.messageProperties2String: name\\x01value pairs joined by \\x02, no trailing \\x02."""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None)


def decode_properties(text: str) -> dict[str, str]:
    """MessageDecoder.string2messageProperties (lenient: skips malformed pairs, as Java does)."""
    out: dict[str, str] = {}
    if not text:
        return out
    for pair in text.split(PROPERTY_SEPARATOR):
        if len(pair) < 3:
            continue
        sep = pair.find(NAME_VALUE_SEPARATOR)
        if 0 < sep < len(pair) - 1:
            out[pair[:sep]] = pair[sep + 1 :]
    return out


def check_properties_length(topic: str, encoded: bytes) -> None:
    if len(encoded) > MAX_PROPERTIES_LENGTH:
        raise InvalidMessageError(
            f"topic {topic!r}: properties take {len(encoded)} bytes, more than {MAX_PROPERTIES_LENGTH}; "
            "shorten keys, tags or user properties"
        )


def check_body(topic: str, body: object, max_message_size: int) -> bytes:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidMessageError(f"topic {topic!r}: body must be bytes, got {type(body).__name__}")
    if len(body) == 0:
        raise InvalidMessageError(f"topic {topic!r}: the message body is empty; RocketMQ refuses empty bodies")
    if len(body) > max_message_size:
        raise InvalidMessageError(
            f"topic {topic!r}: body of {len(body)} bytes is over max_message_size {max_message_size}; "
            "split the payload or raise max_message_size (and the brokers' maxMessageSize)"
        )
    return bytes(body)


def compress_body(body: bytes, level: int = 5) -> bytes:
    """zlib (RFC 1950) as the 4.9.8 producer writes it: level 5, stream header 78 5E."""
    return zlib.compress(body, level)


def batch_record_frame(flag: int, body_len: int, properties_len: int) -> tuple[bytes, bytes]:
    """The layout of one message inside a batch body (MessageDecoder.encodeMessage), magic and CRC left 0:
    (the head that goes before the body, the properties length that goes between body and properties).
    Every batch record encoder writes its records with it."""
    size = BATCH_RECORD_OVERHEAD + body_len + properties_len
    return BATCH_RECORD_HEAD.pack(size, 0, 0, flag, body_len), JAVA_SHORT.pack(properties_len)


def encode_batch_record(flag: int, body: bytes, properties: bytes) -> bytes:
    """One message inside a batch body."""
    head, props_len = batch_record_frame(flag, len(body), len(properties))
    return b"".join((head, body, props_len, properties))


def encode_batch_body(records: Iterable[tuple[int, bytes, bytes]]) -> bytes:
    """MessageDecoder.encodeMessages: (flag, body, encoded properties) records back to back."""
    parts: list[bytes] = []
    for flag, body, props in records:
        head, props_len = batch_record_frame(flag, len(body), len(props))
        parts += (head, body, props_len, props)
    return b"".join(parts)


@dataclass(frozen=True)
class BatchRecord:
    flag: int
    body: bytes
    properties: dict[str, str]


def decode_batch_body(data: bytes | memoryview) -> list[BatchRecord]:
    """Split a batch body back into its messages (what a broker does with SEND_BATCH_MESSAGE)."""
    view = memoryview(data)
    out: list[BatchRecord] = []
    pos = 0
    n = len(view)
    while pos < n:
        if n - pos < BATCH_RECORD_OVERHEAD:
            raise ProtocolError(f"batch body truncated at byte {pos}: {n - pos} bytes left")
        total, _magic, _crc, flag, body_len = BATCH_RECORD_HEAD.unpack_from(view, pos)
        if body_len < 0 or total < BATCH_RECORD_OVERHEAD + body_len or pos + total > n:
            raise ProtocolError(f"batch record at byte {pos} has inconsistent sizes ({total}, {body_len})")
        body = bytes(view[pos + 20 : pos + 20 + body_len])
        (props_len,) = JAVA_SHORT.unpack_from(view, pos + 20 + body_len)
        if props_len < 0 or BATCH_RECORD_OVERHEAD + body_len + props_len != total:
            raise ProtocolError(f"batch record at byte {pos}: properties length {props_len} does not fit")
        start = pos + 22 + body_len
        try:
            props = decode_properties(bytes(view[start : start + props_len]).decode("utf-8"))
        except UnicodeDecodeError:
            raise ProtocolError(f"batch record at byte {pos}: properties are not UTF-8") from None
        out.append(BatchRecord(flag, body, props))
        pos += total
    return out
