"""The producer's calls about a stored message, beside plain sends: half messages (TransactionMQProducer's
sendMessageInTransaction, split in two) and their END_TRANSACTION, whether a message is published
(QUERY_MESSAGE by its unique key), the check-backs answered, and the recall of a timer message
(RECALL_MESSAGE, RocketMQ 5.3.2 on).

``StoredMessageCalls`` is a mixin of ``Producer``: its methods are the producer's, over its engine (a
half message is one more SendOperation), its connections and its route table.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Generic, TypeVar

from ..errors import (
    BrokerError,
    ClusterConfigError,
    IndexBehindError,
    InvalidMessageError,
    RemotingConnectError,
    RemotingError,
    RocketMQError,
)
from ..protocol.codes import RequestCode, ResponseCode, SerializeType
from ..protocol.command import RemotingCommand
from ..protocol.message import Message, validate_topic
from ..protocol.requests import wrap_namespace
from ..protocol.route import MessageQueue
from ..protocol.stored import StoredMessage, decode_stored_messages
from ..protocol.timer import RecallHandle, recall_request
from ..protocol.transaction import HALF_TOPIC, TransactionState, half_request, query_uniq_key_request
from .fault import now_ms
from .futures import SendFuture, result_within
from .hooks import EndTransactionContext
from .producer_base import ProducerBase
from .transaction import CheckCounters, TransactionHandle

if TYPE_CHECKING:
    from .hooks import ProducerHooks
    from .remoting import RemotingClient
    from .routes import RouteTable
    from .transaction import CheckResponder

log = logging.getLogger(__name__)

#: What a 5.3.2+ broker with recallMessageEnable=false (its default) answers a recall, NO_PERMISSION.
RECALL_DISABLED = "recall failed, operation is forbidden"

#: The connection lane (RemotingClient.connection) END_TRANSACTION COMMIT and ROLLBACK go on.
END_LANE = "end"

K = TypeVar("K")


class _EndAnswer(Generic[K]):
    """Settles one END_TRANSACTION: ``done(key, None)`` on SUCCESS, ``done(key, error)`` otherwise."""

    __slots__ = ("addr", "done", "key", "msg_id", "routes", "state")

    def __init__(
        self,
        key: K,
        msg_id: str,
        addr: str,
        state: TransactionState,
        done: Callable[[K, BaseException | None], None],
        routes: RouteTable,
    ) -> None:
        self.key, self.msg_id, self.addr, self.state, self.done, self.routes = key, msg_id, addr, state, done, routes

    def __call__(self, resp: RemotingCommand | None, exc: BaseException | None) -> None:
        if resp is None:
            self.routes.follow_failure()  # a dead master: its brokerName may have a new one
            self.done(self.key, exc or RemotingError(f"no answer from {self.addr}"))
        elif resp.code == ResponseCode.SUCCESS:
            self.done(self.key, None)
        else:
            request = f"END_TRANSACTION {self.state.name} of {self.msg_id}"
            self.done(self.key, BrokerError(resp.code, resp.remark, self.addr, request=request))


class StoredMessageCalls(ProducerBase):
    """Half messages and their end, is_published, transaction_checks and recall, for ``Producer``."""

    # The producer's (set by Producer.__init__).
    group: str
    _remoting: RemotingClient
    _routes: RouteTable
    _checks: CheckResponder
    _hooks: ProducerHooks
    #: Whether the END_TRANSACTION-through-a-Proxy warning was given (once per producer).
    _proxy_end_warned: bool = False

    def send_half_async(
        self,
        message: Message,
        *,
        queue: MessageQueue | None = None,
        check_immunity_s: int | None = None,
        extra_properties: Mapping[str, str] | None = None,
    ) -> Future[TransactionHandle]:
        """Store ``message`` as a half message: invisible to consumers until end_transaction commits it.

        A single async send (retry_times_when_send_async_failed), pipelined with any other send. A
        half message cannot be delayed: one with a delay_level is refused (InvalidMessageError).
        ``check_immunity_s``: the broker checks it back no sooner than this (CHECK_IMMUNITY_TIME_IN_SECONDS).
        ``extra_properties``: properties added to the message's own in this half only.
        """
        c = self.config
        uniq = self._ids.next_id() if isinstance(message, Message) and message.uniq_key is None else ""
        req = half_request(
            message,
            uniq,
            group=self.group,
            check_immunity_s=check_immunity_s,
            max_message_size=c.max_message_size,
            compress_over=c.compress_msg_body_over,
            namespace=c.namespace,
            extra=extra_properties,
        )
        return self._submit(req, queue, None, sync=False, settle_as=TransactionHandle.from_send_result)

    def send_half(
        self, message: Message, *, queue: MessageQueue | None = None, check_immunity_s: int | None = None
    ) -> TransactionHandle:
        """send_half_async and wait."""
        fut = self.send_half_async(message, queue=queue, check_immunity_s=check_immunity_s)
        return result_within(fut, self.config.send_msg_timeout_ms)

    def end_transaction_async(self, handle: TransactionHandle, state: TransactionState) -> Future[None]:
        """END_TRANSACTION (commit or rollback) to the broker that stored the half.

        COMMIT and ROLLBACK wait for the broker's answer (the Java client sends them oneway and never
        knows): the future fails with BrokerError when the broker refused (no such half, wrong group
        or offsets) and RemotingError when no answer came, in which case the broker may or may not
        have acted, and only its check-back can settle the half. UNKNOWN is written oneway, as the
        broker never answers it. Never sent twice here: a 4.9.8 broker publishes a half once per COMMIT.
        """
        result: Future[None] = SendFuture()

        def done(exc: BaseException | None) -> None:
            if exc is None:
                result.set_result(None)
            else:
                result.set_exception(exc)

        self.end_transaction_with_callback(handle, state, done)
        return result

    def end_transaction_with_callback(
        self,
        handle: TransactionHandle,
        state: TransactionState,
        done: Callable[[BaseException | None], None],
        timeout_ms: float | None = None,
    ) -> None:
        """end_transaction_async without a future: ``done(None)`` when the broker answered SUCCESS (or an
        UNKNOWN was written), ``done(error)`` otherwise, once, on the I/O thread or on this one. A closed
        producer raises here. (end_transactions does this for many halves at once.)"""
        self.end_transactions([(0, handle)], state, lambda _, exc: done(exc), timeout_ms)

    def end_transactions(
        self,
        handles: Iterable[tuple[K, TransactionHandle]],
        state: TransactionState,
        done: Callable[[K, BaseException | None], None],
        timeout_ms: float | None = None,
    ) -> None:
        """END_TRANSACTION ``state`` for each (key, handle), pipelined: ``done(key, None)`` when its broker
        answered SUCCESS (or an UNKNOWN was written), ``done(key, error)`` otherwise, once per key, on the I/O
        thread or on this one. A closed producer raises here, before any is sent. The driver's commit phase
        sends its COMMITs this way, a broker's worth at a time.

        COMMIT and ROLLBACK go on a connection of their own to the broker (END_LANE), waiting for the
        answer ``timeout_ms`` (send_msg_timeout_ms by default): a frozen broker runs the requests its
        socket holds once it wakes, and another request timing out (a heartbeat) must not close the
        connection and lose the answers that tell which halves the COMMITs reached."""
        self._check_open()
        state = state if type(state) is TransactionState else TransactionState(state)
        group = self.group
        hooked = bool(self._hooks.end)
        if state is TransactionState.UNKNOWN:
            for key, handle in handles:
                cmd = RemotingCommand(
                    code=RequestCode.END_TRANSACTION,
                    serialize_type=SerializeType.ROCKETMQ,
                    ext_bytes=handle.end_ext(group, state),
                )
                to = self.master_addr(handle)
                if hooked:
                    self._end_hooks(handle, state, to)
                try:
                    self._remoting.invoke_oneway(to, cmd)
                except RocketMQError as exc:
                    done(key, exc)
                    continue
                done(key, None)
            return
        timeout = self.config.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        by_addr: dict[str, list[tuple[bytes, Callable[[RemotingCommand | None, BaseException | None], None]]]] = {}
        addrs: dict[tuple[str, str], str] = {}
        for key, handle in handles:
            where = (handle.topic, handle.broker_name)
            addr = addrs.get(where)
            if addr is None:
                addr = addrs[where] = self.master_addr(handle)
                self._warn_through_proxy(handle.topic, addr)
            if hooked:
                self._end_hooks(handle, state, addr)
            answered = _EndAnswer(key, handle.msg_id, addr, state, done, self._routes)
            by_addr.setdefault(addr, []).append((handle.end_ext(group, state), answered))
        for addr, requests in by_addr.items():
            self._remoting.invoke_each_rocketmq(addr, RequestCode.END_TRANSACTION, requests, timeout, lane=END_LANE)

    def _warn_through_proxy(self, topic: str, addr: str) -> None:
        """Once per producer: an END_TRANSACTION to a RocketMQ Proxy is answered SUCCESS and dropped."""
        if self._proxy_end_warned:
            return
        try:
            route = self._routes.get(wrap_namespace(self.config.namespace, topic))
        except RocketMQError:
            return  # master_addr fell back to the half's store address: no route to tell
        if route.info.route.proxy_addr(self._routes.namesrv.addrs) is None:
            return
        self._proxy_end_warned = True
        answered_by = (
            "this producer answers them with its transaction_listener"
            if self._checks.has_listener
            else "this producer has no transaction_listener: another producer of the group must answer them"
        )
        log.warning(
            "END_TRANSACTION of topic %s goes through the RocketMQ Proxy at %s, which answers SUCCESS and drops it "
            "(apache/rocketmq#8313): each half is decided by its broker's check-back, relayed through the Proxy to "
            "a producer of group %s (%s), 10-40 s after the half was sent with a broker's default check settings; "
            "to commit at once, give namesrv_addr the NameServer behind the Proxy",
            topic, addr, self.group, answered_by,
        )  # fmt: skip

    def _end_hooks(self, handle: TransactionHandle, state: TransactionState, addr: str) -> None:
        """The end-transaction hooks, as DefaultMQProducerImpl.endTransaction calls them: before it is sent."""
        ctx = EndTransactionContext(
            self.group, addr, handle.topic, handle.msg_id, handle.transaction_id, state, False, handle
        )
        self._hooks.end_transaction(ctx)

    def end_transaction(self, handle: TransactionHandle, state: TransactionState) -> None:
        """end_transaction_async and wait."""
        result_within(self.end_transaction_async(handle, state), self.config.send_msg_timeout_ms)

    def master_addr(self, handle: TransactionHandle) -> str:
        """The current master of the half's brokerName from the route (findBrokerAddressInPublish), where
        END_TRANSACTION goes and where the half is after an election; the store address in its offset id
        when the route does not name one."""
        try:
            route = self._routes.get(wrap_namespace(self.config.namespace, handle.topic))
            return self._routes.broker_addr(route, handle.broker_name, handle.topic)
        except RocketMQError:
            return handle.broker_addr

    def is_published(
        self,
        topic: str,
        uniq_key: str,
        broker_addr: str,
        timeout_ms: int | None = None,
        indexed_through: int | None = None,
    ) -> bool:
        """Whether a message with this UNIQ_KEY is stored in ``topic`` (without namespace) on the broker at
        ``broker_addr`` (QUERY_MESSAGE by unique key: the broker's index, built moments after a store).

        For a half message: True once an END_TRANSACTION COMMIT published it (or a copy of it; a 4.9.8
        broker copies a half each time it checks it back). Raises RemotingError or BrokerError when the
        broker cannot tell.

        ``indexed_through``: the commit-log offset of the half's copy a check-back names, which its broker
        stored after every row a COMMIT of the half published before the check. A loaded broker indexes a
        message a while after storing it, so when the row is not found, the half topic is asked for the same
        UNIQ_KEY: while the index does not hold that copy yet, IndexBehindError (ask again later) instead of
        False. A broker that cannot answer that second query (ACL, no index) is taken at its first word.
        """
        self._check_open()
        wire_topic = wrap_namespace(self.config.namespace, topic)
        timeout = self.config.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        if self._indexed(wire_topic, uniq_key, broker_addr, timeout, lambda m: m.topic == wire_topic):
            return True
        if indexed_through is None:
            return False
        try:
            copy_indexed = self._indexed(
                HALF_TOPIC, uniq_key, broker_addr, timeout, lambda m: m.commit_log_offset >= indexed_through
            )
        except BrokerError:
            return False  # refused (ACL, no index): its first word stands. A timeout is no word: it raises.
        if not copy_indexed:
            raise IndexBehindError(
                f"QUERY_MESSAGE of {uniq_key} at {broker_addr}: not found, and the broker's index does not hold "
                f"the half's copy at commit-log offset {indexed_through} yet"
            )
        return False

    def _indexed(
        self, wire_topic: str, uniq_key: str, addr: str, timeout_ms: int, match: Callable[[StoredMessage], bool]
    ) -> bool:
        """Whether the broker's index finds a message of ``wire_topic`` with this UNIQ_KEY that ``match``es."""
        cmd = query_uniq_key_request(wire_topic, uniq_key, 0, now_ms() + 60_000)
        resp = self._remoting.invoke_sync(addr, cmd, timeout_ms)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return False
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, addr, request=f"QUERY_MESSAGE of {uniq_key}")
        # The index is a hash: keep only true matches of the id.
        return any(m.uniq_key == uniq_key and match(m) for m in decode_stored_messages(bytes(resp.body)))

    def transaction_checks(self) -> CheckCounters:
        """Check-backs this producer answered, by answer."""
        return dataclasses.replace(self._checks.counters)

    def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a timer message before it is due (DefaultMQProducer.recallMessage, RocketMQ 5.3.2 on):
        ``recall_handle`` is its SendResult's. Returns the id the broker gives the recall. Raises
        BrokerError with the broker's remark when it refuses (a message already due, a handle of another
        topic, a broker older than 5.3.2); ClusterConfigError naming the fix for a broker without
        recallMessageEnable=true."""
        self._check_open()
        topic = validate_topic(topic)
        if topic.startswith(("%RETRY%", "%DLQ%")):
            raise InvalidMessageError(f"topic {topic!r}: messages of retry and dead-letter topics cannot be recalled")
        handle = RecallHandle.decode(recall_handle)
        wire_topic = wrap_namespace(self.config.namespace, topic)
        route = self._routes.get(wire_topic)
        addr = route.info.route.broker_addr(handle.broker_name)
        if addr is None:
            raise RemotingConnectError(
                f"recall of a message of topic {topic!r}: broker {handle.broker_name!r} of its handle has no "
                f"master address in the topic's route"
            )
        cmd = recall_request(self.group, wire_topic, recall_handle, handle.broker_name)
        answer = self._remoting.invoke_sync(addr, cmd, self.config.send_msg_timeout_ms)
        self._routes.note_version(addr, answer.version)
        if answer.code != ResponseCode.SUCCESS:
            refused = BrokerError(
                answer.code, answer.remark, addr, request=f"recall of message {handle.msg_id} of topic {topic!r}"
            )
            if answer.code == ResponseCode.NO_PERMISSION and RECALL_DISABLED in (answer.remark or ""):
                raise ClusterConfigError(
                    f"broker {handle.broker_name} at {addr} refused the recall of message {handle.msg_id} of topic "
                    f"{topic!r} ({answer.remark}): it runs with recallMessageEnable=false, the default. Set "
                    "recallMessageEnable=true in its broker.conf and restart it (RocketMQ 5.3.2 or later)"
                ) from refused
            raise refused
        return answer.field("msgId") or handle.msg_id
