"""Bad messages are refused before anything is sent, with errors naming the topic and the field."""

from __future__ import annotations

import pytest

from spark_rocketmq.errors import InvalidMessageError
from spark_rocketmq.protocol.message import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MAX_PROPERTIES_LENGTH,
    NOT_ALLOWED_SEND_TOPICS,
    RESERVED_PROPERTY_NAMES,
    SYSTEM_TOPICS,
    Message,
    check_body,
    check_properties_length,
    encode_properties,
    message_properties,
    validate_topic,
)


# -- topics ------------------------------------------------------------------------------------
@pytest.mark.parametrize("topic", ["GoldenTopic", "a", "%RETRY%group", "x|y", "A-b_9", "t" * 127])
def test_valid_topics(topic):
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    "topic",
    ["bad topic", "bad.topic", "bad/topic", "top\u00efc", "topic\n", "\ntopic", "t\x01", "tópico", "a:b", "*"],
)
def test_topic_with_illegal_characters(topic):
    with pytest.raises(InvalidMessageError, match="illegal characters") as info:
        validate_topic(topic)
    assert repr(topic) in str(info.value)


def test_topic_too_long():
    topic = "t" * 128
    with pytest.raises(InvalidMessageError, match="128 characters") as info:
        validate_topic(topic)
    assert "127" in str(info.value)
    assert "t" * 40 in str(info.value)


@pytest.mark.parametrize("topic", ["", "   ", None, 42])
def test_blank_or_missing_topic(topic):
    with pytest.raises(InvalidMessageError, match="topic is blank"):
        validate_topic(topic)


@pytest.mark.parametrize(
    "topic",
    [
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    ],
)
def test_topics_java_forbids_sending_to_are_refused(topic):
    with pytest.raises(InvalidMessageError, match="system topic") as info:
        validate_topic(topic)
    assert repr(topic) in str(info.value)


@pytest.mark.parametrize("topic", ["RMQ_SYS_TRACE_TOPIC", "TBW102", "BenchmarkTest", "rmq_sys_anything"])
def test_other_system_topics_are_legitimate_targets(topic):
    # Java's producer refuses only TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: a trace dispatcher
    # sends to RMQ_SYS_TRACE_TOPIC, benchmarks to BenchmarkTest.
    assert validate_topic(topic) == topic


def test_refused_topics_are_system_topics():
    assert NOT_ALLOWED_SEND_TOPICS < SYSTEM_TOPICS
    for topic in NOT_ALLOWED_SEND_TOPICS:
        with pytest.raises(InvalidMessageError):
            validate_topic(topic)


def test_system_prefix_is_case_sensitive():
    assert validate_topic("RMQ_SYS_custom") == "RMQ_SYS_custom"


# -- properties --------------------------------------------------------------------------------
def props(msg: Message, uniq: str | None = "C00002023C465FFD2B277039303F0000") -> dict[str, str]:
    return message_properties(msg, uniq)


def test_message_properties_layout():
    msg = Message("T", b"x", tags="TagA", keys=["K1", "K2"], properties={"color": "blue"})
    assert props(msg) == {
        "color": "blue",
        "KEYS": "K1 K2",
        "UNIQ_KEY": "C00002023C465FFD2B277039303F0000",
        "WAIT": "true",
        "TAGS": "TagA",
    }


def test_message_properties_delay_and_wait():
    msg = Message("T", b"x", delay_level=3, wait_store_msg_ok=False)
    assert props(msg, None) == {"WAIT": "false", "DELAY": "3"}


@pytest.mark.parametrize("level", [1, 18])
def test_delay_level_bounds_accepted(level):
    assert props(Message("T", b"x", delay_level=level))["DELAY"] == str(level)


@pytest.mark.parametrize("level", [19, -1, 100])
def test_delay_level_outside_range(level):
    with pytest.raises(InvalidMessageError, match="delay level") as info:
        props(Message("Orders", b"x", delay_level=level))
    assert "'Orders'" in str(info.value)
    assert "1..18" in str(info.value)


@pytest.mark.parametrize("bad", ["a\x01b", "a\x02b", "\x01", "x\x02"])
@pytest.mark.parametrize("where", ["tags", "keys", "keys-list", "name", "value"])
def test_separator_bytes_are_refused(where, bad):
    if where == "tags":
        msg, field = Message("Orders", b"x", tags=bad), "tags"
    elif where == "keys":
        msg, field = Message("Orders", b"x", keys=bad), "keys"
    elif where == "keys-list":
        msg, field = Message("Orders", b"x", keys=["ok", bad]), "keys"
    elif where == "name":
        msg, field = Message("Orders", b"x", properties={bad: "v"}), "property"
    else:
        msg, field = Message("Orders", b"x", properties={"k": bad}), "property"
    with pytest.raises(InvalidMessageError, match=field) as info:
        props(msg)
    text = str(info.value)
    assert "'Orders'" in text
    assert "\\x01 or \\x02" in text


@pytest.mark.parametrize("name", sorted(RESERVED_PROPERTY_NAMES))
def test_reserved_property_names(name):
    with pytest.raises(InvalidMessageError, match="reserved") as info:
        props(Message("Orders", b"x", properties={name: "v"}))
    assert repr(name) in str(info.value)
    assert "'Orders'" in str(info.value)


@pytest.mark.parametrize("name", ["UNIQ_KEY", "KEYS", "TAGS", "WAIT", "DELAY"])
def test_names_the_client_sets_itself_are_reserved(name):
    assert name in RESERVED_PROPERTY_NAMES


@pytest.mark.parametrize(("name", "value"), [("", "v"), ("  ", "v"), ("k", ""), ("k", " "), ("k", 1), (1, "v")])
def test_blank_or_non_string_properties(name, value):
    with pytest.raises(InvalidMessageError, match="non-blank strings") as info:
        props(Message("Orders", b"x", properties={name: value}))
    assert "'Orders'" in str(info.value)


def test_empty_tags_and_keys_are_left_out():
    assert props(Message("T", b"x", tags="", keys=[]), None) == {"WAIT": "true"}


# -- bodies and sizes --------------------------------------------------------------------------
def test_check_body_accepts_bytes_like():
    assert check_body("T", bytearray(b"ab"), 10) == b"ab"
    assert check_body("T", memoryview(b"ab"), 10) == b"ab"
    assert check_body("T", b"x" * 10, 10) == b"x" * 10


def test_empty_body():
    with pytest.raises(InvalidMessageError, match="empty") as info:
        check_body("Orders", b"", DEFAULT_MAX_MESSAGE_SIZE)
    assert "'Orders'" in str(info.value)


def test_oversize_body():
    with pytest.raises(InvalidMessageError, match="max_message_size") as info:
        check_body("Orders", b"x" * (DEFAULT_MAX_MESSAGE_SIZE + 1), DEFAULT_MAX_MESSAGE_SIZE)
    assert "'Orders'" in str(info.value)
    assert str(DEFAULT_MAX_MESSAGE_SIZE + 1) in str(info.value)


@pytest.mark.parametrize("body", ["text", None, 42])
def test_body_must_be_bytes(body):
    with pytest.raises(InvalidMessageError, match="body must be bytes") as info:
        check_body("Orders", body, 100)
    assert "'Orders'" in str(info.value)


def test_properties_length_limit():
    ok = encode_properties({"k": "v" * (MAX_PROPERTIES_LENGTH - 2)}).encode()
    assert len(ok) == MAX_PROPERTIES_LENGTH
    check_properties_length("Orders", ok)
    too_long = encode_properties({"k": "v" * (MAX_PROPERTIES_LENGTH - 1)}).encode()
    with pytest.raises(InvalidMessageError, match="properties") as info:
        check_properties_length("Orders", too_long)
    assert "'Orders'" in str(info.value)
    assert "32767" in str(info.value)


def test_properties_length_counts_utf8_bytes():
    value = "é" * 16384  # 16384 characters, 32768 bytes
    with pytest.raises(InvalidMessageError):
        check_properties_length("T", encode_properties({"k": value}).encode("utf-8"))
