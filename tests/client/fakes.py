"""A tiny in-process NameServer and broker built from the protocol layer, for the client's own tests.

They bind 127.0.0.1 on free ports; each test stops what it started. Only what the producer needs:
GET_ROUTEINFO_BY_TOPIC, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, HEART_BEAT, UNREGISTER_CLIENT, with
fault injection (error code, latency, dropped connections).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_rocketmq.protocol.codes import RequestCode, ResponseCode
from spark_rocketmq.protocol.frame import FLAG_ONEWAY, FrameDecoder, RemotingCommand
from spark_rocketmq.protocol.headers import SendMessageRequestHeader
from spark_rocketmq.protocol.message import decode_batch_body, decode_properties
from spark_rocketmq.protocol.route import BrokerData, QueueData, TopicRouteData
from spark_rocketmq.protocol.stored import offset_msg_id

#: Answers that still mean "stored": an injected one stores the message and answers with it.
STORED_CODES = (ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT)

Handler = Callable[[RemotingCommand], RemotingCommand | None]


class FrameServer:
    """Accepts connections; one thread per connection decodes frames and answers through ``handle``."""

    def __init__(self, handle: Handler, port: int = 0, ssl_context: ssl.SSLContext | None = None) -> None:
        self._handle = handle
        self._ssl = ssl_context
        self.port = port
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.requests: list[RemotingCommand] = []

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        sock.listen(64)
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(conn)  # before the thread starts: stop() must find every connection
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        if self._ssl is not None:
            raw = conn
            try:
                conn = self._ssl.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                raw.close()
                return
            with self._lock:
                self._conns.discard(raw)
                self._conns.add(conn)
        try:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    break
                for cmd in decoder.feed(data):
                    if self._listener is None:
                        return  # stopped: answer nothing more
                    with self._lock:
                        self.requests.append(cmd)
                    answer = self._handle(cmd)
                    if answer is not None and not cmd.flag & FLAG_ONEWAY:
                        conn.sendall(answer.encode())
        except Exception:
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def drop_connections(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            self._listener.close()
            self._listener = None
        self.drop_connections()


@dataclass
class Stored:
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    properties: dict[str, str]
    sys_flag: int
    broker_name: str

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")


@dataclass
class Fault:
    code: int | None = None
    latency_ms: int = 0
    times: int | None = None  # None: until cleared
    then: Fault | None = None  # the fault that follows once `times` are used up


class FakeBroker:
    def __init__(self, name: str, queues: int = 4) -> None:
        self.name = name
        self.queues = queues
        self.server = FrameServer(self._handle)
        self.messages: list[Stored] = []
        self.offsets: dict[tuple[str, int], int] = {}
        self.fault: Fault | None = None
        self.heartbeats: list[RemotingCommand] = []
        self.unregisters: list[RemotingCommand] = []
        self._lock = threading.Lock()
        self._commit = 0

    @property
    def addr(self) -> str:
        return self.server.addr

    def start(self) -> FakeBroker:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def inject(
        self, code: int | None = None, latency_ms: int = 0, times: int | None = None, then: Fault | None = None
    ) -> None:
        self.fault = Fault(code, latency_ms, times, then)

    def clear_faults(self) -> None:
        self.fault = None

    def _handle(self, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.HEART_BEAT:
            self.heartbeats.append(cmd)
            return cmd.response(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.UNREGISTER_CLIENT:
            self.unregisters.append(cmd)
            return cmd.response(ResponseCode.SUCCESS, ext_fields={})
        if cmd.code not in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE):
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark="not supported")
        fault = self.fault
        if fault is not None:
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self.fault = fault.then
            if fault.latency_ms:
                time.sleep(fault.latency_ms / 1000.0)
            if fault.code is not None and fault.code not in STORED_CODES:
                return cmd.response(fault.code, remark=f"injected fault {fault.code} on {self.name}")
        h = SendMessageRequestHeader.from_command(cmd)
        if h.queue_id >= self.queues:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"request queueId[{h.queue_id}] is illegal")
        if h.batch:
            records = [(r.body, r.properties, r.flag) for r in decode_batch_body(cmd.body)]
            sys_flags = [0] * len(records)
        else:
            records = [(cmd.body, decode_properties(h.properties), h.flag)]
            sys_flags = [h.sys_flag]
        ids = []
        with self._lock:
            key = (h.topic, h.queue_id)
            first = self.offsets.get(key, 0)
            for i, ((body, props, _flag), sf) in enumerate(zip(records, sys_flags, strict=True)):
                self.messages.append(Stored(h.topic, h.queue_id, first + i, body, props, sf, self.name))
                ids.append(offset_msg_id("127.0.0.1", self.server.port, self._commit))
                self._commit += 200
            self.offsets[key] = first + len(records)
        fields = {"queueId": str(h.queue_id), "MSG_REGION": "DefaultRegion", "msgId": ",".join(ids)}
        fields["queueOffset"] = str(first)
        code = fault.code if fault is not None and fault.code in STORED_CODES else ResponseCode.SUCCESS
        return cmd.response(code, ext_fields=fields)


@dataclass
class FakeCluster:
    """One or more NameServers knowing a set of brokers; every topic has `queues` queues on each broker."""

    brokers: dict[str, FakeBroker] = field(default_factory=dict)
    namesrvs: list[FrameServer] = field(default_factory=list)
    #: topic -> broker names hosting it (default: every broker). Topics in `unknown` get TOPIC_NOT_EXIST.
    placement: dict[str, list[str]] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)
    perm: int = 6

    @classmethod
    def start(cls, brokers: int = 2, namesrvs: int = 1) -> FakeCluster:
        c = cls()
        for i in range(brokers):
            c.add_broker(f"broker-{chr(ord('a') + i)}")
        for _ in range(namesrvs):
            ns = FrameServer(c._route)
            ns.start()
            c.namesrvs.append(ns)
        return c

    @property
    def namesrv_addr(self) -> str:
        return ";".join(ns.addr for ns in self.namesrvs)

    def add_broker(self, name: str) -> FakeBroker:
        b = FakeBroker(name).start()
        self.brokers[name] = b
        return b

    def remove_broker(self, name: str) -> None:
        self.brokers.pop(name).stop()

    def messages(self, topic: str | None = None) -> list[Stored]:
        out = [m for b in self.brokers.values() for m in b.messages]
        return [m for m in out if topic is None or m.topic == topic]

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.require("topic")
        names = self.placement.get(topic, list(self.brokers))
        if topic in self.unknown or not names:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, remark=f"No topic route info in name server for the topic: {topic}"
            )
        q = 8 if topic == "TBW102" else 4
        perm = 7 if topic == "TBW102" else self.perm
        route = TopicRouteData(
            queue_datas=[QueueData(n, q, q, perm) for n in names if n in self.brokers],
            broker_datas=[
                BrokerData("DefaultCluster", n, {0: self.brokers[n].addr}) for n in names if n in self.brokers
            ],
        )
        return cmd.response(ResponseCode.SUCCESS, body=route.to_json(standard=True))

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop()
        for ns in self.namesrvs:
            ns.stop()
