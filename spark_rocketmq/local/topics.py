"""A broker's topic configs, as its TopicConfigManager keeps them: in memory and in the store, TBW102
added at start when the broker auto-creates topics, a topic auto-created at its first send from the
send's default topic, UPDATE_AND_CREATE_TOPIC, and the data version each registration carries."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from ..protocol.codes import Perm, ResponseCode
from ..protocol.command import RemotingCommand, java_bool
from ..protocol.headers import DEFAULT_TOPIC, SendMessageRequestHeader
from ..protocol.message import is_legal_topic_name
from ..protocol.registry import TopicConfig
from .server import Connection
from .store import MessageStore

log = logging.getLogger("spark_rocketmq.local.broker")


class TopicBroker(Protocol):
    """What the topic configs read of their broker (LocalBroker is one): its settings, the store of the
    running broker, and its registration with the NameServers after a change."""

    @property
    def name(self) -> str: ...

    @property
    def auto_create_topic(self) -> bool: ...

    @property
    def default_topic_queue_nums(self) -> int: ...

    @property
    def permission(self) -> int: ...

    @property
    def store(self) -> MessageStore: ...

    def register_all(self) -> None: ...


class TopicConfigManager:
    """The topic configs of one broker; safe to share between threads."""

    def __init__(self, broker: TopicBroker) -> None:
        self.broker = broker
        self._topics: dict[str, TopicConfig] = {}
        self._topic_lock = threading.RLock()
        self._data_version = 0

    def load(self, saved: dict[str, dict[str, object]]) -> None:
        """The topics the store kept (at start), and TBW102 when the broker auto-creates topics."""
        with self._topic_lock:
            self._topics = {name: TopicConfig.from_json_obj(name, conf) for name, conf in saved.items()}
            if self.broker.auto_create_topic and DEFAULT_TOPIC not in self._topics:
                n = self.broker.default_topic_queue_nums
                self._topics[DEFAULT_TOPIC] = TopicConfig(DEFAULT_TOPIC, n, n, perm=Perm.READ_WRITE | Perm.INHERIT)

    def registration(self) -> tuple[list[TopicConfig], int]:
        """(topics, data version) for a registration: a new version, topic perms masked by the broker's."""
        with self._topic_lock:
            self._data_version += 1
            topics = [
                t if Perm.is_writeable(self.broker.permission) else _with_perm(t, t.perm & self.broker.permission)
                for t in self._topics.values()
            ]
            version = self._data_version
        return topics, version

    def put(self, conf: TopicConfig, store: MessageStore | None) -> None:
        """Add or replace a topic's config, saved in ``store`` (None: the broker is stopped, nothing saved)."""
        with self._topic_lock:
            self._topics[conf.topic_name] = conf
            if store is not None:
                store.save_topics({n: t.to_json_obj() for n, t in self._topics.items()})

    def remove(self, topic: str, store: MessageStore | None) -> None:
        """Remove a topic's config, saved in ``store`` (None: the broker is stopped, nothing saved)."""
        with self._topic_lock:
            self._topics.pop(topic, None)
            if store is not None:
                store.save_topics({n: t.to_json_obj() for n, t in self._topics.items()})

    def topic_configs(self) -> list[TopicConfig]:
        """The broker's topics, as it would register them."""
        with self._topic_lock:
            return list(self._topics.values())

    def topic(self, topic: str) -> TopicConfig | None:
        with self._topic_lock:
            return self._topics.get(topic)

    def topic_for_send(self, header: SendMessageRequestHeader) -> TopicConfig | None:
        """The topic's config; auto-created from header.default_topic when the broker allows it."""
        with self._topic_lock:
            conf = self._topics.get(header.topic)
            if conf is not None:
                return conf
            default = self._topics.get(header.default_topic) if self.broker.auto_create_topic else None
            if default is None or not default.perm & Perm.INHERIT:
                return None
            nums = max(1, min(header.default_topic_queue_nums, default.write_queue_nums))
            conf = TopicConfig(header.topic, nums, nums, perm=Perm.READ_WRITE)
            self._topics[header.topic] = conf
            self.broker.store.save_topics({n: t.to_json_obj() for n, t in self._topics.items()})
        log.info("%s: auto-created topic %s with %d queues", self.broker.name, header.topic, nums)
        self.broker.register_all()
        return conf

    def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC."""
        topic = cmd.require("topic")
        if not is_legal_topic_name(topic):
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"The specified topic[{topic}] is illegal")
        write = cmd.int_field("writeQueueNums")
        read = int(cmd.field("readQueueNums") or write)
        perm = int(cmd.field("perm") or Perm.READ_WRITE)
        with self._topic_lock:
            self._topics[topic] = TopicConfig(topic, read, write, perm=perm, order=java_bool(cmd.field("order")))
            self.broker.store.save_topics({n: t.to_json_obj() for n, t in self._topics.items()})
        self.broker.register_all()
        return cmd.response(ResponseCode.SUCCESS)


def _with_perm(t: TopicConfig, perm: int) -> TopicConfig:
    return TopicConfig(t.topic_name, t.read_queue_nums, t.write_queue_nums, perm, t.topic_sys_flag, t.order)
