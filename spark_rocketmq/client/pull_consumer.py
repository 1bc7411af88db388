"""PullConsumer: the read side's client, as DefaultMQPullConsumer (its pull, fetchSubscribeMessageQueues,
minOffset, maxOffset, searchOffset and the consumer offsets of its RemoteBrokerOffsetStore) over
MQClientAPIImpl's requests, without heartbeats, rebalancing or a registered consumer: each pull carries its
subscription (PullSysFlag.SUBSCRIPTION), so a broker filters by the request's expression.

Where a request goes (MQClientInstance.findBrokerAddressInSubscribe, PullAPIWrapper.pullFromWhichNodeTable):
the brokerName's master (brokerId 0), unless the queue's last pull answer suggested another brokerId and the
route has it; a brokerName without a master in the route (killed, in an election) is served by any replica
of it (a slave with slaveReadEnable serves pulls). Addresses come from routes by brokerName, and every
request names its brokerName (``bname``): a 5.x Proxy serves every brokerName on one address.

A request whose connection fails or times out has its topic's route asked for again before the next call
(at most every ROUTE_FOLLOW_GAP_S); one that could not connect is sent once more when the refreshed route
names another address for it. Every call has a deadline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from ..errors import (
    InvalidPullError,
    RemotingConnectError,
    RemotingError,
    TopicNotFoundError,
)
from ..protocol.codes import MASTER_ID, Perm, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.pull import (
    SUB_ALL,
    ExpressionType,
    PullStatus,
    consumer_heartbeat_request,
    max_offset_request,
    min_offset_request,
    pull_request,
    query_consumer_offset_request,
    read_offset,
    read_pull_answer,
    search_offset_request,
    unregister_consumer_request,
    update_consumer_offset_request,
)
from ..protocol.requests import wrap_namespace
from ..protocol.route import MessageQueue
from .consumer_config import ConsumerConfig
from .consumer_routes import ConsumerRoutes, broker_data
from .identity import default_instance_name, make_client_id
from .namesrv import NameServerClient
from .offset_by_time import first_at_or_after, pulled_store_times
from .pull_refusals import pull_refused, refused
from .remoting import RemotingClient

__all__ = ["ConsumerConfig", "PullCallback", "PullConsumer", "PullResult", "PullStatus"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PullResult:
    """PullResult of one pull: its status, PullMessageResponseHeader's offsets, the raw records."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    #: The stored records back to back (FOUND), b"" otherwise; spark/decoder.py reads them.
    body: bytes
    #: The address that answered.
    broker_addr: str


#: What pull_async calls once with the answer: (result, None), or (None, the error pull would raise).
PullCallback = Callable[["PullResult | None", "BaseException | None"], None]


class PullConsumer:
    """DefaultMQPullConsumer's reads and consumer offsets; one per process, thread-safe, a context manager."""

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self._remoting = RemotingClient.for_config(config)
        self._namesrv = NameServerClient(self._remoting, config.namesrv_addrs, config.remoting_timeout_ms)
        self._group = wrap_namespace(config.namespace, config.group)
        self._routes = ConsumerRoutes(self._namesrv, config.poll_name_server_interval_ms, self._unwrap)
        #: PullAPIWrapper.pullFromWhichNodeTable: the brokerId each queue's last pull answer suggested.
        self._pull_from: dict[MessageQueue, int] = {}
        self._closed = False
        self._client_id = make_client_id(config.instance_name or default_instance_name())

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Closed, or broken (its I/O loop failed): either way it sends no more."""
        return self._closed or self._remoting.broken

    def close(self) -> None:
        """Close every connection (failing what is in flight); idempotent."""
        if not self._closed:
            self._closed = True
            self._remoting.close()

    # -- the API -----------------------------------------------------------------------------------
    def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """fetchSubscribeMessageQueues: readQueueNums queues of each brokerName whose perm is readable, from
        the topic's route (asked for anew). TopicNotFoundError naming the topic and the NameServer when
        there is no route or no readable queue."""
        wire_topic = wrap_namespace(self.config.namespace, topic)
        route = self._routes.get(wire_topic, refresh=True)
        queues = [
            MessageQueue(topic, qd.broker_name, i)
            for qd in sorted(route.queue_datas, key=lambda q: q.broker_name)
            if qd.perm & Perm.READ
            for i in range(qd.read_queue_nums)
        ]
        if not queues:
            raise TopicNotFoundError(topic, f"NameServer {self._namesrv.current} routes it to no readable queue")
        return queues

    def min_offset(self, mq: MessageQueue) -> int:
        """GET_MIN_OFFSET: the queue's first offset still stored (MQAdminImpl.minOffset)."""
        wire = self._wire(mq)
        resp, addr = self._call(wire, min_offset_request(wire.topic, wire.broker_name, wire.queue_id))
        return self._offset_answer(resp, addr, "GET_MIN_OFFSET", mq)

    def max_offset(self, mq: MessageQueue) -> int:
        """GET_MAX_OFFSET: the queue's next offset to be written (MQAdminImpl.maxOffset)."""
        wire = self._wire(mq)
        resp, addr = self._call(wire, max_offset_request(wire.topic, wire.broker_name, wire.queue_id))
        return self._offset_answer(resp, addr, "GET_MAX_OFFSET", mq)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the queue's first message stored at or after ``timestamp_ms``: SEARCH_OFFSET_BY_TIMESTAMP
        (MQAdminImpl.searchOffset; each broker version has its rule past the ends), mended where a 4.x broker's
        answer is another message of that millisecond or one stored before it (client/offset_by_time.py)."""
        wire = self._wire(mq)
        cmd = search_offset_request(wire.topic, wire.broker_name, wire.queue_id, int(timestamp_ms))
        resp, addr = self._call(wire, cmd)
        answer = self._offset_answer(resp, addr, "SEARCH_OFFSET_BY_TIMESTAMP", mq)
        return first_at_or_after(answer, int(timestamp_ms), self.min_offset(mq), pulled_store_times(self, mq))

    def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int,
        *,
        expression: str = SUB_ALL,
        expression_type: str = ExpressionType.TAG,
        suspend_ms: int = 0,
        timeout_ms: int | None = None,
    ) -> PullResult:
        """PULL_MESSAGE of up to ``max_nums`` messages from ``offset`` (DefaultMQPullConsumer.pull, or
        pullBlockIfNotFound with ``suspend_ms`` > 0: the broker holds a pull that finds nothing that long).

        Waits ``timeout_ms`` (pull_timeout_ms by default) plus ``suspend_ms`` for the answer (a broker's
        PullRequestHoldService looks at held pulls every 5 s: a held pull that finds nothing is answered up to
        5 s after ``suspend_ms``, well within the default pull_timeout_ms). Error answers
        raise: TopicNotFoundError, ClusterConfigError (ACL, SQL92 on a broker without enablePropertyFilter,
        a group the broker refuses), InvalidSubscriptionError, else BrokerError; no answer, RemotingError.
        """
        expression, kind = _subscription(mq, offset, max_nums, expression, expression_type)
        return self._pull(mq, offset, max_nums, expression, kind, suspend_ms, timeout_ms, self._group)

    def pull_async(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int,
        done: PullCallback,
        *,
        expression: str = SUB_ALL,
        expression_type: str = ExpressionType.TAG,
        timeout_ms: int | None = None,
    ) -> None:
        """pull without waiting for the answer: ``done(result, None)`` or ``done(None, error)`` runs once, on
        the connection's I/O thread (so it must not block), or here when the request cannot be sent. The
        errors are pull's; a connection that fails is not tried again at another address (the route is
        asked for again before the next call, as after pull's failures): a caller retries with pull."""
        expression, kind = _subscription(mq, offset, max_nums, expression, expression_type)
        wire, cmd, wait_ms = self._pull_command(mq, offset, max_nums, expression, kind, 0, timeout_ms, self._group)
        try:
            if self._closed:
                raise RemotingConnectError("the PullConsumer is closed")
            addr = self._address(wire, True)
        except RemotingError as exc:
            done(None, exc)
            return

        def answered(resp: RemotingCommand | None, exc: BaseException | None) -> None:
            if resp is None:
                self._pull_from.pop(wire, None)
                self._routes.follow(wire.topic)
                done(None, exc)
                return
            try:
                result = self._pull_result(resp, addr, wire, mq, offset, expression, kind, self._group)
            except Exception as error:  # handed to the caller, as pull raises it
                done(None, error)
                return
            done(result, None)

        self._remoting.invoke_with_callback(addr, cmd, wait_ms, answered)

    def _pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int,
        expression: str,
        kind: str,
        suspend_ms: int,
        timeout_ms: int | None,
        wire_group: str,
    ) -> PullResult:
        wire, cmd, wait_ms = self._pull_command(
            mq, offset, max_nums, expression, kind, suspend_ms, timeout_ms, wire_group
        )
        resp, addr = self._call(wire, cmd, wait_ms, pull=True)
        return self._pull_result(resp, addr, wire, mq, offset, expression, kind, wire_group)

    def _pull_command(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int,
        expression: str,
        kind: str,
        suspend_ms: int,
        timeout_ms: int | None,
        wire_group: str,
    ) -> tuple[MessageQueue, RemotingCommand, int]:
        """(the queue on the wire, PULL_MESSAGE, how long to wait for its answer in ms)."""
        wire = self._wire(mq)
        cmd = pull_request(
            group=wire_group,
            topic=wire.topic,
            broker_name=wire.broker_name,
            queue_id=wire.queue_id,
            offset=offset,
            max_nums=max_nums,
            expression=expression,
            expression_type=kind,
            sub_version=0 if kind == ExpressionType.TAG else int(time.time() * 1000),
            suspend_ms=max(0, suspend_ms),
        )
        wait_ms = (self.config.pull_timeout_ms if timeout_ms is None else timeout_ms) + max(0, suspend_ms)
        return wire, cmd, wait_ms

    def _pull_result(
        self,
        resp: RemotingCommand,
        addr: str,
        wire: MessageQueue,
        mq: MessageQueue,
        offset: int,
        expression: str,
        kind: str,
        wire_group: str,
    ) -> PullResult:
        answer = read_pull_answer(resp)
        if answer is None:
            raise pull_refused(
                resp, addr, mq, offset, expression, kind, self._unwrap(wire_group), self.config.access_key
            )
        self._pull_from[wire] = answer.suggest_which_broker_id
        body = resp.body if answer.status is PullStatus.FOUND else b""
        return PullResult(
            status=answer.status,
            next_begin_offset=answer.next_begin_offset,
            min_offset=answer.min_offset,
            max_offset=answer.max_offset,
            suggest_which_broker_id=answer.suggest_which_broker_id,
            body=body if isinstance(body, bytes) else bytes(body),
            broker_addr=addr,
        )

    def query_consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        """QUERY_CONSUMER_OFFSET: ``group``'s committed offset of the queue (RemoteBrokerOffsetStore's
        fetchConsumeOffsetFromBroker); None when the broker has none (QUERY_NOT_FOUND). A 4.9.8 broker
        answers 0 instead for a queue whose first message, at offset 0, is still in memory."""
        wire = self._wire(mq)
        cmd = query_consumer_offset_request(self._wire_group(group), wire.topic, wire.broker_name, wire.queue_id)
        resp, addr = self._call(wire, cmd)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return self._offset_answer(resp, addr, f"QUERY_CONSUMER_OFFSET of group {group}", mq)

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET, waiting for the answer (MQClientAPIImpl.updateConsumerOffset, not its
        oneway form): a refusal raises. A 5.x broker refuses the offsets of a group it does not have
        (SUBSCRIPTION_GROUP_NOT_EXIST): then one pull of the group has the broker create it (with
        autoCreateSubscriptionGroup=true, its default), and the update is sent again."""
        if offset < 0:
            raise InvalidPullError(f"consumer offset {offset} of {mq} < 0")
        wire = self._wire(mq)
        wire_group = self._wire_group(group)
        cmd = update_consumer_offset_request(wire_group, wire.topic, wire.broker_name, wire.queue_id, offset)
        resp, addr = self._call(wire, cmd)
        if resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
            # A 5.x broker updates offsets of the groups it has only, and creates a group on its first pull
            # (autoCreateSubscriptionGroup, as a Java consumer's heartbeat or pull does): pull once, then again.
            self._pull(mq, offset, 1, SUB_ALL, ExpressionType.TAG, 0, None, wire_group)
            resp, addr = self._call(wire, cmd)
        if resp.code != ResponseCode.SUCCESS:
            raise refused(
                resp,
                addr,
                f"UPDATE_CONSUMER_OFFSET of group {group}",
                mq,
                group,
                self.config.group,
                self.config.access_key,
            )

    def announce_group(self, group: str, topics: list[str]) -> bool:
        """Make ``group`` known to the brokers of ``topics`` as a consumer group: one HEART_BEAT of the group
        to each broker (which creates its %RETRY%group topic, as a Java consumer's first heartbeat does), then
        UNREGISTER_CLIENT, so no live member is left behind. Then mqadmin consumerProgress -g GROUP and the
        dashboard find the group's committed offsets. A broker that refuses is logged, not raised; True when
        every master of the topics accepted."""
        wire_group = self._wire_group(group)
        wire_topics = [wrap_namespace(self.config.namespace, t) for t in topics]
        addrs: dict[str, str] = {}
        every = True
        for topic in wire_topics:
            for data in self._routes.get(topic).broker_datas:
                addr = data.broker_addrs.get(MASTER_ID)
                if addr is None:  # a brokerName without a master now: announced at a later try
                    every = False
                else:
                    addrs.setdefault(addr, data.broker_name)
        timeout = self.config.remoting_timeout_ms
        for addr, broker in sorted(addrs.items()):
            try:
                beat = consumer_heartbeat_request(self._client_id, wire_group, wire_topics)
                answer = self._remoting.invoke_sync(addr, beat, timeout)
                if answer.code != ResponseCode.SUCCESS:
                    log.warning("broker %s at %s refused group %s's heartbeat: %s", broker, addr, group, answer.remark)
                    every = False
                    continue
                self._remoting.invoke_sync(addr, unregister_consumer_request(self._client_id, wire_group), timeout)
            except RemotingError as exc:
                log.warning("group %s not announced to broker %s at %s: %s", group, broker, addr, exc)
                every = False
        return every

    # -- routes and addresses -----------------------------------------------------------------------
    def _wire(self, mq: MessageQueue) -> MessageQueue:
        if not isinstance(mq, MessageQueue):
            raise InvalidPullError(f"expected a MessageQueue, got {type(mq).__name__}")
        return MessageQueue(wrap_namespace(self.config.namespace, mq.topic), mq.broker_name, mq.queue_id)

    def _wire_group(self, group: str) -> str:
        if not isinstance(group, str) or not group.strip():
            raise InvalidPullError(f"consumer group {group!r}: expected a non-empty string")
        return wrap_namespace(self.config.namespace, group.strip())

    def _unwrap(self, wire_topic: str) -> str:
        prefix = f"{self.config.namespace}%" if self.config.namespace else ""
        return wire_topic.removeprefix(prefix) if prefix else wire_topic

    def _address(self, wire: MessageQueue, pull: bool) -> str:
        """findBrokerAddressInSubscribe: the suggested brokerId (pulls) or the master, else any replica."""
        route = self._routes.get(wire.topic)
        data = broker_data(route, wire.broker_name)
        if data is None:  # a brokerName the route lost: ask again (at most every ROUTE_FOLLOW_GAP_S)
            self._routes.follow(wire.topic)
            data = broker_data(self._routes.get(wire.topic), wire.broker_name)
        if data is None or not data.broker_addrs:
            raise RemotingConnectError(
                f"broker {wire.broker_name!r} has no address in the route of topic {self._unwrap(wire.topic)!r} "
                f"(NameServer {self._namesrv.current}): it is not registered (stopped, or in an election)"
            )
        wanted = self._pull_from.get(wire, MASTER_ID) if pull else MASTER_ID
        addr = data.broker_addrs.get(wanted) or data.broker_addrs.get(MASTER_ID)
        return addr or data.broker_addrs[min(data.broker_addrs)]

    def _call(
        self, wire: MessageQueue, cmd: RemotingCommand, timeout_ms: int | None = None, pull: bool = False
    ) -> tuple[RemotingCommand, str]:
        """Send ``cmd`` about ``wire`` to its broker; (answer, address). A connection that cannot be made is
        tried once more when the topic's refreshed route names another address."""
        if self._closed:
            raise RemotingConnectError("the PullConsumer is closed")
        timeout = self.config.remoting_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout / 1000.0
        addr = self._address(wire, pull)
        try:
            return self._remoting.invoke_sync(addr, cmd, timeout), addr
        except RemotingError as exc:
            self._pull_from.pop(wire, None)
            self._routes.follow(wire.topic)
            left_ms = (deadline - time.monotonic()) * 1000
            if not isinstance(exc, RemotingConnectError) or left_ms < 1:
                raise
            try:
                retry = self._address(wire, pull)
            except RemotingError:
                raise exc from None
            if retry == addr:
                raise
            log.info("%s failed (%s); trying %s, its route's address now", addr, exc, retry)
        try:
            return self._remoting.invoke_sync(retry, cmd, left_ms), retry
        except RemotingError:
            self._routes.follow(wire.topic)
            raise

    # -- answers ------------------------------------------------------------------------------------
    def _offset_answer(self, resp: RemotingCommand, addr: str, request: str, mq: MessageQueue) -> int:
        if resp.code != ResponseCode.SUCCESS:
            raise refused(resp, addr, request, mq, None, self.config.group, self.config.access_key)
        return read_offset(resp)


def _subscription(
    mq: MessageQueue, offset: int, max_nums: int, expression: str, expression_type: str
) -> tuple[str, str]:
    """A pull's (expression, expression type) as sent; InvalidPullError for arguments no broker takes."""
    if offset < 0:
        raise InvalidPullError(f"pull of {mq}: offset {offset} < 0")
    if max_nums <= 0:
        raise InvalidPullError(f"pull of {mq}: max_nums {max_nums} <= 0")
    kind = (expression_type or ExpressionType.TAG).strip().upper()
    if kind not in (ExpressionType.TAG, ExpressionType.SQL92):
        raise InvalidPullError(f"pull of {mq}: expression_type {expression_type!r} is neither TAG nor SQL92")
    return (expression.strip() if expression and expression.strip() else SUB_ALL), kind
