"""SendResult from a broker's send answer (MQClientAPIImpl.processSendResponse)."""

from __future__ import annotations

import dataclasses

import pytest

from spark_rocketmq.client.results import SendResult, SendStatus, send_result
from spark_rocketmq.client.send_operation import SendOperation
from spark_rocketmq.client.transaction import TransactionHandle
from spark_rocketmq.errors import BrokerError, ProtocolError
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.message import Message
from spark_rocketmq.protocol.requests import message_request
from spark_rocketmq.protocol.route import MessageQueue

UNIQ = "C1AE2180D5C35D8BC1FB82DF2DBC38CC"


def answer(code: int = 0, **fields: str) -> RemotingCommand:
    ext = {"msgId": "7F00000100002A9F0000000209588DA4", "queueId": "3", "queueOffset": "17", **fields}
    return RemotingCommand(code=code, opaque=1, flag=1, ext_fields=ext, language="JAVA", version=395)


def test_answered_makes_what_the_constructor_makes_with_every_field() -> None:
    values = {
        "status": SendStatus.SEND_OK,
        "msg_id": UNIQ,
        "offset_msg_id": "7F00000100002A9F0000000209588DA4",
        "queue": MessageQueue("T", "broker-a", 3),
        "queue_offset": 17,
        "count": 2,
        "transaction_id": "tid",
        "region_id": "DefaultRegion",
        "recall_handle": "handle",
        "broker_version": 395,
        "trace_on": False,
    }
    assert [f.name for f in dataclasses.fields(SendResult)] == list(values)
    made = SendResult.answered(*values.values())
    assert made == SendResult(**values) and hash(made) == hash(SendResult(**values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.count = 3  # type: ignore[misc]


@pytest.mark.parametrize("namespace", [None, "ns"])
def test_send_result_names_the_queue_the_broker_wrote_as_the_user_names_its_topic(namespace: str | None) -> None:
    req = message_request(Message("T", b"x"), UNIQ, max_message_size=1 << 20, compress_over=4096, namespace=namespace)
    chosen = MessageQueue(req.wire_topic, "broker-a", 3)
    result = send_result(req, answer(MSG_REGION="DefaultRegion", transactionId="tid"), chosen, "127.0.0.1:10911")
    assert result.queue == MessageQueue("T", "broker-a", 3)
    assert (result.msg_id, result.queue_offset, result.transaction_id, result.region_id) == (
        UNIQ,
        17,
        "tid",
        "DefaultRegion",
    )
    assert (result.status, result.broker_version, result.count) == (SendStatus.SEND_OK, 395, 1)
    # TRACE_ON (the broker's traceOn): only the exact "false" turns message trace off, as in MQClientAPIImpl
    assert result.trace_on
    for value, on in (("false", False), ("true", True), ("FALSE", True)):
        assert send_result(req, answer(TRACE_ON=value), chosen, "127.0.0.1:10911").trace_on is on
    moved = send_result(req, answer(queueId="1"), MessageQueue("T", "broker-a", 3), "127.0.0.1:10911")
    assert moved.queue == MessageQueue("T", "broker-a", 1)
    with pytest.raises(BrokerError):
        send_result(req, answer(code=14), chosen, "127.0.0.1:10911")


def test_a_half_whose_answer_names_no_store_fails_its_future() -> None:
    """A send whose future holds something made of its SendResult (a half's TransactionHandle) fails
    with the error that making it raised, instead of settling with a handle no END_TRANSACTION can use."""
    req = message_request(Message("T", b"x"), UNIQ, max_message_size=1 << 20, compress_over=4096)
    mq = MessageQueue("T", "broker-a", 3)
    ok = send_result(req, answer(), mq, "127.0.0.1:10911")
    bad = send_result(req, answer(msgId="not-an-offset-id"), mq, "127.0.0.1:10911")
    released: list[int] = []

    def op() -> SendOperation:
        return SendOperation(
            req,
            queue=None,
            sharding_key=None,
            retries=0,
            timeout_ms=1000,
            on_settled=lambda: released.append(1),
            settle_as=TransactionHandle.from_send_result,
        )

    good, broken = op(), op()
    good.settle(ok, None)
    broken.settle(bad, None)
    handle = good.future.result()
    assert isinstance(handle, TransactionHandle) and (handle.commit_log_offset, handle.broker_addr) == (
        0x209588DA4,
        "127.0.0.1:10911",
    )
    assert isinstance(broken.future.exception(), ProtocolError) and released == [1, 1]


def test_transaction_handles_made_from_answers_and_rows_equal_the_constructors() -> None:
    req = message_request(Message("T", b"x"), UNIQ, max_message_size=1 << 20, compress_over=4096)
    result = send_result(req, answer(transactionId=UNIQ), MessageQueue("T", "broker-a", 3), "127.0.0.1:10911")
    expected = TransactionHandle(
        "T", "broker-a", "127.0.0.1:10911", 3, 0x209588DA4, 17, UNIQ, "7F00000100002A9F0000000209588DA4", UNIQ
    )
    handle = TransactionHandle.from_send_result(result)
    assert handle == expected and hash(handle) == hash(expected)
    assert TransactionHandle.from_row(handle.to_row()) == expected
    with pytest.raises(dataclasses.FrozenInstanceError):
        handle.queue_id = 1  # type: ignore[misc]
