"""A local broker: accepts and stores messages as a 4.9.8 broker does, registers with NameServers,
serves enough of the consumer protocol for a standard consumer to read a topic back, and takes
injected faults for tests."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..errors import ProtocolError, RocketMQError
from ..protocol.codes import Perm, RequestCode, ResponseCode
from ..protocol.frame import FrameDecoder, RemotingCommand
from ..protocol.headers import DEFAULT_TOPIC, SendMessageRequestHeader
from ..protocol.registry import TopicConfig, register_broker_request, unregister_broker_request
from ..protocol.stored import decode_stored_message
from .send import SEND_CODES, SendProcessor, valid_topic_name
from .send_queue import (
    DEFAULT_SEND_QUEUE_CAPACITY,
    DEFAULT_WAIT_TIME_MILLS_IN_SEND_QUEUE,
    OVERLOAD_REMARK,
    SendQueue,
)
from .server import Connection, Freeze, RemotingServer
from .store import LocalMessage, MessageStore, as_local

log = logging.getLogger(__name__)


@dataclass
class Faults:
    """What a test asked a broker to do wrong."""

    latency_ms: float = 0.0
    code: int | None = None
    times: int | None = None
    fraction: float | None = None
    remark: str | None = None

    def take_code(self) -> int | None:
        if self.code is None:
            return None
        if self.times is not None:
            if self.times <= 0:
                return None
            self.times -= 1
            return self.code
        if self.fraction is not None:
            return self.code if random.random() < self.fraction else None
        return self.code


class _NamesrvLink:
    """The broker's own connection to one NameServer (request, then wait for its answer)."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._opaque = itertools.count(1)

    def request(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        with self._lock:
            try:
                if self._sock is None:
                    host, _, port = self.addr.rpartition(":")
                    self._sock = socket.create_connection((host, int(port)), timeout=timeout)
                sock = self._sock
                sock.settimeout(timeout)
                cmd.opaque = next(self._opaque)
                sock.sendall(cmd.encode())
                decoder = FrameDecoder()
                while True:
                    data = sock.recv(65536)
                    if not data:
                        raise OSError("NameServer closed the connection")
                    for answer in decoder.feed(data):
                        if answer.opaque == cmd.opaque:
                            return answer
            except (OSError, ProtocolError):
                self._close_locked()
                raise

    def _close_locked(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()


class LocalBroker:
    """Broker `name` (brokerId 0, a master) on 127.0.0.1, storing under store_dir.

    Send requests go through one send thread fed by a bounded queue (`send_queue_capacity`), and a
    request that waited `wait_time_mills_in_send_queue` ms or more (0 or None: no limit) is answered
    SYSTEM_BUSY, as a 4.9.8 broker's BrokerFastFailure does. `ack_only=True` checks every request
    and every batch record as the store would, answers SEND_OK with real queue offsets and offset
    message ids, and writes nothing (for benchmarks of the sending side).
    """

    def __init__(
        self,
        name: str,
        namesrv_addrs: list[str],
        store_dir: str | Path,
        *,
        cluster: str = "DefaultCluster",
        port: int = 0,
        auto_create_topic: bool = True,
        default_topic_queue_nums: int = 8,
        max_message_size: int = 4 * 1024 * 1024,
        register_interval_s: float = 30.0,
        ack_only: bool = False,
        wait_time_mills_in_send_queue: int | None = DEFAULT_WAIT_TIME_MILLS_IN_SEND_QUEUE,
        send_queue_capacity: int = DEFAULT_SEND_QUEUE_CAPACITY,
    ) -> None:
        self.name = name
        self.cluster = cluster
        self.namesrv_addrs = list(namesrv_addrs)
        self.store_dir = Path(store_dir)
        self.auto_create_topic = auto_create_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.max_message_size = max_message_size
        self.register_interval_s = register_interval_s
        self.ack_only = ack_only
        self.wait_time_mills_in_send_queue = wait_time_mills_in_send_queue
        self.send_queue_capacity = send_queue_capacity
        self.permission = Perm.READ_WRITE
        self.faults = Faults()
        self._server = RemotingServer(name, self._dispatch, port=port)
        self._links: list[_NamesrvLink] = []
        self._store: MessageStore | None = None
        self._topics: dict[str, TopicConfig] = {}
        self._topic_lock = threading.RLock()
        self._data_version = 0
        self._stop = threading.Event()
        self._consumers: dict[str, dict[str, Connection]] = {}
        self._consumer_offsets: dict[tuple[str, str, int], int] = {}
        self._state_lock = threading.Lock()
        self._send_queue: SendQueue | None = None
        #: Send requests answered SEND_OK (stored, or acknowledged when ack_only).
        self.sends = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def addr(self) -> str:
        return self._server.addr

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def running(self) -> bool:
        return self._server.running

    @property
    def stopping(self) -> threading.Event:
        """Set while the broker stops (and when it is stopped)."""
        return self._stop

    @property
    def freeze(self) -> Freeze:
        """The run state of the current generation's threads (see hang())."""
        return self._server.freeze

    @property
    def hung(self) -> bool:
        return self._server.freeze.frozen

    @property
    def send_queue_size(self) -> int:
        """Send requests waiting for the send thread."""
        return len(self._send_queue) if self._send_queue is not None else 0

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            raise RocketMQError(f"broker {self.name} is stopped: start() it to read its store")
        return self._store

    def start(self) -> LocalBroker:
        if self.running:
            return self
        self._store = MessageStore(self.store_dir)
        saved = self._store.load_topics()
        with self._topic_lock:
            self._topics = {name: TopicConfig.from_json_obj(name, conf) for name, conf in saved.items()}
            if self.auto_create_topic and DEFAULT_TOPIC not in self._topics:
                n = self.default_topic_queue_nums
                self._topics[DEFAULT_TOPIC] = TopicConfig(DEFAULT_TOPIC, n, n, perm=Perm.READ_WRITE | Perm.INHERIT)
        self._stop.clear()
        self._server.start()
        self._send_queue = SendQueue(
            self.name,
            SendProcessor(self, ack_only=self.ack_only).process,
            self._server.freeze,
            capacity=self.send_queue_capacity,
            wait_time_mills=self.wait_time_mills_in_send_queue,
        ).start()
        self._links = [_NamesrvLink(a) for a in self.namesrv_addrs]
        self.register_all()
        threading.Thread(target=self._register_loop, name=f"{self.name}-register", daemon=True).start()
        return self

    def stop(self) -> None:
        """Shut down as a broker does: unregister from every NameServer, close connections, keep the store."""
        if not self.running:
            return
        self._stop.set()
        if self._send_queue is not None:
            self._send_queue.stop()
        for link in self._links:
            with contextlib.suppress(OSError, ProtocolError):
                link.request(unregister_broker_request(self.cluster, self.name, self.addr, 0), timeout=1.0)
            link.close()
        self._server.stop()  # also ends a hang: every held thread leaves
        if self._store is not None:
            self._store.close()
            self._store = None

    def _register_loop(self) -> None:
        stop = self._stop
        freeze = self._server.freeze
        while not stop.wait(self.register_interval_s) and freeze.passage():
            self.register_all()

    def register_all(self) -> None:
        """REGISTER_BROKER to every NameServer now (topic perms masked by the broker's permission)."""
        with self._topic_lock:
            self._data_version += 1
            topics = [
                t if Perm.is_writeable(self.permission) else _with_perm(t, t.perm & self.permission)
                for t in self._topics.values()
            ]
            version = self._data_version
        for link in self._links:
            req = register_broker_request(
                cluster_name=self.cluster,
                broker_name=self.name,
                broker_addr=self.addr,
                broker_id=0,
                ha_server_addr=f"127.0.0.1:{self.port + 1}",
                topics=topics,
                counter=version,
                timestamp=int(time.time() * 1000),
            )
            try:
                link.request(req)
            except (OSError, ProtocolError) as exc:
                log.debug("%s: register with %s failed: %s", self.name, link.addr, exc)

    # -- administration (tests, LocalCluster) -------------------------------------------------------
    def create_topic(self, topic: str, queues: int = 4, perm: int = Perm.READ_WRITE, register: bool = True) -> None:
        with self._topic_lock:
            self._topics[topic] = TopicConfig(topic, queues, queues, perm=perm)
            if self._store is not None:
                self._store.save_topics({n: t.to_json_obj() for n, t in self._topics.items()})
        if register and self.running:
            self.register_all()

    def topic(self, topic: str) -> TopicConfig | None:
        with self._topic_lock:
            return self._topics.get(topic)

    def inject(
        self,
        latency_ms: float = 0.0,
        code: int | None = None,
        times: int | None = None,
        fraction: float | None = None,
        remark: str | None = None,
    ) -> None:
        """Extra latency on every send; and/or answer the next `times` sends (or a `fraction` of
        them, or all) with ResponseCode `code`."""
        self.faults = Faults(latency_ms, code, times, fraction, remark)

    def clear_faults(self) -> None:
        self.faults = Faults()

    def hang(self) -> None:
        """Stop as a SIGSTOP stops a broker: connections stay open and new ones complete in the
        kernel's backlog, but nothing is read (clients' writes block once socket buffers fill),
        nothing is answered (queued requests stay queued, none expires) and the broker stops
        registering with the NameServers, which expire it in time."""
        self._server.hang()

    def resume(self) -> None:
        """Lift hang(): every thread continues where it held; buffered requests are read and answered."""
        self._server.resume()

    def drop_connections(self) -> None:
        self._server.drop_connections()

    def set_writable(self, writable: bool) -> None:
        """brokerPermission with or without WRITE; re-registers at once."""
        self.permission = Perm.READ_WRITE if writable else Perm.READ
        if self.running:
            self.register_all()

    def messages(self, topic: str) -> list[LocalMessage]:
        return [as_local(m, self.name) for m in self.store.messages(topic)]

    # -- requests ----------------------------------------------------------------------------------
    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        code = cmd.code
        if code in SEND_CODES:
            queue = self._send_queue
            if queue is not None and queue.submit(conn, cmd):
                return None  # the send thread answers
            return cmd.response(ResponseCode.SYSTEM_BUSY, remark=OVERLOAD_REMARK)
        handler = self._handlers.get(code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {code} not supported")
        return handler(self, conn, cmd)

    def topic_for_send(self, header: SendMessageRequestHeader) -> TopicConfig | None:
        """The topic's config; auto-created from header.default_topic when the broker allows it."""
        with self._topic_lock:
            conf = self._topics.get(header.topic)
            if conf is not None:
                return conf
            default = self._topics.get(header.default_topic) if self.auto_create_topic else None
            if default is None or not default.perm & Perm.INHERIT:
                return None
            nums = max(1, min(header.default_topic_queue_nums, default.write_queue_nums))
            conf = TopicConfig(header.topic, nums, nums, perm=Perm.READ_WRITE)
            self._topics[header.topic] = conf
            self.store.save_topics({n: t.to_json_obj() for n, t in self._topics.items()})
        log.info("%s: auto-created topic %s with %d queues", self.name, header.topic, nums)
        self.register_all()
        return conf

    # -- consumer side -----------------------------------------------------------------------------
    def _pull(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.require("topic")
        queue_id = cmd.int_field("queueId")
        offset = cmd.int_field("queueOffset")
        max_nums = max(1, min(cmd.int_field("maxMsgNums"), 256))
        sys_flag = int(cmd.field("sysFlag") or 0)
        suspend_ms = int(cmd.field("suspendTimeoutMillis") or 0)
        expression = (cmd.field("subscription") or "*").strip()
        tags = None if expression in ("", "*") else {t.strip() for t in expression.split("||")}
        store = self.store
        if self.topic(topic) is None:
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
            data = json.loads(cmd.body.decode("utf-8")) if cmd.body else {}
            client_id = str(data.get("clientID", conn.peer_addr))
            groups = [str(c["groupName"]) for c in data.get("consumerDataSet") or []]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProtocolError(f"HEART_BEAT body is not HeartbeatData: {exc}") from None
        with self._state_lock:
            for group in groups:
                self._consumers.setdefault(group, {})[client_id] = conn
        return cmd.response(ResponseCode.SUCCESS)

    def _unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        client_id = cmd.field("clientID")
        group = cmd.field("consumerGroup")
        if group and client_id:
            with self._state_lock:
                self._consumers.get(group, {}).pop(client_id, None)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={})

    def _consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.require("consumerGroup")
        with self._state_lock:
            members = self._consumers.get(group, {})
            ids = sorted(cid for cid, c in members.items() if not c.closed)
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode())

    def _query_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        key = (cmd.require("consumerGroup"), cmd.require("topic"), cmd.int_field("queueId"))
        with self._state_lock:
            offset = self._consumer_offsets.get(key, 0)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def _update_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        key = (cmd.require("consumerGroup"), cmd.require("topic"), cmd.int_field("queueId"))
        with self._state_lock:
            self._consumer_offsets[key] = cmd.int_field("commitOffset")
        return cmd.response(ResponseCode.SUCCESS, ext_fields={})

    def _max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = self.store.max_offset(cmd.require("topic"), cmd.int_field("queueId"))
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def _min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cmd.require("topic")
        cmd.int_field("queueId")
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})

    def _create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.require("topic")
        if not valid_topic_name(topic):
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"The specified topic[{topic}] is illegal")
        write = cmd.int_field("writeQueueNums")
        read = int(cmd.field("readQueueNums") or write)
        perm = int(cmd.field("perm") or Perm.READ_WRITE)
        with self._topic_lock:
            self._topics[topic] = TopicConfig(topic, read, write, perm=perm, order=cmd.field("order") == "true")
            self.store.save_topics({n: t.to_json_obj() for n, t in self._topics.items()})
        self.register_all()
        return cmd.response(ResponseCode.SUCCESS)

    _handlers: ClassVar[dict[int, Callable[..., RemotingCommand]]] = {
        RequestCode.PULL_MESSAGE: _pull,
        RequestCode.HEART_BEAT: _heartbeat,
        RequestCode.UNREGISTER_CLIENT: _unregister_client,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: _consumer_list,
        RequestCode.QUERY_CONSUMER_OFFSET: _query_consumer_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: _update_consumer_offset,
        RequestCode.GET_MAX_OFFSET: _max_offset,
        RequestCode.GET_MIN_OFFSET: _min_offset,
        RequestCode.UPDATE_AND_CREATE_TOPIC: _create_topic,
    }


def _with_perm(t: TopicConfig, perm: int) -> TopicConfig:
    return TopicConfig(t.topic_name, t.read_queue_nums, t.write_queue_nums, perm, t.topic_sys_flag, t.order)
