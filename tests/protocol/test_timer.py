"""Timer message properties, broker version names and recall handles (protocol/timer.py)."""

from __future__ import annotations

import pytest

from spark_rocketmq.errors import InvalidMessageError
from spark_rocketmq.protocol.codes import RequestCode
from spark_rocketmq.protocol.message import Message, decode_properties, message_properties
from spark_rocketmq.protocol.requests import check_batch, message_request
from spark_rocketmq.protocol.timer import (
    MQ_VERSION_V5_0_0,
    RecallHandle,
    recall_request,
    serves_timer_messages,
    timer_properties,
    version_name,
)

# A handle a real 5.3.3 broker answered (broker-b, topic ProbeT).
REAL_HANDLE = "djEgUHJvYmVUIGJyb2tlci1iIDE3OTU1NzA0MTEwMDEgQzAwMDAyMDIyQkVDRUZCQTgwNUM3QkVFMjIyMjAwMDA="


def test_version_names_follow_mqversion() -> None:
    assert version_name(409) == "V4_9_8"
    assert version_name(413) == "V5_0_0"
    assert version_name(477) == "V5_3_2"
    assert version_name(479) == "V5_3_3"
    assert version_name(478) == "V5_3_3_SNAPSHOT"
    assert version_name(300) == "version code 300"
    assert not serves_timer_messages(409) and not serves_timer_messages(411)
    assert serves_timer_messages(MQ_VERSION_V5_0_0) and serves_timer_messages(479)


def test_recall_handle_decodes_a_real_brokers_handle_and_round_trips() -> None:
    h = RecallHandle.decode(REAL_HANDLE)
    assert (h.topic, h.broker_name, h.timestamp_ms) == ("ProbeT", "broker-b", 1795570411001)
    assert h.msg_id == "C00002022BECEFBA805C7BEE22220000"
    assert h.encode() == REAL_HANDLE


@pytest.mark.parametrize("bad", ["", "not base64 !", "djIgYSBiIGMgZA==", "djEgYSBi"])
def test_bad_recall_handles_are_refused(bad: str) -> None:
    with pytest.raises(InvalidMessageError, match="recall handle"):
        RecallHandle.decode(bad)


def test_recall_request_header() -> None:
    cmd = recall_request("g", "T", REAL_HANDLE, "broker-b")
    assert cmd.code == RequestCode.RECALL_MESSAGE == 370
    assert cmd.ext_fields == {"producerGroup": "g", "topic": "T", "recallHandle": REAL_HANDLE, "bname": "broker-b"}


def test_timer_properties() -> None:
    assert timer_properties(None, None, None) == {}
    assert timer_properties(1_700_000_000_000, None, None) == {"TIMER_DELIVER_MS": "1700000000000"}
    assert timer_properties(None, 1500, None) == {"TIMER_DELAY_MS": "1500"}
    assert timer_properties(None, None, 30) == {"TIMER_DELAY_SEC": "30"}
    with pytest.raises(InvalidMessageError, match="deliver_time_ms and delay_time_ms"):
        timer_properties(1, 2, None)
    with pytest.raises(InvalidMessageError, match="negative"):
        timer_properties(None, -5, None)
    with pytest.raises(InvalidMessageError, match="must be an int"):
        timer_properties(None, None, 1.5)  # type: ignore[arg-type]


def test_a_timer_message_is_one_request_with_its_property() -> None:
    msg = Message("T", b"x", tags="a", deliver_time_ms=1_800_000_000_000)
    req = message_request(msg, "0" * 32, max_message_size=1 << 20, compress_over=4096)
    assert req.timer and not req.batch
    props = decode_properties(req.properties)
    assert props["TIMER_DELIVER_MS"] == "1800000000000" and props["TAGS"] == "a"
    assert not message_request(Message("T", b"x"), "0" * 32, max_message_size=1 << 20, compress_over=4096).timer


def test_a_level_and_a_time_are_refused_together() -> None:
    with pytest.raises(InvalidMessageError, match="delay_level and a delivery time"):
        message_properties(Message("T", b"x", delay_level=3, delay_time_sec=5), None)


def test_timer_properties_cannot_be_user_properties() -> None:
    with pytest.raises(InvalidMessageError, match="reserved"):
        message_properties(Message("T", b"x", properties={"TIMER_DELIVER_MS": "1"}), None)


def test_a_batch_refuses_timer_messages() -> None:
    with pytest.raises(InvalidMessageError, match=r"batch item 1 .*timer messages"):
        check_batch([Message("T", b"a"), Message("T", b"b", delay_time_ms=10)], 1 << 20)
