"""The consumer side of a local broker: consumer groups and their heartbeats, committed offsets, the queue
offsets (min, max, by store time), and PULL_MESSAGE (pull.py), answered as the real broker version does."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Protocol

from ..errors import ProtocolError
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.headers import HeartbeatData
from ..protocol.message import RETRY_GROUP_TOPIC_PREFIX
from .offsets import ConsumerOffsets
from .pull import PullBroker, PullProcessor
from .server import Connection, Handler


class ConsumeBroker(PullBroker, Protocol):
    """What the consumer side reads of its broker (LocalBroker is one): what its pulls read, and the topics it
    creates (a group's retry topic at the group's first heartbeat)."""

    def create_topic(self, topic: str, queues: int = 4, perm: int = ..., register: bool = True) -> None: ...


class ConsumerSide:
    """Consumer groups, their members and committed offsets, and the pull handlers of one broker."""

    def __init__(self, broker: ConsumeBroker) -> None:
        self.broker = broker
        self._consumers: dict[str, dict[str, Connection]] = {}
        self._producers: dict[str, dict[str, Connection]] = {}
        #: Each group's subscriptions by topic, (expression, expression type), as its last heartbeat named them.
        self._subscriptions: dict[str, dict[str, tuple[str, str]]] = {}
        self._lock = threading.Lock()
        self._offsets: ConsumerOffsets | None = None
        self.pulls = PullProcessor(broker, self.offsets, self._group_subscriptions)

    def start(self, store_dir: Path) -> None:
        """Load the groups and offsets kept in store_dir; start holding pulls."""
        self._offsets = ConsumerOffsets(store_dir)
        self.pulls.start()

    def stop(self) -> None:
        self.pulls.stop()

    def offsets(self) -> ConsumerOffsets:
        if self._offsets is None:
            raise ProtocolError("the broker is stopped: it has no consumer offsets")
        return self._offsets

    def _group_subscriptions(self, group: str) -> dict[str, tuple[str, str]] | None:
        with self._lock:
            return self._subscriptions.get(group)

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.PULL_MESSAGE: self.pulls.handle,
            RequestCode.HEART_BEAT: self._heartbeat,
            RequestCode.UNREGISTER_CLIENT: self._unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_consumer_offset,
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.GET_MIN_OFFSET: self._min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset,
        }

    def _heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        heartbeat = HeartbeatData.decode(cmd.body)
        client_id = heartbeat.client_id or conn.peer_addr
        consumers, producer_groups = heartbeat.consumers, heartbeat.producer_groups
        for group in consumers:
            self.offsets().add_group(group)
            # ClientManageProcessor.heartBeat: the group's retry topic (retryQueueNums 1), registered at once
            retry = RETRY_GROUP_TOPIC_PREFIX + group
            if self.broker.topic(retry) is None:
                self.broker.create_topic(retry, queues=1)
        with self._lock:
            for group, subscriptions in consumers.items():
                self._consumers.setdefault(group, {})[client_id] = conn
                self._subscriptions[group] = subscriptions
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
        """The committed offset; for a group without one, 0 while the queue still starts at offset 0 (4.9.8: also
        when it is empty; 5.x: not when empty, nor when setZeroIfNotFound=false), else QUERY_NOT_FOUND."""
        group, topic, queue_id = cmd.require("consumerGroup"), cmd.require("topic"), cmd.int_field("queueId")
        offset = self.offsets().query(group, topic, queue_id)
        if offset is not None:
            return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
        store = self.broker.store
        v4 = self.broker.rocketmq_version.startswith("4.")
        if not v4 and cmd.field("setZeroIfNotFound") == "false":
            remark = "Not found, do not set to zero, maybe this group boot first"
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, remark=remark)
        if store.min_offset(topic, queue_id) <= 0 and (v4 or store.max_offset(topic, queue_id) > 0):
            return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        remark = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, remark=remark)

    def _update_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Commit the offset; a 5.x broker first checks that it knows the group and the topic."""
        group, topic, queue_id = cmd.require("consumerGroup"), cmd.require("topic"), cmd.int_field("queueId")
        offset = cmd.int_field("commitOffset")
        if not self.broker.rocketmq_version.startswith("4."):
            if not self.offsets().has_group(group):
                return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"Group {group} not exist!")
            if self.broker.topic(topic) is None:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"Topic {topic} not exist!")
        self.offsets().commit(group, topic, queue_id, offset)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={})

    def _max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = self.broker.store.max_offset(cmd.require("topic"), cmd.int_field("queueId"))
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def _min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = self.broker.store.min_offset(cmd.require("topic"), cmd.int_field("queueId"))
        remark = None if self.broker.rocketmq_version.startswith("4.") else ""  # 5.x: through its RPC answer
        return cmd.response(ResponseCode.SUCCESS, remark=remark, ext_fields={"offset": str(offset)})

    def _search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The queue offset of a store time (ConsumeQueue.offset_by_time; 5.x reads boundaryType)."""
        upper = (cmd.field("boundaryType") or "").lower() == "upper"
        offset = self.broker.store.offset_by_time(
            cmd.require("topic"),
            cmd.int_field("queueId"),
            cmd.int_field("timestamp"),
            self.broker.rocketmq_version,
            upper,
        )
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
