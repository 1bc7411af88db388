"""Property-based tests: every codec round-trips, and garbage only ever raises ProtocolError."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import struct

from hypothesis import example, given
from hypothesis import strategies as st

from spark_rocketmq.errors import ProtocolError
from spark_rocketmq.protocol.codes import LanguageCode, RequestCode, SerializeType
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.frame import (
    FrameDecoder,
    decode_frame,
    decode_frame_body,
    decode_json_header,
    decode_rocketmq_header,
)
from spark_rocketmq.protocol.headers import SendMessageRequestHeader
from spark_rocketmq.protocol.message import (
    BatchRecord,
    decode_batch_body,
    decode_properties,
    encode_batch_body,
    encode_properties,
)
from spark_rocketmq.protocol.route import BrokerData, QueueData, TopicRouteData
from spark_rocketmq.protocol.stored import decode_stored_messages, encode_stored_message

INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
#: Any text that can be encoded as UTF-8 (no lone surrogates).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
SHORT_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
BODY = st.binary(max_size=300)
LANGUAGES = st.sampled_from([c.name for c in LanguageCode])


# -- RemotingCommand ---------------------------------------------------------------------------
@st.composite
def commands(draw, serialize_type: SerializeType | None = None) -> RemotingCommand:
    ser = draw(st.sampled_from(list(SerializeType))) if serialize_type is None else serialize_type
    ext = draw(st.none() | st.dictionaries(SHORT_TEXT, TEXT, max_size=8))
    remark = draw(st.none() | TEXT)
    if ser == SerializeType.ROCKETMQ:
        # The binary header has no way to say "empty" apart from "absent".
        ext = ext or None
        remark = remark or None
        numbers = (INT16, INT16, INT32, INT32)
    else:
        big = st.integers(-(2**63), 2**63 - 1)
        numbers = (big, big, big, big)
    code, version, opaque, flag = (draw(s) for s in numbers)
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        ext_fields=ext,
        remark=remark,
        body=draw(BODY),
        language=draw(LANGUAGES),
        version=version,
        serialize_type=ser,
    )


@given(commands())
def test_command_round_trips_through_a_frame(cmd):
    raw = cmd.encode()
    assert struct.unpack_from(">I", raw)[0] == len(raw) - 4
    assert raw[4] == int(cmd.serialize_type)
    back = decode_frame(raw)
    assert back == cmd
    assert back.encode() == raw


@given(commands(SerializeType.JSON))
def test_json_header_round_trips(cmd):
    header = cmd.encode_header()
    back = decode_json_header(header)
    back.body = cmd.body
    assert back == cmd
    assert list(json.loads(header)) == sorted(json.loads(header))


@given(commands(SerializeType.ROCKETMQ))
def test_rocketmq_header_round_trips(cmd):
    back = decode_rocketmq_header(cmd.encode_header())
    back.body = cmd.body
    assert back == cmd


@given(
    st.lists(commands(), min_size=1, max_size=6),
    st.lists(st.integers(0, 4000), max_size=12),
)
def test_frame_decoder_yields_the_same_commands_wherever_the_stream_is_cut(cmds, cuts):
    stream = b"".join(c.encode() for c in cmds)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for start, end in itertools.pairwise(points):
        out.extend(decoder.feed(stream[start:end]))
    assert out == cmds
    assert decoder.buffered == 0


@given(st.lists(commands(), min_size=1, max_size=4))
def test_frame_decoder_byte_by_byte(cmds):
    stream = b"".join(c.encode() for c in cmds)
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for i in range(len(stream)):
        out.extend(decoder.feed(stream[i : i + 1]))
    assert out == cmds


# -- properties, batches, stored messages ------------------------------------------------------
PROP_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), min_size=1, max_size=30
)


@given(st.dictionaries(PROP_TEXT, PROP_TEXT, max_size=12))
def test_properties_round_trip(props):
    encoded = encode_properties(props)
    assert not encoded.endswith("\x02")
    assert decode_properties(encoded) == props
    assert list(decode_properties(encoded)) == list(props)


PROPS = st.dictionaries(PROP_TEXT, PROP_TEXT, max_size=6)


@given(st.lists(st.tuples(INT32, BODY, PROPS), max_size=8))
def test_batch_body_round_trips(records):
    body = encode_batch_body((flag, data, encode_properties(p).encode()) for flag, data, p in records)
    assert decode_batch_body(body) == [BatchRecord(flag, data, p) for flag, data, p in records]


IPV4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
HOST = st.tuples(IPV4, INT32)
TOPIC = st.text("abcXYZ019_-%|", min_size=1, max_size=127)


@st.composite
def stored_messages(draw) -> dict:
    return {
        "topic": draw(TOPIC),
        "queue_id": draw(INT32),
        "queue_offset": draw(INT64),
        "commit_log_offset": draw(INT64),
        "sys_flag": draw(INT32) & ~0x30,
        "flag": draw(INT32),
        "born_timestamp": draw(INT64),
        "born_host": draw(HOST),
        "store_timestamp": draw(INT64),
        "store_host": draw(HOST),
        "body": draw(BODY),
        "properties": encode_properties(draw(PROPS)),
        "reconsume_times": draw(INT32),
        "prepared_transaction_offset": draw(INT64),
    }


@given(st.lists(stored_messages(), min_size=1, max_size=4))
def test_stored_messages_round_trip(messages):
    raw = b"".join(encode_stored_message(**m) for m in messages)
    decoded = decode_stored_messages(raw)
    assert len(decoded) == len(messages)
    for got, m in zip(decoded, messages, strict=True):
        assert got.topic == m["topic"]
        assert got.body == m["body"]
        assert got.properties == decode_properties(m["properties"])
        for name in (
            "queue_id",
            "queue_offset",
            "commit_log_offset",
            "sys_flag",
            "flag",
            "born_timestamp",
            "born_host",
            "store_timestamp",
            "store_host",
            "reconsume_times",
            "prepared_transaction_offset",
        ):
            assert getattr(got, name) == m[name], name


# -- routes ------------------------------------------------------------------------------------
#: Broker names and addresses full of JSON-looking traps for the integer-key rewriting.
TRAP_TEXT = st.text(st.sampled_from([*'ab0{}[]:,"\\ 1-', "\u00e9", "\n"]), min_size=1, max_size=12)


@st.composite
def routes(draw) -> TopicRouteData:
    names = draw(st.lists(TRAP_TEXT, min_size=0, max_size=4, unique=True))
    return TopicRouteData(
        queue_datas=[
            QueueData(n, draw(INT32), draw(INT32), draw(INT32), draw(INT32)) for n in names if draw(st.booleans())
        ],
        broker_datas=[
            BrokerData(draw(TRAP_TEXT), n, dict(sorted(draw(st.dictionaries(INT64, TRAP_TEXT, max_size=3)).items())))
            for n in names
        ],
        order_topic_conf=draw(st.none() | TRAP_TEXT),
    )


@given(routes(), st.booleans())
def test_route_round_trips_in_both_dialects(route, standard):
    raw = route.to_json(standard=standard)
    assert TopicRouteData.from_json(raw) == route
    if standard:
        json.loads(raw)  # the standard dialect is strict JSON


# -- garbage in, ProtocolError out -------------------------------------------------------------
GARBAGE = st.binary(max_size=400)


def mutated(raw: bytes) -> st.SearchStrategy[bytes]:
    """raw truncated somewhere and with a few bytes overwritten: garbage that gets past the first check."""
    if not raw:
        return st.just(raw)
    edits = st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), max_size=4)

    def apply(args: tuple[int, list[tuple[int, int]]]) -> bytes:
        cut, changes = args
        out = bytearray(raw)
        for pos, value in changes:
            out[pos] = value
        return bytes(out[:cut])

    return st.tuples(st.integers(0, len(raw)), edits).map(apply)


def _mutated_stored(messages: list[dict]) -> st.SearchStrategy[bytes]:
    return mutated(b"".join(encode_stored_message(**m) for m in messages))


def _only_protocol_errors(fn, *args):
    """fn(*args) either returns or raises ProtocolError; any other exception fails the test."""
    with contextlib.suppress(ProtocolError):
        fn(*args)


def _framed(header_type: int, header: bytes, body: bytes) -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), (header_type << 24) | len(header)) + header + body


JSON_GARBAGE = st.one_of(
    GARBAGE,
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
        max_leaves=12,
    ).map(lambda v: json.dumps(v).encode()),
    st.dictionaries(
        st.sampled_from(["code", "opaque", "flag", "version", "language", "remark", "extFields", "x"]),
        st.none() | st.booleans() | st.integers() | st.floats() | TEXT | st.lists(st.integers(), max_size=2),
        max_size=8,
    ).map(lambda d: json.dumps(d).encode()),
)


@given(st.one_of(GARBAGE, commands().flatmap(lambda c: mutated(c.encode()))))
@example(b"")
@example(b"\x00\x00\x00\x00")
@example(b"\x00\x00\x00\x04\x00\x00\x00\x00")
@example(b"\x00\x00\x00\x05\x00\x00\x00\x01[")
@example(b"\x00\x00\x00\x04\x01\x00\x00\x00")
@example(b"\x00\x00\x00\x04\x07\x00\x00\x00")
def test_decode_frame_garbage(raw):
    _only_protocol_errors(decode_frame, raw)
    _only_protocol_errors(decode_frame_body, raw)


@given(JSON_GARBAGE)
@example(b"[" * 100_000)
@example(b'{"code":' + b"9" * 5000 + b"}")
@example(b'{"code":"--5"}')
@example(b'{"code":"\xc2\xb2"}')
@example(b'{"code":1,"extFields":{"a":' + b"[" * 50_000 + b"}}")
def test_decode_json_header_garbage(raw):
    _only_protocol_errors(decode_json_header, raw)
    _only_protocol_errors(decode_frame, _framed(0, raw, b""))


@given(st.one_of(GARBAGE, commands(SerializeType.ROCKETMQ).flatmap(lambda c: mutated(c.encode_header()))))
@example(b"\x00" * 17 + b"\xff\xff\xff\xff")
@example(b"\x00" * 13 + b"\x00\x00\x00\x02\xff\xfe\x00\x00\x00\x00")
@example(b"\x00" * 17 + b"\x00\x00\x00\x07\x00\x05abc")
def test_decode_rocketmq_header_garbage(raw):
    _only_protocol_errors(decode_rocketmq_header, raw)
    _only_protocol_errors(decode_frame, _framed(1, raw, b""))


@given(st.lists(GARBAGE, max_size=6), st.integers(4, 1 << 20))
@example([b"\xff\xff\xff\xff"], 1 << 20)
@example([b"\x00\x00\x00\x03"], 1 << 20)
@example([b"\x00\x00", b"\x00\x08\x00\x00\x00\x00", b"{}"], 1 << 20)
def test_frame_decoder_garbage(chunks, max_frame_length):
    decoder = FrameDecoder(max_frame_length=max_frame_length)
    try:
        for chunk in chunks:
            for cmd in decoder.feed(chunk):
                assert isinstance(cmd, RemotingCommand)
    except ProtocolError:
        pass


ROUTE_GARBAGE = st.one_of(
    GARBAGE,
    JSON_GARBAGE,
    st.builds(
        lambda q, b, o: json.dumps({"queueDatas": q, "brokerDatas": b, "orderTopicConf": o}).encode(),
        st.lists(
            st.dictionaries(
                st.sampled_from(["brokerName", "perm", "readQueueNums", "x"]),
                st.integers() | st.floats() | TEXT | st.none(),
            ),
            max_size=3,
        ),
        st.lists(
            st.dictionaries(
                st.sampled_from(["brokerName", "brokerAddrs", "cluster"]),
                st.integers() | TEXT | st.dictionaries(TEXT, TEXT, max_size=2),
            ),
            max_size=3,
        ),
        st.none() | TEXT | st.integers(),
    ),
)


@given(st.one_of(ROUTE_GARBAGE, routes().flatmap(lambda r: mutated(r.to_json(standard=False)))))
@example(b'{"queueDatas":[{"brokerName":"a","perm":Infinity}]}')
@example(b'{"queueDatas":[{"brokerName":"a","perm":1e400}]}')
@example(b'{"queueDatas":[{"brokerName":"a","perm":NaN}]}')
@example(b'{"brokerDatas":[{"brokerName":"a","brokerAddrs":{' + b"9" * 5000 + b':"x"}}]}')
@example(b'{"perm":' + b"9" * 5000 + b"}")
@example(b"[" * 100_000)
@example(b'{"a":"\\')
@example(b'{"brokerDatas":{"a":1}}')
@example(b"123")
def test_route_from_json_garbage(raw):
    _only_protocol_errors(TopicRouteData.from_json, raw)


BATCH_BODIES = st.lists(st.tuples(INT32, BODY, PROPS), min_size=1, max_size=3).map(
    lambda rs: encode_batch_body((f, b, encode_properties(p).encode()) for f, b, p in rs)
)


@given(st.one_of(GARBAGE, BATCH_BODIES.flatmap(mutated)))
@example(b"\x00\x00\x00\x16" + b"\x00" * 17)
@example(b"\x7f\xff\xff\xff" + b"\x00" * 30)
@example(b"\x00\x00\x00\x17" + b"\x00" * 15 + b"\x00\x00\x00\x00\x00\x01\xff")
def test_decode_batch_body_garbage(raw):
    _only_protocol_errors(decode_batch_body, raw)


@given(st.one_of(GARBAGE, st.lists(stored_messages(), min_size=1, max_size=2).flatmap(_mutated_stored)))
@example(b"\xff\xff\xff\xff" + b"\x00" * 100)
@example(b"\x00\x00\x00\x01")
@example(b"\x00\x00\x00\x5b" + b"\xda\xa3\x20\xa7" + b"\x00" * 83)
def test_decode_stored_messages_garbage(raw):
    _only_protocol_errors(decode_stored_messages, raw)


SEND_FIELD_NAMES = [
    *"abcdefghijklmn",
    "producerGroup",
    "topic",
    "queueId",
    "maxReconsumeTimes",
    "batch",
    "sysFlag",
]


@given(
    st.sampled_from([RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, 0]),
    st.none() | st.dictionaries(st.sampled_from(SEND_FIELD_NAMES), TEXT | INT64.map(str), max_size=16),
)
@example(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "T", "e": "0", "l": "\u00b2"})
@example(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "T", "e": "0", "l": "--1"})
@example(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "T", "e": "9" * 5000})
@example(RequestCode.SEND_MESSAGE, {"producerGroup": "g", "topic": "T", "queueId": "\u00b2"})
def test_send_header_from_garbage_fields(code, fields):
    cmd = RemotingCommand(code=code, ext_fields=fields)
    try:
        header = SendMessageRequestHeader.from_command(cmd)
    except ProtocolError:
        return
    assert isinstance(header.queue_id, int)


@given(GARBAGE)
def test_send_header_from_garbage_frames(raw):
    try:
        cmd = decode_frame_body(raw)
    except ProtocolError:
        return
    _only_protocol_errors(SendMessageRequestHeader.from_command, cmd)


@given(commands(SerializeType.JSON), st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE]))
def test_send_header_from_random_commands(cmd, code):
    cmd.code = code
    _only_protocol_errors(SendMessageRequestHeader.from_command, cmd)


@st.composite
def send_headers(draw) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group=draw(SHORT_TEXT),
        topic=draw(TOPIC),
        queue_id=draw(INT32),
        sys_flag=draw(INT32),
        born_timestamp=draw(INT64),
        flag=draw(INT32),
        properties=encode_properties(draw(PROPS)),
        default_topic=draw(TOPIC),
        default_topic_queue_nums=draw(INT32),
        reconsume_times=draw(INT32),
        unit_mode=draw(st.booleans()),
        batch=draw(st.booleans()),
        broker_name=draw(st.none() | SHORT_TEXT),
        max_reconsume_times=draw(st.none() | INT32),
    )


@given(send_headers(), st.booleans())
def test_send_header_round_trips(header, v2):
    if v2:
        code = RequestCode.SEND_BATCH_MESSAGE if header.batch else RequestCode.SEND_MESSAGE_V2
        fields = header.to_v2_fields()
    else:
        code = RequestCode.SEND_MESSAGE
        fields = header.to_v1_fields()
        header = dataclasses.replace(header, max_reconsume_times=None)  # V1 fields do not carry it
    cmd = decode_frame(RemotingCommand(code=code, ext_fields=fields).encode())
    assert SendMessageRequestHeader.from_command(cmd) == header
