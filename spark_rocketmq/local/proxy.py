"""A RocketMQ 5.x Proxy's remoting port, in cluster mode, in front of a local cluster's NameServer and brokers.

What a client meets through a real 5.3.3 Proxy (docs/proxy.md), so that tests cover it without one:

- route requests are answered by the Proxy, every brokerName at the Proxy's own address;
- sends, pulls and offset requests name their broker (``bname``; a SEND_MESSAGE_V2 header's ``n``) and are
  forwarded to that broker's master, its answer given back as it came;
- a message whose type (TRANSACTION, DELAY, FIFO, NORMAL, from its properties) is not its topic's
  ``message.type`` is refused MESSAGE_ILLEGAL, in the Proxy's words; a topic without a route is UNSPECIFIED;
- a broker's CHECK_TRANSACTION_STATE is asked of the Proxy for the producer groups it heartbeats to the brokers
  (ClusterTransactionService): a group it learned from a transactional half sent through it
  (``addTransactionSubscription``) that a client connection sent HEART_BEAT with (``groupOnline``); so a Proxy
  started again knows no group until a half of it passes. The check is relayed to a client connection of the
  half's group, its header as a 5.3.3 Proxy writes it (topic, offsets, msgId, transactionId: no offsetMsgId),
  and the checking broker and offsets are kept under (group, transactionId), as TransactionDataManager keeps them;
- END_TRANSACTION is answered SUCCESS and forwarded to that broker when such data is kept (a check-back's answer,
  or any END_TRANSACTION of a half checked back meanwhile), else dropped (apache/rocketmq#8313: the remoting
  send path never records the transaction data the Proxy forwards it by);
- a client's HEART_BEAT goes on to every broker the Proxy has routed to with its consumer groups only (its
  producer groups are the Proxy's to announce, above); UNREGISTER_CLIENT goes on to every broker;
- anything else (admin requests) is refused: ``request type N not supported``.

Not modelled: POP, locks, the transaction data's expiry.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import threading
from collections import OrderedDict

from ..client.connection import Connection as UpstreamConnection
from ..client.namesrv import NameServerClient
from ..client.remoting import RemotingClient
from ..errors import ProtocolError, RemotingError, RocketMQError
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import FLAG_ONEWAY, RemotingCommand
from ..protocol.headers import HeartbeatData, heartbeat_request
from ..protocol.message import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_SHARDING_KEY, decode_properties
from ..protocol.route import BrokerData, TopicRouteData
from ..protocol.stored import decode_stored_message
from ..protocol.timer import TIMER_PROPERTIES
from ..protocol.transaction import PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED
from .server import Connection, RemotingServer

log = logging.getLogger(__name__)

#: Message types of a topic's ``message.type`` attribute (TopicMessageType); MIXED takes every type.
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
#: Requests forwarded to the broker their ``bname`` names.
_BY_BROKER_NAME = frozenset(
    {
        RequestCode.PULL_MESSAGE,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        RequestCode.GET_MAX_OFFSET,
        RequestCode.GET_MIN_OFFSET,
        RequestCode.RECALL_MESSAGE,
    }
)
_SENDS = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})
#: How long the Proxy waits for a broker's answer (a held pull included).
_FORWARD_TIMEOUT_MS = 60_000
#: The header fields of a check-back the Proxy relays to its client (RemotingChannel.processCheckTransaction).
_RELAYED_CHECK_FIELDS = ("topic", "commitLogOffset", "tranStateTableOffset", "transactionId", "msgId")
#: Relayed check-backs whose transaction data the Proxy keeps at most (the oldest is forgotten).
_MAX_CHECKS_KEPT = 100_000


def message_type(properties: dict[str, str]) -> str:
    """TopicMessageType.parseFromMessageProperty: the type a Proxy checks a message's topic for."""
    if properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return "TRANSACTION"
    if PROPERTY_DELAY_TIME_LEVEL in properties or any(p in properties for p in TIMER_PROPERTIES):
        return "DELAY"
    if PROPERTY_SHARDING_KEY in properties:
        return "FIFO"
    return "NORMAL"


class LocalProxy:
    """``LocalProxy(cluster.namesrv_addr).start()``; ``addr`` is the one address a client is given."""

    def __init__(self, namesrv_addr: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = RemotingServer("proxy", self._dispatch, host, port)
        self._upstream = RemotingClient(connect_timeout_ms=3000, on_request=self._from_broker)
        self._namesrv = NameServerClient(self._upstream, namesrv_addr.split(";"), 3000)
        self._lock = threading.Lock()
        #: brokerName -> its master's address, learned from the routes the Proxy answered.
        self._masters: dict[str, str] = {}
        #: Topics routed so far (a topic the NameServer does not know is UNSPECIFIED).
        self._routed: set[str] = set()
        #: Each topic's ``message.type``; a routed topic without one is NORMAL.
        self._types: dict[str, str] = {}
        #: Producer group -> the client connections that sent HEART_BEAT with it, by address (ProducerManager).
        self._producers: dict[str, dict[str, Connection]] = {}
        #: Producer groups of the transactional halves sent through this Proxy (groupClusterData).
        self._transaction_groups: set[str] = set()
        #: (producer group, transactionId) of each check-back relayed -> the checking broker's address and the
        #: half's commitLogOffset and tranStateTableOffset (TransactionDataManager).
        self._checks: OrderedDict[tuple[str, str], tuple[str, str, str]] = OrderedDict()
        self._opaques = itertools.count(1)
        #: END_TRANSACTIONs dropped so far, check-backs relayed, END_TRANSACTIONs forwarded.
        self.dropped_end_transactions = 0
        self.relayed_checks = 0
        self.forwarded_end_transactions = 0

    @property
    def addr(self) -> str:
        return self._server.addr

    def start(self) -> LocalProxy:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
        self._upstream.close()

    def freeze(self) -> None:
        self._server.freeze.freeze()

    def thaw(self) -> None:
        self._server.freeze.thaw()

    def set_message_type(self, topic: str, message_type: str) -> None:
        """The topic's ``message.type`` attribute (mqadmin updateTopic -a +message.type=TYPE)."""
        if message_type not in MESSAGE_TYPES:
            raise ValueError(f"message type {message_type!r}: expected one of {', '.join(MESSAGE_TYPES)}")
        with self._lock:
            self._types[topic] = message_type

    # -- requests ------------------------------------------------------------------------------------
    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        code = cmd.code
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return self._route(cmd)
        if code in _SENDS:
            refused = self._check_type(cmd)
            if refused is not None:
                return refused
            self._learn_transaction_group(cmd)
            return self._forward(conn, cmd, cmd.field("bname") or cmd.field("n"))
        if code in _BY_BROKER_NAME:
            return self._forward(conn, cmd, cmd.field("bname"))
        if code == RequestCode.END_TRANSACTION:
            return self._end_transaction(cmd)
        if code == RequestCode.HEART_BEAT:
            heartbeat = HeartbeatData.decode(cmd.body)
            with self._lock:
                for group in heartbeat.producer_groups:
                    self._producers.setdefault(group, {})[conn.peer_addr] = conn
            self._heartbeat_transaction_groups()
            if heartbeat.consumers:  # its consumer groups go on; its producer groups are the Proxy's to announce
                body = json.loads(bytes(cmd.body or b"{}"))
                body["producerDataSet"] = []
                self._to_every_broker(dataclasses.replace(cmd, body=json.dumps(body).encode()))
            return cmd.response(ResponseCode.SUCCESS)
        if code == RequestCode.UNREGISTER_CLIENT:
            with self._lock:
                self._producers.get(cmd.field("producerGroup") or "", {}).pop(conn.peer_addr, None)
            return self._to_every_broker(cmd)
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f"request type {code} not supported")

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.field("topic") or ""
        try:
            route = self._namesrv.get_route(topic)
        except RocketMQError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, remark=f"No topic route info in name server for the topic: {topic}"
            )
        with self._lock:
            self._routed.add(topic)
            for bd in route.broker_datas:
                if bd.master_addr is not None:
                    self._masters[bd.broker_name] = bd.master_addr
        proxied = TopicRouteData(
            queue_datas=route.queue_datas,
            broker_datas=[BrokerData(bd.cluster, bd.broker_name, {0: self.addr}) for bd in route.broker_datas],
        )
        return cmd.response(ResponseCode.SUCCESS, body=proxied.to_json())

    def _check_type(self, cmd: RemotingCommand) -> RemotingCommand | None:
        topic = cmd.field("topic") or cmd.field("b") or ""
        actual = message_type(decode_properties(cmd.field("properties") or cmd.field("i") or ""))
        with self._lock:
            expected = self._types.get(topic, "NORMAL" if topic in self._routed else "UNSPECIFIED")
        if expected in (actual, "MIXED"):
            return None
        return cmd.response(
            ResponseCode.MESSAGE_ILLEGAL,
            remark=f"TopicMessageType validate failed, the expected type is {expected}, but actual type is {actual}",
        )

    def _forward(self, conn: Connection, cmd: RemotingCommand, broker_name: str | None) -> RemotingCommand | None:
        """Send ``cmd`` on to the broker's master; its answer goes back to ``conn`` when it comes."""
        with self._lock:
            addr = self._masters.get(broker_name or "")
        if addr is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"cannot find broker {broker_name!r} (bname)")
        if cmd.is_oneway:
            try:
                self._upstream.invoke_oneway(addr, dataclasses.replace(cmd))
            except RemotingError as exc:
                log.info("proxy: oneway request %s to %s not written: %s", cmd.code, addr, exc)
            return None
        opaque = cmd.opaque
        forwarded = dataclasses.replace(cmd)  # the client numbers it anew

        def answered(answer: RemotingCommand | None, error: BaseException | None) -> None:
            if answer is None:
                answer = cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(error).__name__}: {error}")
            answer.opaque = opaque
            if not conn.closed:
                try:
                    conn.send(answer)
                except OSError:
                    conn.close()

        self._upstream.invoke_with_callback(addr, forwarded, _FORWARD_TIMEOUT_MS, answered)
        return None

    def _from_broker(self, upstream: UpstreamConnection, cmd: RemotingCommand) -> bool:
        """A broker's request on the Proxy's own connection to it: a check-back, relayed to a client of the half's
        producer group (ProxyClientRemotingProcessor); any other request is not the Proxy's to answer."""
        if cmd.code != RequestCode.CHECK_TRANSACTION_STATE:
            return False
        try:
            group = decode_stored_message(bytes(cmd.body or b"")).properties.get(PROPERTY_PRODUCER_GROUP, "")
        except ProtocolError as exc:
            log.warning("proxy: check-back from %s not understood: %s", upstream.addr, exc)
            return True
        with self._lock:
            clients = [c for c in self._producers.get(group, {}).values() if not c.closed]
            if clients:
                key = (group, cmd.field("transactionId") or "")
                self._checks[key] = (
                    upstream.addr,
                    cmd.field("commitLogOffset") or "",
                    cmd.field("tranStateTableOffset") or "",
                )
                self._checks.move_to_end(key)
                while len(self._checks) > _MAX_CHECKS_KEPT:
                    self._checks.popitem(last=False)
                self.relayed_checks += 1
        if not clients:
            log.warning("proxy: check-back from %s for group %s: no client of that group", upstream.addr, group)
            return True
        fields = {name: value for name in _RELAYED_CHECK_FIELDS if (value := cmd.field(name)) is not None}
        relayed = RemotingCommand(
            code=cmd.code, opaque=next(self._opaques), flag=cmd.flag & FLAG_ONEWAY, ext_fields=fields, body=cmd.body
        )
        try:
            clients[0].send(relayed)
        except OSError as exc:
            log.info("proxy: check-back to %s not written: %s", clients[0].peer_addr, exc)
        return True

    def _end_transaction(self, cmd: RemotingCommand) -> RemotingCommand:
        """SUCCESS; forwarded, oneway, to the broker that checked the half back, with the offsets it gave, when
        the Proxy keeps that check's data (TransactionProcessor: the data is taken); else dropped."""
        key = (cmd.field("producerGroup") or "", cmd.field("transactionId") or "")
        with self._lock:
            check = self._checks.pop(key, None)
            if check is None:
                self.dropped_end_transactions += 1
            else:
                self.forwarded_end_transactions += 1
        if check is not None:
            broker, commit_log_offset, tran_state_table_offset = check
            fields = {
                **(cmd.fields() or {}),
                "commitLogOffset": commit_log_offset,
                "tranStateTableOffset": tran_state_table_offset,
            }
            forwarded = RemotingCommand(code=cmd.code, flag=FLAG_ONEWAY, ext_fields=fields, remark=cmd.remark)
            try:
                self._upstream.invoke_oneway(broker, forwarded)
            except RemotingError as exc:
                log.info("proxy: END_TRANSACTION to %s not written: %s", broker, exc)
        return cmd.response(ResponseCode.SUCCESS)

    def _learn_transaction_group(self, cmd: RemotingCommand) -> None:
        """A transactional half's producer group is heartbeated to the brokers from now on."""
        properties = decode_properties(cmd.field("properties") or cmd.field("i") or "")
        if message_type(properties) != "TRANSACTION":
            return
        group = cmd.field("producerGroup") or cmd.field("a") or ""
        with self._lock:
            if group in self._transaction_groups:
                return
            self._transaction_groups.add(group)
        self._heartbeat_transaction_groups()

    def _heartbeat_transaction_groups(self) -> None:
        """The Proxy's own HEART_BEAT to every broker, with the transaction groups that have a client here."""
        with self._lock:
            online = [
                g
                for g in sorted(self._transaction_groups)
                if any(not c.closed for c in self._producers.get(g, {}).values())
            ]
        if online:
            self._to_every_broker(heartbeat_request(f"{self.addr}@proxy-transactions", online))

    def _to_every_broker(self, cmd: RemotingCommand) -> RemotingCommand:
        with self._lock:
            masters = sorted(set(self._masters.values()))
        for addr in masters:
            try:
                self._upstream.invoke_sync(addr, dataclasses.replace(cmd), 3000)
            except RemotingError as exc:
                log.info("proxy: request %s to %s failed: %s", cmd.code, addr, exc)
        return cmd.response(ResponseCode.SUCCESS)


__all__ = ["MESSAGE_TYPES", "LocalProxy", "message_type"]
