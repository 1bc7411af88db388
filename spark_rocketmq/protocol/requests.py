"""Send requests as DefaultMQProducerImpl builds them: checks, properties, compression, MessageBatch
bodies and the SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE command. No I/O, no clock: the caller gives the
UNIQ_KEYs and the born timestamp.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add, attrgetter
from typing import TYPE_CHECKING, NamedTuple

from ..errors import InvalidMessageError
from .codes import RequestCode, SerializeType, SysFlag
from .command import RemotingCommand
from .headers import send_header_template
from .message import (
    BATCH_RECORD_OVERHEAD,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    batch_record_frame,
    check_body,
    check_properties_length,
    compress_body,
    encode_hashmap_properties,
    validate_topic,
)
from .properties import encoded_properties, properties_need_full_check, properties_size_bound
from .uniq_id import check_uniq_id

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12 on

#: MessageConst.PROPERTY_INSTANCE_ID: the namespace of a namespaced producer.
PROPERTY_INSTANCE_ID = "INSTANCE_ID"
#: The zlib level DefaultMQProducer compresses single bodies with.
COMPRESS_LEVEL = 5

Body = bytes | memoryview

#: The properties of a message with no tags, keys, user properties or delay, around its UNIQ_KEY.
_PLAIN_PREFIX = f"{PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}{NAME_VALUE_SEPARATOR}".encode()
_PLAIN_SUFFIX = {
    wait: f"{PROPERTY_SEPARATOR}{PROPERTY_WAIT_STORE_MSG_OK}{NAME_VALUE_SEPARATOR}{str(wait).lower()}".encode()
    for wait in (True, False)
}
#: properties_size_bound of such a message (a bound of its properties' bytes with any UNIQ_KEY).
_PLAIN_PROPERTIES_BOUND = 64 * 4


@dataclass(slots=True)
class SendRequest:
    """A send request ready for the wire, but for its queue and born timestamp. Not frozen (one is made
    per message, and a frozen dataclass's fields cost more to set than the rest of making it); nothing
    changes one once made."""

    code: int
    #: Topic as the user named it (without namespace).
    topic: str
    #: Topic on the wire ("namespace%topic" for a namespaced producer).
    wire_topic: str
    body: Body
    properties: str
    sys_flag: int
    flag: int
    batch: bool
    #: Messages in the request.
    count: int
    #: The UNIQ_KEY, comma-joined for a batch ("" when a pre-encoded batch came without its keys).
    msg_id: str
    #: A timer message (TIMER_* property): only a broker that serves timer messages may take it.
    timer: bool = False


def wrap_namespace(namespace: str | None, name: str) -> str:
    """NamespaceUtil.wrapNamespace: "namespace%name" (a name already wrapped is kept)."""
    if not namespace or name.startswith(f"{namespace}%"):
        return name
    return f"{namespace}%{name}"


def message_request(
    msg: Message,
    uniq_key: str,
    *,
    max_message_size: int,
    compress_over: int,
    namespace: str | None = None,
    extra: Mapping[str, str] | None = None,
    sys_flag: int = 0,
) -> SendRequest:
    """One message (SEND_MESSAGE_V2): checked, its properties encoded, its body compressed when large.
    ``extra``: properties the sender adds after the message's own; ``sys_flag``: flags besides compression."""
    if not isinstance(msg, Message):
        raise InvalidMessageError(f"expected a Message, got {type(msg).__name__}")
    topic = validate_topic(msg.topic)
    body = check_body(topic, msg.body, max_message_size)
    if namespace:
        # DefaultMQProducerImpl.sendKernelImpl: a namespaced producer tags each message with INSTANCE_ID.
        extra = {**(extra or {}), PROPERTY_INSTANCE_ID: namespace}
    uniq = check_uniq_id(msg.uniq_key) if msg.uniq_key is not None else uniq_key
    props = encoded_properties(msg, uniq, extra)
    check_properties_length(topic, props.encode("utf-8"))
    if len(body) >= compress_over:
        body = compress_body(body, COMPRESS_LEVEL)
        sys_flag |= SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB
    return SendRequest(
        code=RequestCode.SEND_MESSAGE_V2,
        topic=topic,
        wire_topic=wrap_namespace(namespace, topic),
        body=body,
        properties=props,
        sys_flag=sys_flag,
        flag=msg.flag,
        batch=False,
        count=1,
        msg_id=uniq,
        timer=msg.is_timer,
    )


class BatchCheck(NamedTuple):
    """What check_batch found: the topic; whether every message is plain (no tags, keys, properties,
    delay, timer or id of its own, and item 0's flag: batch_bodies then writes them in one go); whether
    it stopped at a timer message (allow_timers: the caller sends those alone and checks the rest
    itself)."""

    topic: str
    plain: bool
    has_timers: bool = False


def check_batch(messages: Sequence[Message], max_message_size: int, *, allow_timers: bool = False) -> BatchCheck:
    """MessageBatch.generateFromList's checks and every record's, before anything is encoded. A timer
    message is refused, or with ``allow_timers`` ends the check at once (``has_timers``)."""
    if not messages:
        raise InvalidMessageError("send_batch got no messages")
    topic = validate_topic(messages[0].topic if isinstance(messages[0], Message) else None)
    if topic.startswith("%RETRY%"):
        raise InvalidMessageError(f"topic {topic!r}: retry topics cannot be sent to in a batch")
    wait = messages[0].wait_store_msg_ok
    flag = messages[0].flag
    # A plain message (no tags, keys, properties, delay or id of its own) whose body leaves room for
    # the largest properties such a message can have passes every check below: one test, no calls.
    plain_body_limit = max_message_size - BATCH_RECORD_OVERHEAD - _PLAIN_PROPERTIES_BOUND
    plain = True
    for i, msg in enumerate(messages):
        if (
            type(msg) is Message
            and type(msg.body) is bytes
            and 0 < len(msg.body) <= plain_body_limit
            and msg.topic == topic
            and not msg.delay_level
            and msg.deliver_time_ms is None
            and msg.delay_time_ms is None
            and msg.delay_time_sec is None
            and msg.wait_store_msg_ok == wait
            and msg.flag == flag
            and msg.uniq_key is None
            and not msg.tags
            and not msg.keys
            and not msg.properties
            and not msg._extra
        ):
            continue
        if allow_timers and isinstance(msg, Message) and msg.is_timer:
            return BatchCheck(topic, False, True)
        _check_batch_item(i, msg, topic, wait, max_message_size)
        plain = False
    return BatchCheck(topic, plain)


def _check_batch_item(i: int, msg: Message, topic: str, wait: bool, max_message_size: int) -> None:
    if not isinstance(msg, Message):
        raise InvalidMessageError(f"batch item {i}: expected a Message, got {type(msg).__name__}")
    if msg.topic != topic:
        raise InvalidMessageError(
            f"batch item {i}: topic {msg.topic!r} differs from {topic!r}; a batch goes to one topic"
        )
    if msg.delay_level:
        raise InvalidMessageError(
            f"batch item {i} (topic {topic!r}): delayed messages (delay_level) cannot be sent in a batch"
        )
    if msg.is_timer:
        raise InvalidMessageError(
            f"batch item {i} (topic {topic!r}): timer messages (a delivery time) cannot be sent in a batch: "
            "a broker ignores the time inside a MessageBatch"
        )
    if msg.wait_store_msg_ok != wait:
        raise InvalidMessageError(
            f"batch item {i} (topic {topic!r}): wait_store_msg_ok differs from item 0; "
            "a batch's messages must all agree on it"
        )
    body = msg.body
    if type(body) is not bytes or not body or len(body) > max_message_size:
        body = check_body(topic, body, max_message_size)
    if msg.uniq_key is not None:
        check_uniq_id(msg.uniq_key)
    if (
        properties_need_full_check(msg)
        or BATCH_RECORD_OVERHEAD + len(body) + properties_size_bound(msg) > max_message_size
    ):
        props = encoded_properties(msg, msg.uniq_key or "0" * 32).encode("utf-8")  # raises if invalid
        check_properties_length(topic, props)
        size = BATCH_RECORD_OVERHEAD + len(body) + len(props)
        if size > max_message_size:
            raise InvalidMessageError(
                f"batch item {i} (topic {topic!r}): {size} bytes encoded, over max_message_size {max_message_size}"
            )


def batch_bodies(
    messages: Sequence[Message], uniq_keys: Sequence[str], limit: int, *, plain: bool = False
) -> Iterator[tuple[bytes, int, list[str]]]:
    """Checked messages as MessageBatch bodies of at most ``limit`` bytes: (body, count, UNIQ_KEYs) each.

    ``uniq_keys[i]`` is used for a message without its own uniq_key. One body is encoded at a time,
    so sending can start before the last is built.

    Bytes as encode_batch_body((flag, body, encoded_properties(...)) of each message) gives them. A
    message with no tags, keys, properties or delay has the properties "UNIQ_KEY\x01<id>\x02WAIT\x01<wait>"
    (that order for every such message, simple_properties_template): its record is written from
    constant pieces and the id, without formatting a properties string. ``plain``: check_batch found
    every message so, of one flag (BatchCheck.plain); each body is then joined from those pieces by
    C-level iteration (_plain_bodies), without a Python step per message.
    """
    if plain:
        shortcut = _plain_bodies(messages, uniq_keys, limit)
        if shortcut is not None:
            yield from shortcut
            return
    parts: list[bytes] = []
    ids: list[str] = []
    size = 0
    # What surrounds the id of a plain message depends on (body length, flag, id length, wait) only:
    # kept from the last plain record and remade when one of them changes.
    last: tuple[int, int, int, object] = (-1, 0, 0, None)
    head = mid = suffix = b""
    plain_size = 0
    for msg, generated in zip(messages, uniq_keys, strict=True):
        body = msg.body
        if type(body) is not bytes:
            body = bytes(body)
        uniq = generated if msg.uniq_key is None else msg.uniq_key
        if not (msg.tags or msg.keys or msg.properties or msg._extra or msg.delay_level):
            uniq_bytes = uniq.encode("utf-8")
            shape = (len(body), msg.flag, len(uniq_bytes), msg.wait_store_msg_ok)
            if shape != last:
                last = shape
                suffix = _PLAIN_SUFFIX[bool(shape[3])]
                props_len = len(_PLAIN_PREFIX) + shape[2] + len(suffix)
                plain_size = BATCH_RECORD_OVERHEAD + shape[0] + props_len
                head, mid = batch_record_frame(shape[1], shape[0], props_len)
                mid += _PLAIN_PREFIX
            if size + plain_size > limit and ids:
                yield b"".join(parts), len(ids), ids
                parts, ids, size = [], [], 0
            parts += (head, body, mid, uniq_bytes, suffix)
            size += plain_size
        else:
            props = encoded_properties(msg, uniq).encode("utf-8")
            record_size = BATCH_RECORD_OVERHEAD + len(body) + len(props)
            if size + record_size > limit and ids:
                yield b"".join(parts), len(ids), ids
                parts, ids, size = [], [], 0
            head_of_record, props_len_bytes = batch_record_frame(msg.flag, len(body), len(props))
            parts += (head_of_record, body, props_len_bytes, props)
            size += record_size
        ids.append(uniq)
    if ids:
        yield b"".join(parts), len(ids), ids


_BODY = attrgetter("body")


def _plain_bodies(
    messages: Sequence[Message], uniq_keys: Sequence[str], limit: int
) -> Iterator[tuple[bytes, int, list[str]]] | None:
    """batch_bodies of plain messages of one flag (checked by check_batch), with ASCII ids of one width;
    None otherwise. The same bytes as the loop in batch_bodies."""
    count = len(uniq_keys)
    if count == 0 or count != len(messages):
        return None  # the loop says what is wrong (or yields nothing)
    width = len(uniq_keys[0])
    joined = ",".join(uniq_keys)
    # Ids of one width without commas: exactly count - 1 commas, each where an id of that width ends.
    if (
        len(joined) != count * (width + 1) - 1
        or joined.count(",") != count - 1
        or joined[width :: width + 1] != "," * (count - 1)
        or not joined.isascii()
    ):
        return None
    flag = messages[0].flag
    ids = joined.encode("ascii").split(b",")
    bodies = list(map(_BODY, messages))
    lengths = list(map(len, bodies))
    suffix = _PLAIN_SUFFIX[bool(messages[0].wait_store_msg_ok)]
    props_len = len(_PLAIN_PREFIX) + width + len(suffix)
    frames = {n: batch_record_frame(flag, n, props_len) for n in set(lengths)}
    heads = {n: head for n, (head, _) in frames.items()}
    mid = frames[lengths[0]][1] + _PLAIN_PREFIX  # the properties length: the same for every record
    overhead = BATCH_RECORD_OVERHEAD + props_len
    uniform = len(heads) == 1
    # Where each record ends, counted from the first: the cuts at ``limit`` bytes a body (bodies of one
    # length: so many records a body).
    ends = [] if uniform else list(accumulate(map(add, lengths, repeat(overhead))))
    per_body = max(1, limit // (lengths[0] + overhead))

    def records(start: int, end: int) -> bytes:
        """Records start..end: the five pieces of each laid out by slice assignment, then one join."""
        count = end - start
        parts = [mid] * (5 * count)
        parts[0::5] = [heads[lengths[0]]] * count if uniform else list(map(heads.__getitem__, lengths[start:end]))
        parts[1::5] = bodies[start:end]
        parts[3::5] = ids[start:end]
        parts[4::5] = [suffix] * count
        return b"".join(parts)

    def bodies_of() -> Iterator[tuple[bytes, int, list[str]]]:
        start, base = 0, 0
        while start < len(bodies):
            if uniform:
                end = min(start + per_body, len(bodies))
            else:
                end = max(bisect_right(ends, base + limit, lo=start), start + 1)
                base = ends[end - 1]
            yield records(start, end), end - start, list(uniq_keys[start:end])
            start = end

    return bodies_of()


def batch_properties(wait_store_msg_ok: bool, namespace: str | None) -> str:
    """The properties of a MessageBatch itself (header field "i"): WAIT from its messages, INSTANCE_ID."""
    props = {PROPERTY_WAIT_STORE_MSG_OK: "true" if wait_store_msg_ok else "false"}
    if namespace:
        props[PROPERTY_INSTANCE_ID] = namespace
    return encode_hashmap_properties(props)


def batch_body_request(
    topic: str,
    body: Buffer,
    count: int,
    uniq_keys: Sequence[str] | None,
    *,
    max_message_size: int,
    wait_store_msg_ok: bool = True,
    namespace: str | None = None,
) -> SendRequest:
    """An encoded MessageBatch body (any buffer, written without a copy) of ``count`` messages."""
    topic = validate_topic(topic)
    view: Body
    if isinstance(body, bytes | memoryview):
        view = body
    elif isinstance(body, bytearray):
        view = bytes(body)
    else:
        try:  # a pyarrow Buffer slice, ...
            view = memoryview(body)
        except TypeError:  # not a buffer, whatever its annotation says
            raise InvalidMessageError(
                f"topic {topic!r}: a batch body must be bytes or a buffer, not {type(body).__name__}"
            ) from None
    if isinstance(view, memoryview) and (view.format != "B" or view.ndim != 1):
        view = view.cast("B")
    if len(view) == 0:
        raise InvalidMessageError(f"topic {topic!r}: a batch body must not be empty")
    if len(view) > max_message_size:
        raise InvalidMessageError(
            f"topic {topic!r}: batch body of {len(view)} bytes is over max_message_size "
            f"{max_message_size}; split it into smaller requests"
        )
    if count <= 0:
        raise InvalidMessageError(f"topic {topic!r}: a batch body holds at least one message (count={count})")
    if uniq_keys is not None and len(uniq_keys) != count:
        raise InvalidMessageError(f"topic {topic!r}: {len(uniq_keys)} uniq_keys for {count} messages")
    return SendRequest(
        code=RequestCode.SEND_BATCH_MESSAGE,
        topic=topic,
        wire_topic=wrap_namespace(namespace, topic),
        body=view,
        properties=batch_properties(wait_store_msg_ok, namespace),
        sys_flag=0,
        flag=0,
        batch=True,
        count=count,
        msg_id=",".join(uniq_keys) if uniq_keys is not None else "",
    )


def send_ext(
    req: SendRequest,
    *,
    group: str,
    queue_id: int,
    broker_name: str,
    born_timestamp: int,
    default_topic: str,
    default_topic_queue_nums: int,
) -> bytes:
    """The extFields of one attempt of ``req`` to queue ``queue_id`` of ``broker_name``, in the ROCKETMQ
    serialization, written from the template of its group, topic and broker (headers.send_header_template)."""
    template = send_header_template(
        group, req.wire_topic, default_topic, default_topic_queue_nums, req.batch, broker_name
    )
    return template.render(queue_id, req.sys_flag, born_timestamp, req.flag, req.properties)


def send_command(
    req: SendRequest,
    *,
    group: str,
    queue_id: int,
    broker_name: str,
    born_timestamp: int,
    default_topic: str,
    default_topic_queue_nums: int,
) -> RemotingCommand:
    """The command of one attempt of ``req`` to queue ``queue_id`` of ``broker_name``, in the ROCKETMQ
    serialization (as Java's own benchmarks send: a broker reads and answers it with less work than
    JSON), its extFields from send_ext. (The send engine writes send_ext's bytes and the body without
    making the command: command.rocketmq_request_head.)"""
    ext = send_ext(
        req,
        group=group,
        queue_id=queue_id,
        broker_name=broker_name,
        born_timestamp=born_timestamp,
        default_topic=default_topic,
        default_topic_queue_nums=default_topic_queue_nums,
    )
    return send_request_command(req, ext)


def send_request_command(req: SendRequest, ext: bytes) -> RemotingCommand:
    """``req`` as a command with the extFields ``ext`` of one of its attempts (send_ext)."""
    return RemotingCommand(code=req.code, body=req.body, serialize_type=SerializeType.ROCKETMQ, ext_bytes=ext)
