"""The consumer side of a local broker: enough of PULL_MESSAGE, consumer groups and offsets for a
standard consumer to read a topic back."""

from __future__ import annotations

import json
import threading
import time
from typing import Protocol

from ..errors import ProtocolError
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.registry import TopicConfig
from ..protocol.stored import decode_stored_message
from .server import Connection, Handler
from .store import MessageStore


class ConsumeBroker(Protocol):
    """What the consumer side reads of its broker (LocalBroker is one): the store of the running
    broker and its topics."""

    @property
    def store(self) -> MessageStore: ...

    def topic(self, topic: str) -> TopicConfig | None: ...


class ConsumerSide:
    """Consumer groups, their members and committed offsets, and the pull handlers of one broker."""

    def __init__(self, broker: ConsumeBroker) -> None:
        self.broker = broker
        self._consumers: dict[str, dict[str, Connection]] = {}
        self._producers: dict[str, dict[str, Connection]] = {}
        self._consumer_offsets: dict[tuple[str, str, int], int] = {}
        self._lock = threading.Lock()

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.PULL_MESSAGE: self._pull,
            RequestCode.HEART_BEAT: self._heartbeat,
            RequestCode.UNREGISTER_CLIENT: self._unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_consumer_offset,
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.GET_MIN_OFFSET: self._min_offset,
        }

    def _pull(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.require("topic")
        queue_id = cmd.int_field("queueId")
        offset = cmd.int_field("queueOffset")
        max_nums = max(1, min(cmd.int_field("maxMsgNums"), 256))
        sys_flag = int(cmd.field("sysFlag") or 0)
        suspend_ms = int(cmd.field("suspendTimeoutMillis") or 0)
        expression = (cmd.field("subscription") or "*").strip()
        tags = None if expression in ("", "*") else {t.strip() for t in expression.split("||")}
        store = self.broker.store
        if self.broker.topic(topic) is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist, apply first please!")
        deadline = time.monotonic() + min(suspend_ms, 1000) / 1000.0 if sys_flag & 0x2 else 0.0
        while True:
            max_offset = store.max_offset(topic, queue_id)
            if offset < max_offset or time.monotonic() >= deadline:
                break
            with store.new_message:
                store.new_message.wait(max(0.0, deadline - time.monotonic()))

        def answer(code: int, remark: str, next_offset: int, body: bytes = b"") -> RemotingCommand:
            fields = {
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": str(next_offset),
                "minOffset": "0",
                "maxOffset": str(max_offset),
            }
            return cmd.response(code, remark=remark, ext_fields=fields, body=body)

        if offset > max_offset or offset < 0:
            return answer(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", max_offset if offset > 0 else 0)
        if offset == max_offset:
            return answer(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", offset)
        records = store.read(topic, queue_id, offset, max_nums)
        if tags is not None:
            records = [r for r in records if decode_stored_message(r).tags in tags]
        next_offset = offset + min(max_nums, max_offset - offset)
        if not records:
            return answer(ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", next_offset)
        return answer(ResponseCode.SUCCESS, "FOUND", next_offset, b"".join(records))

    def _heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            data = json.loads(str(cmd.body, "utf-8")) if cmd.body else {}
            client_id = str(data.get("clientID", conn.peer_addr))
            groups = [str(c["groupName"]) for c in data.get("consumerDataSet") or []]
            producer_groups = [str(p["groupName"]) for p in data.get("producerDataSet") or []]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProtocolError(f"HEART_BEAT body is not HeartbeatData: {exc}") from None
        with self._lock:
            for group in groups:
                self._consumers.setdefault(group, {})[client_id] = conn
            for group in producer_groups:
                self._producers.setdefault(group, {})[client_id] = conn
        return cmd.response(ResponseCode.SUCCESS)

    def producer_connections(self, group: str) -> list[Connection]:
        """Open connections of the producers of ``group`` (registered by HEART_BEAT), as
        ProducerManager keeps them for transaction check-backs."""
        with self._lock:
            return [c for _, c in sorted(self._producers.get(group, {}).items()) if not c.closed]

    def _unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        client_id = cmd.field("clientID")
        group = cmd.field("consumerGroup")
        if group and client_id:
            with self._lock:
                self._consumers.get(group, {}).pop(client_id, None)
        producer_group = cmd.field("producerGroup")
        if producer_group and client_id:
            with self._lock:
                self._producers.get(producer_group, {}).pop(client_id, None)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={})

    def _consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.require("consumerGroup")
        with self._lock:
            members = self._consumers.get(group, {})
            ids = sorted(cid for cid, c in members.items() if not c.closed)
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode())

    def _query_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        key = (cmd.require("consumerGroup"), cmd.require("topic"), cmd.int_field("queueId"))
        with self._lock:
            offset = self._consumer_offsets.get(key, 0)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def _update_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        key = (cmd.require("consumerGroup"), cmd.require("topic"), cmd.int_field("queueId"))
        with self._lock:
            self._consumer_offsets[key] = cmd.int_field("commitOffset")
        return cmd.response(ResponseCode.SUCCESS, ext_fields={})

    def _max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = self.broker.store.max_offset(cmd.require("topic"), cmd.int_field("queueId"))
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def _min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cmd.require("topic")
        cmd.int_field("queueId")
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
