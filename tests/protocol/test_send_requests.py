"""The send path's request encoders (cached HashMap orders) give the general encoders' bytes exactly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.protocol.headers import SendMessageRequestHeader
from spark_rocketmq.protocol.javamap import hashmap_order
from spark_rocketmq.protocol.message import Message, encode_properties, message_properties
from spark_rocketmq.protocol.properties import encoded_properties

text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)
keys = st.one_of(st.none(), text, st.lists(text, max_size=3))
uniq = st.text("0123456789ABCDEF", min_size=32, max_size=32)


names = st.one_of(text, st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "b", "order-id", "\x01", " "]))
user_props = st.one_of(st.none(), st.dictionaries(names, text, max_size=6))


@settings(max_examples=500, deadline=None)
@given(tags=st.one_of(st.none(), text), keys=keys, wait=st.booleans(), uniq_key=uniq, props=user_props)
def test_encoded_properties_equal_message_properties(tags, keys, wait, uniq_key, props) -> None:
    msg = Message("T", b"x", tags=tags, keys=keys, wait_store_msg_ok=wait, properties=props)
    try:
        expected = encode_properties(message_properties(msg, uniq_key))
    except Exception as exc:  # the shortcut must refuse the same messages
        try:
            encoded_properties(msg, uniq_key)
        except type(exc):
            return
        raise AssertionError(f"shortcut accepted what message_properties refused: {exc}") from None
    assert encoded_properties(msg, uniq_key) == expected


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
