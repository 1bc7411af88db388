"""What a failed send attempt's error means to the send engine (sender.py) and to the sink's writer:
retried on another broker (sendDefaultImpl's connection errors, timeouts and RETRY_ANOTHER_BROKER_CODES),
busy (back-pressure: SYSTEM_BUSY, FLOW_CONTROL, a 4.x broker's [TIMEOUT_CLEAN_QUEUE]), or final (no resend
cures it); and the errors a send ends with when a broker cannot take timer messages or its retries ran out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import (
    BrokerError,
    BrokerVersionError,
    ConfigError,
    InvalidMessageError,
    RemotingError,
    RocketMQError,
    SendFailedError,
    TopicNotFoundError,
    TopicNotWritableError,
)
from ..protocol.codes import BROKER_BUSY_CODES, RETRY_ANOTHER_BROKER_CODES, ResponseCode
from ..protocol.timer import TIMER_NOT_ENABLED_REMARK, version_name

if TYPE_CHECKING:
    from ..protocol.requests import SendRequest
    from .send_operation import SendOperation


def is_retryable(exc: BaseException | None) -> bool:
    """Connection errors, timeouts and the answers sendDefaultImpl retries on another broker."""
    if isinstance(exc, RemotingError):
        return True
    return isinstance(exc, BrokerError) and exc.code in RETRY_ANOTHER_BROKER_CODES and not refuses_timers(exc)


def refuses_timers(exc: BaseException | None) -> bool:
    """A 5.x broker's answer to a timer message when its timer wheel is off (WHEEL_TIMER_NOT_ENABLE, sent
    as SYSTEM_ERROR): no resend cures it."""
    return isinstance(exc, BrokerError) and (exc.remark or "").startswith(TIMER_NOT_ENABLED_REMARK)


def is_busy(exc: BaseException | None) -> bool:
    return isinstance(exc, BrokerError) and exc.code in BROKER_BUSY_CODES


def is_final(exc: BaseException | None) -> bool:
    """True for a failed send that no resend can cure: the message itself (bad input, MESSAGE_ILLEGAL and
    the other answers sendDefaultImpl does not retry), a topic no broker has, or an ACL refusal."""
    if isinstance(exc, SendFailedError):
        exc = exc.last_error
    if isinstance(exc, TopicNotWritableError):
        return False  # read-only brokers (a rolling restart) come back
    if isinstance(exc, InvalidMessageError | TopicNotFoundError | ConfigError | BrokerVersionError):
        return True
    if isinstance(exc, BrokerError):
        if exc.remark and ("AclException" in exc.remark or refuses_timers(exc)):
            return True
        return exc.code not in RETRY_ANOTHER_BROKER_CODES and exc.code not in BROKER_BUSY_CODES
    return False


def timers_unsupported(req: SendRequest, broker: str, addr: str, version: int) -> BrokerVersionError:
    return BrokerVersionError(
        f"broker {broker} at {addr} runs RocketMQ {version_name(version)}, which does not deliver timer "
        f"messages (a delivery time: deliver_time_ms / delay_time_ms / delay_time_sec, the sink's deliver_time "
        f"/ delay_ms columns) but would store them at once; the message to topic {req.topic!r} was not sent. "
        "Send timer messages to RocketMQ 5.x brokers (timerWheelEnable=true), or use delay_level"
    )


def exhausted(op: SendOperation, last: BaseException) -> RocketMQError:
    req = op.req
    if isinstance(last, BrokerError) and last.code == ResponseCode.TOPIC_NOT_EXIST:
        # Every broker tried refused the topic (no autoCreateTopicEnable behind TBW102, or a stale route).
        return TopicNotFoundError(req.topic, f"broker {last.addr} answered: {last.remark}")
    what = f"batch of {req.count} messages" if req.batch else "message"
    attempts = max(op.attempts, 1)
    busy = f", {op.busy} busy answer(s)" if op.busy else ""
    return SendFailedError(
        f"send of a {what} to topic {req.topic!r} failed after {attempts} attempt(s){busy}: {last}", attempts, last
    )
