"""What a send returns: SendResult (MQClientAPIImpl.processSendResponse) and the producer's counters."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..errors import BrokerError, ProtocolError
from ..protocol.codes import ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.frozen import made
from ..protocol.headers import send_answer_fields
from ..protocol.message import PROPERTY_MSG_REGION, PROPERTY_TRACE_SWITCH
from ..protocol.requests import SendRequest
from ..protocol.route import MessageQueue


class SendStatus(StrEnum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True)
class SendResult:
    """What the broker answered to one send request (one message, or one batch body)."""

    status: SendStatus
    #: The UNIQ_KEY (the id consumers see); comma-joined for a batch.
    msg_id: str
    #: The broker's offset id(s): store address + commit-log offset; comma-joined for a batch.
    offset_msg_id: str
    #: Where it went (topic without namespace).
    queue: MessageQueue
    #: Consume-queue offset of the (first) message.
    queue_offset: int
    #: Messages in this request.
    count: int = 1
    transaction_id: str | None = None
    region_id: str | None = None
    #: A timer message held by a 5.3.2+ broker: give it to Producer.recall to cancel the message.
    recall_handle: str | None = None
    #: The answering broker's version (MQVersion ordinal in the answer's header; protocol.timer.version_name).
    broker_version: int | None = None
    #: False when the broker answered TRACE_ON=false (its traceOn setting): message trace then writes no
    #: record of this send, as the Java client's SendMessageTraceHookImpl skips it.
    trace_on: bool = True

    @classmethod
    def answered(
        cls,
        status: SendStatus,
        msg_id: str,
        offset_msg_id: str,
        queue: MessageQueue,
        queue_offset: int,
        count: int,
        transaction_id: str | None,
        region_id: str | None,
        recall_handle: str | None,
        broker_version: int | None,
        trace_on: bool,
    ) -> SendResult:
        """SendResult(...) with every field given, made without the frozen dataclass's per-field
        object.__setattr__ (frozen.made): one is made per answer."""
        return made(
            cls,
            status=status,
            msg_id=msg_id,
            offset_msg_id=offset_msg_id,
            queue=queue,
            queue_offset=queue_offset,
            count=count,
            transaction_id=transaction_id,
            region_id=region_id,
            recall_handle=recall_handle,
            broker_version=broker_version,
            trace_on=trace_on,
        )


@dataclass(frozen=True)
class ProducerStats:
    """Counters since the producer started."""

    requests: int
    messages: int
    #: Attempts after the first of a send (resends after busy answers included).
    retries: int
    failures: int
    bytes_sent: int
    in_flight: int
    #: Busy answers (SYSTEM_BUSY, FLOW_CONTROL): each shrank a broker's window and was sent again.
    busy_answers: int = 0


def send_result(req: SendRequest, resp: RemotingCommand, mq: MessageQueue, addr: str) -> SendResult:
    """The SendResult of a send answer; BrokerError for an error code, ProtocolError for a bad header."""
    status = _STATUS_BY_CODE.get(resp.code)
    if status is None:
        raise BrokerError(resp.code, resp.remark, addr, request=f"send to topic {req.topic!r}")
    try:
        offset_msg_id, queue_id, queue_offset, transaction_id, recall_handle = send_answer_fields(resp)
    except ProtocolError as exc:
        raise ProtocolError(f"send answer from {addr}: {exc}") from None
    if queue_id != mq.queue_id or mq.topic != req.topic:  # the queue written to, as the user names its topic
        mq = MessageQueue(req.topic, mq.broker_name, queue_id)
    return SendResult.answered(
        status,
        req.msg_id,
        offset_msg_id,
        mq,
        queue_offset,
        req.count,
        transaction_id,
        resp.field(PROPERTY_MSG_REGION),
        recall_handle,
        resp.version,
        resp.field(PROPERTY_TRACE_SWITCH) != "false",  # MQClientAPIImpl: only the exact "false" turns it off
    )
