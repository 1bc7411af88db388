"""RocketMQ 5 timer messages and recall: the properties, the broker versions that serve them, recall handles
and the RECALL_MESSAGE request.

A message carries its delivery time as a property (MessageConst): TIMER_DELIVER_MS (epoch ms), or a
relative TIMER_DELAY_SEC / TIMER_DELAY_MS. A 5.x broker's put-message hook
(HookUtils.handleScheduleMessage) moves a single message with one of them to its timer topic
(rmq_sys_wheel_timer, with TIMER_OUT_MS, REAL_TOPIC and REAL_QID), and the timer wheel stores it in its
topic when due, at the broker's precision (timerPrecisionMs, 1 s by default). A time not ahead of the
broker's clock is stored at once; one more than timerMaxDelaySec (3 days by default) ahead is answered
MESSAGE_ILLEGAL; a broker with the wheel off answers SYSTEM_ERROR ("accurate timer message is not
enabled"). Inside a MessageBatch the properties are ignored, and a 4.x broker ignores them altogether.

The answer to a timer send carries ``recallHandle`` (5.3.2 on): base64url of "v1 topic brokerName
timestamp uniqKey" (RecallMessageHandle.HandleV1). RECALL_MESSAGE (370) with it stores a delete marker
that cancels the message before it is due (RecallMessageProcessor; brokers need recallMessageEnable=true).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from ..errors import InvalidMessageError
from .codes import RequestCode
from .command import RemotingCommand
from .javamap import hashmap_ordered

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
#: TimerMessageStore.TIMER_TOPIC: where a 5.x broker holds timer messages until they are due.
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: The properties that ask a 5.x broker for a delivery time.
TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)

#: MessageStoreConfig defaults of 5.3.3.
DEFAULT_TIMER_MAX_DELAY_SEC = 3 * 24 * 3600
DEFAULT_TIMER_PRECISION_MS = 1000

#: MQVersion.Version ordinals (the remoting header's ``version``): timer messages from 5.0.0.
MQ_VERSION_V5_0_0 = 413
MQ_VERSION_V5_3_3 = 479
#: From V4_9_0_SNAPSHOT (392) on, MQVersion.Version lists each release as X_Y_Z_SNAPSHOT then X_Y_Z.
_V4_9_0_SNAPSHOT = 392

#: The start of a 5.x broker's remark when its timer wheel is off (WHEEL_TIMER_NOT_ENABLE).
TIMER_NOT_ENABLED_REMARK = "accurate timer message is not enabled"
#: The start of a 5.x broker's remark for a delivery time beyond timerMaxDelaySec (WHEEL_TIMER_MSG_ILLEGAL).
TIMER_ILLEGAL_REMARK = "timer message illegal"

_RECALL_VERSION_1 = "v1"


def version_name(version: int) -> str:
    """MQVersion.getVersionDesc of a header's version code: "V4_9_8", "V5_3_3_SNAPSHOT", or the code."""
    if version < _V4_9_0_SNAPSHOT:
        return f"version code {version}"
    k = version - _V4_9_0_SNAPSHOT
    n = 490 + k // 2
    name = f"V{n // 100}_{n // 10 % 10}_{n % 10}"
    return name if k % 2 else f"{name}_SNAPSHOT"


def serves_timer_messages(version: int) -> bool:
    """True for a broker version whose put-message hook reads TIMER_* properties (5.0.0 on)."""
    return version >= MQ_VERSION_V5_0_0


def timer_properties(
    deliver_time_ms: int | None, delay_time_ms: int | None, delay_time_sec: int | None
) -> dict[str, str]:
    """The one timer property of a message, checked; {} for none. Raises naming the field."""
    given = [
        (name, value)
        for name, value in (
            ("deliver_time_ms", deliver_time_ms),
            ("delay_time_ms", delay_time_ms),
            ("delay_time_sec", delay_time_sec),
        )
        if value is not None
    ]
    if not given:
        return {}
    if len(given) > 1:
        names = " and ".join(name for name, _ in given)
        raise InvalidMessageError(f"{names} are both set; give a message one delivery time at most")
    name, value = given[0]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidMessageError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise InvalidMessageError(f"{name} is {value}: a delivery time or delay cannot be negative")
    prop = {
        "deliver_time_ms": PROPERTY_TIMER_DELIVER_MS,
        "delay_time_ms": PROPERTY_TIMER_DELAY_MS,
        "delay_time_sec": PROPERTY_TIMER_DELAY_SEC,
    }[name]
    return {prop: str(value)}


@dataclass(frozen=True)
class RecallHandle:
    """RecallMessageHandle.HandleV1: what a recall handle names."""

    topic: str
    broker_name: str
    #: The broker's TIMER_OUT_MS + 1 (its delivery time, floored to the wheel's precision, plus one).
    timestamp_ms: int
    #: The message's UNIQ_KEY.
    msg_id: str

    def encode(self) -> str:
        raw = " ".join((_RECALL_VERSION_1, self.topic, self.broker_name, str(self.timestamp_ms), self.msg_id))
        return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii")

    @classmethod
    def decode(cls, handle: str) -> RecallHandle:
        """RecallMessageHandle.decodeHandle; InvalidMessageError for anything that is not a v1 handle."""
        if not isinstance(handle, str) or not handle:
            raise InvalidMessageError("recall handle is empty: give the recall_handle of a timer message's SendResult")
        try:
            raw = base64.urlsafe_b64decode(handle.encode("ascii")).decode("utf-8")
        except (binascii.Error, UnicodeError, ValueError):
            raise InvalidMessageError(f"recall handle {handle[:60]!r} is not base64url text") from None
        items = raw.split(" ")
        if len(items) < 5 or items[0] != _RECALL_VERSION_1:
            raise InvalidMessageError(
                f"recall handle {handle[:60]!r} is not a v1 handle (version topic broker time id)"
            )
        try:
            timestamp = int(items[3])
        except ValueError:
            raise InvalidMessageError(f"recall handle {handle[:60]!r} has no valid timestamp") from None
        return cls(items[1], items[2], timestamp, items[4])


def recall_request(group: str, topic: str, handle: str, broker_name: str, opaque: int = 0) -> RemotingCommand:
    """RECALL_MESSAGE with RecallMessageRequestHeader (producerGroup, topic, recallHandle; bname)."""
    fields = {"producerGroup": group, "topic": topic, "recallHandle": handle, "bname": broker_name}
    return RemotingCommand(code=RequestCode.RECALL_MESSAGE, opaque=opaque, ext_fields=hashmap_ordered(fields))
