"""The send path's request encoders (cached HashMap orders) give the general encoders' bytes exactly."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.protocol.frame import RemotingCommand, ext_fields_json
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
    group=st.one_of(text, st.sampled_from(["g", "{queue_id}", "-701", '"-702"', "%s", "\x00properties\x00"])),
    topic=st.one_of(text, st.sampled_from(["T", "ns%T", "{}", "-703"])),
    broker=st.one_of(text, st.sampled_from(["broker-a", "-704", "{0}"])),
    batch=st.booleans(),
    queue_id=st.integers(0, 1 << 31),
    sys_flag=st.integers(0, 1 << 20),
    born=st.integers(0, 1 << 45),
    flag=st.integers(-(1 << 31), 1 << 31),
    props=st.one_of(text, st.sampled_from(["UNIQ_KEY\x01" + "0" * 32 + "\x02WAIT\x01true", "{properties}", '"\\'])),
)
def test_send_header_template_writes_what_the_json_encoder_writes(
    group, topic, broker, batch, queue_id, sys_flag, born, flag, props
) -> None:
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
    template = send_header_template(group, topic, "TBW102", 4, batch, broker)
    if template is None:  # a fixed field holds a marker's text: such sends are written field by field
        assert any(m in ext_fields_json([group, topic, broker]) for m in ('"-70', "\\u0000properties\\u0000"))
        return
    rendered = template.render(queue_id=queue_id, sys_flag=sys_flag, born_timestamp=born, flag=flag, properties=props)
    assert rendered == ext_fields_json(header.to_v2_fields())


def test_send_command_frames_equal_with_and_without_the_template() -> None:
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
    assert cmd.ext_json is not None
    header = SendMessageRequestHeader("g", "T", 3, 0, 5, 0, req.properties, broker_name="b")
    plain = RemotingCommand(code=req.code, ext_fields=header.to_v2_fields(), body=req.body)
    assert cmd.encode() == plain.encode()
    assert cmd.field("b") == "T" and cmd.fields() == header.to_v2_fields()


@settings(max_examples=300, deadline=None)
@given(
    group=st.one_of(text, st.sampled_from(["g", "{msg_id}", "-801", '"-802"', "\x00msgId\x00"])),
    broker=st.one_of(st.none(), text, st.sampled_from(["broker-a", "-802", "{0}", "\x00transactionId\x00"])),
    state=st.sampled_from(list(TransactionState)),
    from_check=st.booleans(),
    tsto=st.integers(0, 1 << 62),
    clo=st.integers(0, 1 << 62),
    msg_id=st.one_of(text, st.just("0" * 32)),
    tid=st.one_of(st.none(), text),
)
def test_end_transaction_template_writes_what_the_json_encoder_writes(
    group, broker, state, from_check, tsto, clo, msg_id, tid
) -> None:
    """END_TRANSACTION's extFields from its template (or field by field when a fixed field holds a
    marker) are the text the encoder writes for the header's fields, in the Java HashMap's order."""
    header = EndTransactionRequestHeader(group, tsto, clo, state, msg_id, tid, from_check, broker)
    cmd = header.command()
    fields = header.to_fields()
    assert list(fields) == hashmap_order(list(fields))
    assert json.loads(cmd.encode_header())["extFields"] == fields
    assert (cmd.ext_json or ext_fields_json(cmd.ext_fields)) == ext_fields_json(fields)
