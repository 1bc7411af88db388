"""Delayed messages, held and delivered as a 4.9.8 broker's ScheduleMessageService does.

A message sent on its own with DELAY=n (n >= 1; a batch may not be delayed) is stored under
SCHEDULE_TOPIC_XXXX, queue n - 1, with REAL_TOPIC and REAL_QID put into its properties
(CommitLog.asyncPutMessage); the answer names the queue the client asked for and the offset in
the schedule queue. The service reads each level's queue in order; once a message's store time
plus its level's delay has passed, it stores the message again in its real topic and queue
(messageTimeup): same body, flag, sysflag, born time and host, reconsume times; its properties,
DELAY, REAL_TOPIC and REAL_QID included, as a 4.9.8 broker leaves them. Each level's next offset
is kept in delayOffset.json beside the store, so a broker stopped and started again delivers
nothing twice (one killed between a delivery and that file's update delivers it again, as a real
broker may). A held message that cannot be stored again is logged and dropped, as messageTimeup's
caller does.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from ..protocol.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    decode_properties,
    encode_hashmap_properties,
)
from ..protocol.stored import decode_stored_message
from ..protocol.transaction import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from .delivery import deliver_held
from .server import Freeze
from .service import ServiceThread
from .stamp import put_stamp
from .store import MessageStore

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: MessageStoreConfig.messageDelayLevel's default: the delay of levels 1..18.
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
#: ScheduleMessageService's DELAY_FOR_A_WHILE: how often a level's queue is looked at again.
CHECK_INTERVAL_S = 0.1
OFFSETS_FILE = "delayOffset.json"
_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """ScheduleMessageService.parseDelayLevel: "1s 5s ... 2h" -> each level's delay in ms (units s, m, h, d)."""
    levels: list[int] = []
    for word in text.split():
        unit, number = word[-1:], word[:-1]
        if unit not in _UNITS_MS or not (number.isascii() and number.isdigit()):
            raise ConfigError(
                f"message_delay_level {text!r}: {word!r} is not a number followed by s, m, h or d (e.g. '1s 5s 2m')"
            )
        levels.append(int(number) * _UNITS_MS[unit])
    if not levels:
        raise ConfigError("message_delay_level is empty: give each level's delay, e.g. '1s 5s 10s'")
    return levels


def schedule_properties(properties: str, stamp: Mapping[str, str], topic: str, queue_id: int, level: int) -> bytes:
    """The properties a 4.9.8 broker stores a delayed message with: the request's, CLUSTER put in,
    WAIT taken out and put back (SendMessageProcessor), DELAY set to the level it is held at, then
    REAL_TOPIC and REAL_QID (CommitLog), written in the HashMap's order."""
    props = put_stamp(decode_properties(properties), stamp)
    props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return encode_hashmap_properties(props).encode()


class ScheduleService:
    """Delivers one broker's delayed messages when they are due: ``deliver_due()`` at once (at
    ``now_ms``, epoch milliseconds, or the clock's now), or a thread every CHECK_INTERVAL_S between
    start() and stop()."""

    def __init__(
        self,
        name: str,
        store: MessageStore,
        levels_ms: list[int],
        store_dir: Path,
        freeze: Freeze,
    ) -> None:
        self.levels_ms = list(levels_ms)
        self._store = store
        self._path = store_dir / OFFSETS_FILE
        self._lock = threading.Lock()
        self._service = ServiceThread(
            f"{name}-schedule", CHECK_INTERVAL_S, self.deliver_due, freeze, "delivering delayed messages failed"
        )
        self._offsets: dict[int, int] = {}
        if self._path.is_file():
            saved = json.loads(self._path.read_text(encoding="utf-8"))
            self._offsets = {int(level): int(offset) for level, offset in saved.get("offsetTable", {}).items()}

    def start(self) -> ScheduleService:
        self._service.start()
        return self

    def stop(self) -> None:
        self._service.stop()

    def deliver_due(self, now_ms: int | None = None) -> int:
        """Store every held message whose time has come in its real topic; how many were."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        delivered = passed = 0
        with self._lock:
            try:
                for level, delay in enumerate(self.levels_ms, start=1):
                    queue = level - 1
                    while not self._service.stopping.is_set():
                        offset = self._offsets.get(level, 0)
                        if offset >= self._store.max_offset(SCHEDULE_TOPIC, queue):
                            break
                        (record,) = self._store.read(SCHEDULE_TOPIC, queue, offset, 1)
                        try:
                            held = decode_stored_message(record)
                            if held.store_timestamp + delay > now:
                                break  # a level's messages are held in store order: the rest are later
                            # messageTimeup: its properties as held, DELAY, REAL_TOPIC and REAL_QID included.
                            deliver_held(
                                self._store, held, held.properties, sys_flag=held.sys_flag, store_timestamp=now
                            )
                            delivered += 1
                        except Exception:
                            log.exception("delayed message at offset %d of level %d dropped", offset, level)
                        self._offsets[level] = offset + 1
                        passed += 1
            finally:
                if passed:
                    self._save()
        return delivered

    def _save(self) -> None:
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"offsetTable": {str(k): v for k, v in self._offsets.items()}}), encoding="utf-8")
        os.replace(tmp, self._path)
