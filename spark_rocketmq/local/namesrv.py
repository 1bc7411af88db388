"""A local NameServer: route registration by broker heartbeat, route expiry, route discovery."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ..protocol.codes import MQ_VERSION_V4_9_4, RequestCode, ResponseCode
from ..protocol.command import RemotingCommand, java_bool
from ..protocol.registry import TopicConfig, cluster_info_body, parse_register_broker
from ..protocol.route import BrokerData, QueueData, TopicRouteData
from .server import Connection, RemotingServer

log = logging.getLogger(__name__)

FAQ_URL = "http://rocketmq.apache.org/docs/faq/"


@dataclass
class _LiveBroker:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    last_update: float
    conn: Connection | None


class LocalNameServer:
    """NameServer on 127.0.0.1. Brokers silent for `broker_expiry_s` are dropped by a scan every
    `scan_interval_s`; a broker whose connection closes is dropped at once."""

    def __init__(
        self,
        port: int = 0,
        *,
        broker_expiry_s: float = 120.0,
        scan_interval_s: float = 10.0,
        name: str = "namesrv",
    ) -> None:
        self.name = name
        self.broker_expiry_s = broker_expiry_s
        self.scan_interval_s = scan_interval_s
        self._server = RemotingServer(name, self._dispatch, port=port)
        self._server.on_close = self._connection_closed
        # Reentrant: a waiter on `changed` holds it while it reads routes.
        self._lock = threading.RLock()
        self._brokers: dict[str, _LiveBroker] = {}  # by broker address
        #: RouteInfoManager's topicQueueTable as masters made it: each brokerName's topics, from its master's
        #: last registration, kept while any address of that brokerName (a slave) is registered.
        self._master_topics: dict[str, dict[str, TopicConfig]] = {}
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None
        self.changed = threading.Condition(self._lock)

    @property
    def addr(self) -> str:
        return self._server.addr

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def running(self) -> bool:
        return self._server.running

    def start(self) -> LocalNameServer:
        self._server.start()
        self._stop.clear()
        self._scanner = threading.Thread(target=self._scan_loop, name=f"{self.name}-scan", daemon=True)
        self._scanner.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.stop()
        with self._lock:
            self._brokers.clear()
            self._master_topics.clear()

    # -- liveness --------------------------------------------------------------------------------
    def _scan_loop(self) -> None:
        while not self._stop.wait(self.scan_interval_s):
            self.scan_not_active_brokers()

    def scan_not_active_brokers(self) -> list[str]:
        """RouteInfoManager.scanNotActiveBroker: drop brokers silent for longer than the expiry."""
        now = time.monotonic()
        with self._lock:
            gone = [a for a, b in self._brokers.items() if now - b.last_update > self.broker_expiry_s]
            for addr in gone:
                log.info("%s: broker %s expired", self.name, addr)
                self._remove(addr)
            if gone:
                self.changed.notify_all()
        return gone

    def _connection_closed(self, conn: Connection) -> None:
        with self._lock:
            gone = [a for a, b in self._brokers.items() if b.conn is conn]
            for addr in gone:
                log.info("%s: broker %s left (connection closed)", self.name, addr)
                self._remove(addr)
            if gone:
                self.changed.notify_all()

    def _remove(self, addr: str) -> None:
        """A broker gone (onChannelDestroy, unregisterBroker): its brokerName's topics go with its last address."""
        gone = self._brokers.pop(addr, None)
        if gone is not None and not any(b.broker_name == gone.broker_name for b in self._brokers.values()):
            self._master_topics.pop(gone.broker_name, None)

    def broker_names(self) -> list[str]:
        with self._lock:
            return sorted({b.broker_name for b in self._brokers.values()})

    # -- requests ----------------------------------------------------------------------------------
    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        code = cmd.code
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return self._route(cmd)
        if code == RequestCode.REGISTER_BROKER:
            return self._register(conn, cmd)
        if code == RequestCode.UNREGISTER_BROKER:
            addr = cmd.require("brokerAddr")
            with self._lock:
                self._remove(addr)
                self.changed.notify_all()
            return cmd.response(ResponseCode.SUCCESS)
        if code == RequestCode.GET_BROKER_CLUSTER_INFO:
            with self._lock:
                table: dict[str, tuple[str, dict[int, str]]] = {}
                for b in self._brokers.values():
                    table.setdefault(b.broker_name, (b.cluster, {}))[1][b.broker_id] = b.addr
            return cmd.response(ResponseCode.SUCCESS, body=cluster_info_body(table))
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {code} not supported")

    def _register(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        reg = parse_register_broker(cmd)
        with self._lock:
            self._brokers[reg.broker_addr] = _LiveBroker(
                cluster=reg.cluster_name,
                broker_name=reg.broker_name,
                broker_id=reg.broker_id,
                addr=reg.broker_addr,
                last_update=time.monotonic(),
                conn=conn,
            )
            if reg.broker_id == 0:  # only a master's topics make queue data (createAndUpdateQueueData)
                self._master_topics[reg.broker_name] = {t.topic_name: t for t in reg.topics}
            self.changed.notify_all()
        return cmd.response(ResponseCode.SUCCESS, ext_fields={})

    def route(self, topic: str) -> TopicRouteData | None:
        with self._lock:
            queue_datas: dict[str, QueueData] = {}
            for broker_name, topics in self._master_topics.items():
                conf = topics.get(topic)
                if conf is not None:
                    queue_datas[broker_name] = QueueData(
                        broker_name=broker_name,
                        read_queue_nums=conf.read_queue_nums,
                        write_queue_nums=conf.write_queue_nums,
                        perm=conf.perm,
                        topic_sys_flag=conf.topic_sys_flag,
                    )
            if not queue_datas:
                return None
            broker_datas: dict[str, BrokerData] = {}
            for b in self._brokers.values():
                if b.broker_name in queue_datas:
                    bd = broker_datas.setdefault(b.broker_name, BrokerData(b.cluster, b.broker_name, {}))
                    bd.broker_addrs[b.broker_id] = b.addr
        return TopicRouteData(queue_datas=list(queue_datas.values()), broker_datas=list(broker_datas.values()))

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.require("topic")
        route = self.route(topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {topic}\nSee {FAQ_URL} for further details.",
            )
        standard = cmd.version >= MQ_VERSION_V4_9_4 or java_bool(cmd.field("acceptStandardJsonOnly"))
        return cmd.response(ResponseCode.SUCCESS, body=route.to_json(standard=standard))
