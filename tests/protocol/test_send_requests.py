"""The send path's request encoders (cached HashMap orders, extFields templates) give the general encoders'
bytes exactly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.protocol.codes import SerializeType
from spark_rocketmq.protocol.command import RemotingCommand, rocketmq_request_head
from spark_rocketmq.protocol.ext_fields import read_ext_fields, write_ext_fields
from spark_rocketmq.protocol.frame import decode_frame
from spark_rocketmq.protocol.headers import SendMessageRequestHeader, send_header_template
from spark_rocketmq.protocol.javamap import hashmap_order
from spark_rocketmq.protocol.message import Message, encode_properties, message_properties
from spark_rocketmq.protocol.properties import encoded_properties
from spark_rocketmq.protocol.requests import message_request, send_command
from spark_rocketmq.protocol.transaction import EndTransactionRequestHeader, TransactionState

text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
keys = st.one_of(st.none(), text, st.lists(text, max_size=3))
uniq = st.text("0123456789ABCDEF", min_size=32, max_size=32)


names = st.one_of(
    text, st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "b", "order-id", "\x01", " ", "{0}", "}{", "{"])
)
user_props = st.one_of(st.none(), st.dictionaries(names, text, max_size=6))


@settings(max_examples=500, deadline=None)
@given(
    tags=st.one_of(st.none(), text),
    keys=keys,
    wait=st.booleans(),
    uniq_key=uniq,
    props=user_props,
    own_extra=st.one_of(st.none(), st.dictionaries(names, text, max_size=2)),
    extra=st.one_of(st.none(), st.dictionaries(names, text, max_size=3)),
)
def test_encoded_properties_equal_message_properties(tags, keys, wait, uniq_key, props, own_extra, extra) -> None:
    msg = Message("T", b"x", tags=tags, keys=keys, wait_store_msg_ok=wait, properties=props, _extra=own_extra)
    try:
        expected = encode_properties(message_properties(msg, uniq_key, extra))
    except Exception as exc:  # the shortcut must refuse the same messages
        try:
            encoded_properties(msg, uniq_key, extra)
        except type(exc):
            return
        raise AssertionError(f"shortcut accepted what message_properties refused: {exc}") from None
    assert encoded_properties(msg, uniq_key, extra) == expected


def test_braces_in_values_are_data() -> None:
    msg = Message("T", b"x", tags="{0}{}", keys=["{1}", "}{"])
    assert encoded_properties(msg, "0" * 32) == encode_properties(message_properties(msg, "0" * 32))


def test_user_properties_and_delay_take_the_general_path() -> None:
    msg = Message("T", b"x", tags="a", properties={"p": "1", "q": "2"}, delay_level=3)
    assert encoded_properties(msg, "0" * 32) == encode_properties(message_properties(msg, "0" * 32))


@settings(max_examples=100, deadline=None)
@given(
    batch=st.booleans(),
    broker=st.one_of(st.none(), st.sampled_from(["broker-a", "b"])),
    max_rt=st.one_of(st.none(), st.integers(0, 16)),
    queue_id=st.integers(0, 1000),
)
def test_v2_fields_in_hashmap_order(batch, broker, max_rt, queue_id) -> None:
    h = SendMessageRequestHeader(
        producer_group="g",
        topic="T",
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=1795383657015,
        flag=0,
        properties="WAIT\x01true",
        batch=batch,
        broker_name=broker,
        max_reconsume_times=max_rt,
    )
    fields = h.to_v2_fields()
    assert list(fields) == hashmap_order(list(fields))
    expected = {"a": "g", "b": "T", "e": str(queue_id), "m": "true" if batch else "false"}
    assert {k: fields[k] for k in expected} == expected
    assert ("n" in fields) == (broker is not None) and ("l" in fields) == (max_rt is not None)


@settings(max_examples=300, deadline=None)
@given(
    group=st.one_of(text, st.sampled_from(["g", "%s", "%b%b", "%%", "\x00"])),
    topic=st.one_of(text, st.sampled_from(["T", "ns%T", "%d"])),
    broker=st.one_of(text, st.sampled_from(["broker-a", "%"])),
    batch=st.booleans(),
    queue_id=st.integers(0, 1 << 31),
    sys_flag=st.integers(0, 1 << 20),
    born=st.integers(0, 1 << 45),
    flag=st.integers(-(1 << 31), 1 << 31),
    props=st.one_of(
        text,
        st.text(min_size=60, max_size=400),
        st.sampled_from(["UNIQ_KEY\x01" + "0" * 32 + "\x02WAIT\x01true", "%b"]),
    ),
)
def test_send_header_template_writes_what_the_encoder_writes(
    group, topic, broker, batch, queue_id, sys_flag, born, flag, props
) -> None:
    """The template's extFields are write_ext_fields' bytes of the header's fields, in the Java
    HashMap's order, and read back as those fields."""
    header = SendMessageRequestHeader(
        producer_group=group,
        topic=topic,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=born,
        flag=flag,
        properties=props,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        batch=batch,
        broker_name=broker,
    )
    rendered = send_header_template(group, topic, "TBW102", 4, batch, broker).render(
        queue_id, sys_flag, born, flag, props
    )
    assert rendered == write_ext_fields(header.to_v2_fields())
    assert read_ext_fields(rendered, 0, len(rendered)) == header.to_v2_fields()


def test_send_command_is_the_header_in_the_rocketmq_serialization() -> None:
    msg = Message("T", b"body", tags="a", keys=["k1", "k2"], properties={"p": 'q"\\'})
    req = message_request(msg, "0" * 32, max_message_size=1 << 20, compress_over=4096)
    cmd = send_command(
        req,
        group="g",
        queue_id=3,
        broker_name="b",
        born_timestamp=5,
        default_topic="TBW102",
        default_topic_queue_nums=4,
    )
    assert cmd.serialize_type == SerializeType.ROCKETMQ and cmd.ext_bytes is not None
    header = SendMessageRequestHeader("g", "T", 3, 0, 5, 0, req.properties, broker_name="b")
    plain = RemotingCommand(
        code=req.code, ext_fields=header.to_v2_fields(), body=req.body, serialize_type=SerializeType.ROCKETMQ
    )
    assert cmd.encode() == plain.encode()
    assert decode_frame(cmd.encode()).ext_fields == header.to_v2_fields()
    assert cmd.field("b") == "T" and cmd.fields() == header.to_v2_fields()


@settings(max_examples=300, deadline=None)
@given(
    group=st.one_of(text, st.sampled_from(["g", "%s", "%b%b", "%"])),
    broker=st.one_of(st.none(), text, st.sampled_from(["broker-a", "%d"])),
    state=st.sampled_from(list(TransactionState)),
    from_check=st.booleans(),
    tsto=st.integers(0, 1 << 62),
    clo=st.integers(0, 1 << 62),
    msg_id=st.one_of(text, st.just("0" * 32)),
    tid=st.one_of(st.none(), text),
)
def test_end_transaction_template_writes_what_the_encoder_writes(
    group, broker, state, from_check, tsto, clo, msg_id, tid
) -> None:
    """END_TRANSACTION's extFields from its template are write_ext_fields' bytes of the header's fields,
    in the Java HashMap's order, and a frame of them decodes to those fields."""
    header = EndTransactionRequestHeader(group, tsto, clo, state, msg_id, tid, from_check, broker)
    cmd = header.command(remark="r")
    fields = header.to_fields()
    assert list(fields) == hashmap_order(list(fields))
    assert cmd.ext_bytes == write_ext_fields(fields)
    back = decode_frame(cmd.encode())
    assert (back.ext_fields, back.remark, back.serialize_type) == (fields, "r", SerializeType.ROCKETMQ)


@settings(max_examples=200, deadline=None)
@given(
    code=st.integers(0, 32767),
    opaque=st.integers(0, 0x7FFFFFFF),
    fields=st.dictionaries(st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=8), text),
    body=st.binary(max_size=64),
)
def test_a_request_head_from_extfields_bytes_is_the_commands_frame(
    code: int, opaque: int, fields: dict, body: bytes
) -> None:
    """rocketmq_request_head (END_TRANSACTION's frames and the send engine's, written without a
    RemotingCommand) and the body write what the command writes, and the frame decodes to its code,
    opaque, fields and body."""
    ext = write_ext_fields(fields)
    frame = rocketmq_request_head(code, opaque, ext, len(body)) + body
    cmd = RemotingCommand(code=code, opaque=opaque, serialize_type=SerializeType.ROCKETMQ, ext_bytes=ext, body=body)
    assert frame == cmd.encode()
    if not body:
        assert rocketmq_request_head(code, opaque, ext) == frame
    back = decode_frame(frame)
    assert (back.code, back.opaque, back.flag, back.ext_fields or {}, back.body) == (code, opaque, 0, fields, body)
