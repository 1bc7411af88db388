"""Timer messages and recall, as a 5.3.3 broker holds and delivers them (the local brokers' 5.x mode).

The put-message hook (HookUtils.handleScheduleMessage / transformTimerMessage): a single message (never
a batch) with TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS and no delay level is due at that
time by the broker's clock. A time not ahead of the clock is stored at once, as any message; one more
than ``timer_max_delay_sec`` ahead is refused (MESSAGE_ILLEGAL, WHEEL_TIMER_MSG_ILLEGAL's remark); a
broker with the wheel off refuses every timer message (WHEEL_TIMER_NOT_ENABLE). Otherwise the time is
floored to ``timer_precision_ms`` (a time on the boundary moves one step back), put in TIMER_OUT_MS with
REAL_TOPIC and REAL_QID, and the message is stored in rmq_sys_wheel_timer, queue 0, until then; the
answer carries the recall handle (SendMessageProcessor.attachRecallHandle: TIMER_OUT_MS + 1).

The wheel (``TimerService``): once due, a held message is stored again in its real topic and queue with
TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS added, unless a recall's delete marker (TIMER_DEL_UNIQKEY,
"topic+uniqKey", stored by RECALL_MESSAGE in the same queue) came for it. Held messages are delivered in
time order, and the time up to which all are delivered (with the queue offset read by then) is kept in
timerCheckpoint.json beside the store, so a broker stopped and started again delivers nothing twice.
The clock is injectable (``clock_ms``); ``deliver_due(now_ms)`` delivers at a given time (tests), a
thread every CHECK_INTERVAL_S otherwise.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..protocol.codes import ResponseCode
from ..protocol.message import (
    PROPERTY_CLUSTER,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    decode_properties,
    encode_hashmap_properties,
)
from ..protocol.stored import decode_stored_message
from ..protocol.timer import (
    DEFAULT_TIMER_MAX_DELAY_SEC,
    DEFAULT_TIMER_PRECISION_MS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    TIMER_ILLEGAL_REMARK,
    TIMER_NOT_ENABLED_REMARK,
    TIMER_PROPERTIES,
    TIMER_TOPIC,
    RecallHandle,
)
from .delivery import deliver_held
from .server import Freeze
from .service import ServiceThread
from .stamp import put_stamp
from .store import MessageStore

log = logging.getLogger(__name__)

PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
CHECKPOINT_FILE = "timerCheckpoint.json"
CHECK_INTERVAL_S = 0.1


@dataclass(frozen=True)
class TimerConfig:
    """MessageStoreConfig's timer settings, 5.3.3's defaults (BrokerConfig.recallMessageEnable is false)."""

    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = DEFAULT_TIMER_MAX_DELAY_SEC
    timer_precision_ms: int = DEFAULT_TIMER_PRECISION_MS
    recall_message_enable: bool = False

    def illegal_remark(self) -> str:
        return (
            f"{TIMER_ILLEGAL_REMARK}, the delay time should not be bigger than the max delay "
            f"{self.timer_max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than the "
            "current time"
        )


@dataclass(frozen=True)
class Refusal:
    code: int
    remark: str


@dataclass(frozen=True)
class Held:
    """A timer message to hold: its stored properties and its TIMER_OUT_MS."""

    properties: bytes
    out_ms: int


def is_timer_message(props: dict[str, str]) -> bool:
    """HookUtils.checkIfTimerMessage for a message without a delay level."""
    if PROPERTY_TIMER_OUT_MS in props:
        return False
    return any(name in props for name in TIMER_PROPERTIES)


def transform_timer_message(
    properties: str, stamp: Mapping[str, str], topic: str, queue_id: int, now_ms: int, conf: TimerConfig
) -> Refusal | Held | None:
    """What the put-message hook does with a single message: None when it is stored as it is (not a timer
    message, or due already), a refusal, or what to hold."""
    props = decode_properties(properties)
    if not is_timer_message(props):
        return None
    if not conf.timer_wheel_enable:
        return Refusal(
            ResponseCode.SYSTEM_ERROR, f"{TIMER_NOT_ENABLED_REMARK}, timerWheelEnable is {str(False).lower()}"
        )
    try:
        if PROPERTY_TIMER_DELAY_SEC in props:
            deliver_ms = now_ms + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
        elif PROPERTY_TIMER_DELAY_MS in props:
            deliver_ms = now_ms + int(props[PROPERTY_TIMER_DELAY_MS])
        else:
            deliver_ms = int(props[PROPERTY_TIMER_DELIVER_MS])
    except ValueError:
        return Refusal(ResponseCode.MESSAGE_ILLEGAL, conf.illegal_remark())
    if deliver_ms <= now_ms:
        if PROPERTY_TIMER_DEL_UNIQKEY in props:
            return Refusal(ResponseCode.MESSAGE_ILLEGAL, conf.illegal_remark())
        return None
    if deliver_ms - now_ms > conf.timer_max_delay_sec * 1000:
        return Refusal(ResponseCode.MESSAGE_ILLEGAL, conf.illegal_remark())
    step = conf.timer_precision_ms
    deliver_ms = deliver_ms - step if deliver_ms % step == 0 else deliver_ms // step * step
    put_stamp(props, stamp)
    props[PROPERTY_TIMER_OUT_MS] = str(deliver_ms)
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return Held(encode_hashmap_properties(props).encode(), deliver_ms)


def recall_handle(topic: str, broker_name: str, out_ms: int, uniq_key: str) -> str:
    """attachRecallHandle: the handle of a held message (TIMER_OUT_MS + 1, to undo the floor)."""
    return RecallHandle(topic, broker_name, out_ms + 1, uniq_key).encode()


def delete_key(topic: str, uniq_key: str) -> str:
    """TimerMessageStore.buildDeleteKey."""
    return f"{topic}+{uniq_key}"


def check_recall(
    topic: str, handle_text: str, broker_name: str, now_ms: int, conf: TimerConfig
) -> Refusal | RecallHandle:
    """RecallMessageProcessor's checks after the topic's: the handle, or the refusal."""
    if not conf.recall_message_enable:
        return Refusal(ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
    try:
        handle = RecallHandle.decode(handle_text)
    except ValueError:
        return Refusal(ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid")
    if handle.topic != topic:
        return Refusal(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
    if handle.broker_name != broker_name:
        return Refusal(ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available")
    left = handle.timestamp_ms - now_ms
    if left <= 0 or left >= conf.timer_max_delay_sec * 1000:
        return Refusal(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
    return handle


def marker_properties(handle: RecallHandle, group: str | None, now_ms: int, cluster: str) -> tuple[bytes, int]:
    """RecallMessageProcessor.buildMessage as held by the hook: the delete marker's properties and its
    TIMER_OUT_MS (the marker is due with the message it deletes)."""
    props = {
        "TAGS": "_RECALL_TAG_",
        PROPERTY_TIMER_DEL_UNIQKEY: delete_key(handle.topic, handle.msg_id),
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: handle.msg_id,
        PROPERTY_TIMER_DELIVER_MS: str(handle.timestamp_ms),
        "BORN_TIMESTAMP": str(now_ms),
        "PGROUP": group or "",
        PROPERTY_CLUSTER: cluster,
    }
    step = DEFAULT_TIMER_PRECISION_MS
    out = handle.timestamp_ms
    out = out - step if out % step == 0 else out // step * step
    props[PROPERTY_TIMER_OUT_MS] = str(out)
    props[PROPERTY_REAL_TOPIC] = handle.topic
    props[PROPERTY_REAL_QUEUE_ID] = "0"
    return encode_hashmap_properties({k: v for k, v in props.items() if v}).encode(), out


class TimerService:
    """One broker's timer wheel: holds what the hook put in rmq_sys_wheel_timer and stores each message
    in its topic when due."""

    def __init__(
        self, name: str, store: MessageStore, store_dir: Path, freeze: Freeze, clock_ms: Callable[[], int]
    ) -> None:
        self._store = store
        self._path = store_dir / CHECKPOINT_FILE
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._service = ServiceThread(
            f"{name}-timer", CHECK_INTERVAL_S, self.deliver_due, freeze, "delivering timer messages failed"
        )
        #: Every held message read before offset _saved_read and due by this TIMER_OUT_MS is delivered.
        self._delivered_to = -1
        self._saved_read = 0
        if self._path.is_file():
            saved = json.loads(self._path.read_text(encoding="utf-8"))
            self._delivered_to, self._saved_read = int(saved["deliveredToMs"]), int(saved["readOffset"])
        self._read = 0  # next offset of the timer queue to read
        self._heap: list[tuple[int, int]] = []  # (TIMER_OUT_MS, offset) of held messages
        self._deleted: set[str] = set()

    def start(self) -> TimerService:
        self._service.start()
        return self

    def stop(self) -> None:
        self._service.stop()

    @property
    def held(self) -> int:
        """Messages held and not yet delivered (recalled ones included until their time)."""
        with self._lock:
            self._scan()
            return len(self._heap)

    def _scan(self) -> None:
        end = self._store.max_offset(TIMER_TOPIC, 0)
        while self._read < end:
            records = self._store.read(TIMER_TOPIC, 0, self._read, min(1024, end - self._read))
            for record in records:
                msg = decode_stored_message(record)
                props = msg.properties
                out_ms = int(props[PROPERTY_TIMER_OUT_MS])
                if PROPERTY_TIMER_DEL_UNIQKEY in props:
                    self._deleted.add(props[PROPERTY_TIMER_DEL_UNIQKEY])
                elif self._read >= self._saved_read or out_ms > self._delivered_to:  # not delivered before a restart
                    heapq.heappush(self._heap, (out_ms, self._read))
                self._read += 1

    def deliver_due(self, now_ms: int | None = None) -> int:
        """Store every held message whose time has come in its real topic; how many were."""
        now = self._clock_ms() if now_ms is None else now_ms
        delivered = 0
        with self._lock:
            self._scan()
            last = self._delivered_to
            while self._heap and self._heap[0][0] <= now and not self._service.stopping.is_set():
                out_ms, offset = heapq.heappop(self._heap)
                (record,) = self._store.read(TIMER_TOPIC, 0, offset, 1)
                held = decode_stored_message(record)
                key = delete_key(
                    held.properties[PROPERTY_REAL_TOPIC],
                    held.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
                )
                if key in self._deleted:
                    self._deleted.discard(key)  # recalled
                else:
                    try:
                        props = dict(held.properties)
                        props[PROPERTY_TIMER_ENQUEUE_MS] = str(held.store_timestamp)
                        props[PROPERTY_TIMER_DEQUEUE_MS] = str(now)
                        deliver_held(self._store, held, props, sys_flag=held.sys_flag, store_timestamp=now)
                        delivered += 1
                    except Exception:
                        log.exception("timer message at offset %d dropped", offset)
                last = max(last, out_ms)
            # Everything up to `last` is delivered only when nothing held is due at `last` or before.
            if last != self._delivered_to and (not self._heap or self._heap[0][0] > last):
                self._delivered_to, self._saved_read = last, self._read
                self._save()
        return delivered

    def _save(self) -> None:
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"deliveredToMs": self._delivered_to, "readOffset": self._saved_read}), encoding="utf-8"
        )
        os.replace(tmp, self._path)
