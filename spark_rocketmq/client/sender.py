"""The one send engine (DefaultMQProducerImpl.sendDefaultImpl): every send, sync, async, oneway, batch or
pre-encoded batch body, is a SendOperation (send_operation.py) driven through attempts here; which errors
are retried, busy or final is written in send_failures.py.

Per attempt: choose a queue (a pinned queue, the sharding key's queue, or MQFaultStrategy's choice
avoiding the broker that just failed), wait for room in that broker's in-flight window, write, and
settle the answer. As in sendDefaultImpl:

- the whole operation has send_msg_timeout_ms; each attempt gets what is left of it;
- connection errors and timeouts are retried (up to the operation's retry count) on another broker,
  and for sync sends the answers in RETRY_ANOTHER_BROKER_CODES too (an async send, as Java's
  sendMessageAsync, hands an error answer to its future at once); every failure marks the broker
  with updateFaultItem(isolation=true), every answer with its latency;
- other error answers end the operation, returning a result an earlier attempt stored, if any;
- with retry_another_broker_when_not_store_ok, a sync send's stored-but-not-SEND_OK answer is
  retried, and is the result when no later attempt does better.

A send that fails for the cluster's configuration ends with a ClusterConfigError (diagnosis.py): a
refusal naming its fix (ACL, maxMessageSize) or, while this producer has stored nothing, a route none
of whose brokers could be connected to.

Deliberate differences: a failure that another broker could take better (lost connection, timeout, a
"not leader" or "sending message is forbidden" answer) has the routes asked for again at once (routes.py
follow_failure), and a brokerName whose master changed loses its fault mark, so sends follow an election
within a route lookup instead of the next 30 s poll. Busy answers (SYSTEM_BUSY, FLOW_CONTROL, a 4.x
broker's [TIMEOUT_CLEAN_QUEUE]) are back-pressure, not failures: they halve that broker's window, and the
send is retried after a growing backoff for as long as its time lasts, without using up its retry count.
Sends with a pinned queue or a sharding key are retried on that queue only.

Each broker has an in-flight window (window.py: slow start, then AIMD, at most 1,024 single messages
or 16 MiB of request); attempts that find it full wait in order and are written as answers come back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ..errors import (
    BrokerError,
    BrokerVersionError,
    CannotConnectError,
    ClusterConfigError,
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
    RocketMQError,
    SendForbiddenError,
)
from ..protocol.command import RemotingCommand
from ..protocol.javamap import java_string_hash
from ..protocol.requests import SendRequest, send_ext, send_request_command
from ..protocol.route import MessageQueue
from ..protocol.timer import serves_timer_messages, version_name
from .config import ProducerConfig
from .diagnosis import Reachability, explain_refusal
from .fault import MQFaultStrategy
from .hooks import ProducerHooks, SendMessageContext
from .policy import BUSY_BACKOFF
from .remoting import RemotingClient
from .results import SendResult, SendStatus, send_result
from .routes import RouteTable
from .scheduler import RetryScheduler
from .send_failures import exhausted, is_busy, is_retryable, refuses_timers, timers_unsupported
from .send_operation import SendOperation
from .window import BrokerWindow, request_cost


def sharding_queue_index(key: str, queue_count: int) -> int:
    """SelectMessageQueueByHash: String.hashCode() % count, made non-negative, as the Java client does."""
    return abs(java_string_hash(key)) % queue_count


@dataclass
class SendCounters:
    requests: int = 0
    messages: int = 0
    retries: int = 0
    failures: int = 0
    bytes_sent: int = 0
    busy_answers: int = 0


class _Attempt:
    __slots__ = ("addr", "cost", "hook", "mq", "op")

    def __init__(self, op: SendOperation, mq: MessageQueue, addr: str, cost: int) -> None:
        self.op = op
        self.mq = mq
        self.addr = addr
        self.cost = cost
        #: The send hooks' context of this attempt, once written (hooks.py).
        self.hook: SendMessageContext | None = None


class Sender:
    """Drives SendOperations: queue choice, windows, retries, fault items, deadlines, counters."""

    def __init__(
        self,
        config: ProducerConfig,
        remoting: RemotingClient,
        routes: RouteTable,
        fault_strategy: MQFaultStrategy,
        *,
        group: str,
        clock_ms: Callable[[], int],
    ) -> None:
        self._config = config
        self._remoting = remoting
        self._routes = routes
        self.fault_strategy = fault_strategy
        self._group = group
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._windows: dict[str, BrokerWindow[_Attempt]] = {}
        self.counters = SendCounters()
        #: Whether a broker ever stored a send, and which brokers could not be connected to.
        self.reachability = Reachability()
        self._abandoned = False
        self._scheduler = RetryScheduler(self._expire_waiting)
        #: The producer's hooks once one is registered (hooks.py); None costs one check per attempt.
        self.hooks: ProducerHooks | None = None
        routes.on_master_changed(self._master_changed)

    def _master_changed(self, broker_name: str, old: str | None, new: str | None) -> None:
        """A brokerName has another master (elected, or restarted elsewhere): the old one's failures say
        nothing of it, so its fault mark is dropped and the next sends may go to it at once."""
        if new is not None:
            self.fault_strategy.tolerance.remove(broker_name)

    # -- entry ---------------------------------------------------------------------------------------
    def start(self, op: SendOperation) -> Future[Any]:
        """Run the first attempt on this thread (it may wait for a route) and return the operation's future."""
        self._attempt(op)
        return op.future

    def _attempt(self, op: SendOperation) -> None:
        if self._abandoned:
            self._fail(op, RemotingConnectError("the producer is closed"))
            return
        if time.monotonic() >= op.deadline:  # a resend that came due too late: the last attempt's failure
            self._give_up(
                op,
                op.last_error
                or RemotingTimeoutError(f"send to topic {op.req.topic!r} ran out of its {op.timeout_ms} ms"),
            )
            return
        op.attempts += 1
        try:
            mq, addr = self._choose(op)
        except BaseException as exc:
            self._settle_error(op, exc, None, 0)
            return
        op.last_broker = mq.broker_name
        if self.hooks is not None:
            try:
                self.hooks.check_forbidden(op, mq, addr)
            except SendForbiddenError as exc:
                self._give_up(op, exc, wrap=False)
                return
        if op.req.timer:
            version = self._routes.broker_version(addr)
            if version is None:  # ask first: a broker that ignores timer properties would store it at once
                self._learn_version_then_admit(op, mq, addr)
                return
            if not serves_timer_messages(version):
                self._give_up(op, timers_unsupported(op.req, mq.broker_name, addr, version), wrap=False)
                return
        self._admit(op, mq, addr)

    def _learn_version_then_admit(self, op: SendOperation, mq: MessageQueue, addr: str) -> None:
        begin = time.monotonic()

        def known(version: int | None, error: BaseException | None) -> None:
            if version is None:
                latency = int((time.monotonic() - begin) * 1000)
                self._settle_error(op, error, mq.broker_name, latency)
            elif not serves_timer_messages(version):
                self._give_up(op, timers_unsupported(op.req, mq.broker_name, addr, version), wrap=False)
            else:
                self._admit(op, mq, addr)

        self._routes.learn_version(addr, max(1.0, (op.deadline - time.monotonic()) * 1000.0), known)

    def _admit(self, op: SendOperation, mq: MessageQueue, addr: str) -> None:
        """Write the attempt, or queue it for the broker's window."""
        if op.oneway:
            self._write_oneway(op, mq, addr)
            return
        attempt = _Attempt(op, mq, addr, request_cost(len(op.req.body)))
        with self._lock:  # the one lock this thread takes for an attempt: counters and window together
            counters = self.counters
            if op.attempts > 1:
                counters.retries += 1
            window = self._windows.get(addr)
            if window is None:
                window = self._windows[addr] = BrokerWindow()
            if not window.admit(attempt):
                return  # written when answers make room (_release)
            counters.requests += 1
            counters.bytes_sent += len(op.req.body)
        self._write(attempt)

    def _choose(self, op: SendOperation) -> tuple[MessageQueue, str]:
        req = op.req
        route = self._routes.get(req.wire_topic)
        info = route.info
        if op.queue is not None:
            mq = MessageQueue(req.wire_topic, op.queue.broker_name, op.queue.queue_id)
        elif op.sharding_key is not None:
            queues = info.message_queues
            mq = queues[sharding_queue_index(op.sharding_key, len(queues))]
        else:
            mq = self.fault_strategy.select_one_message_queue(info, op.last_broker, route.counter)
        return mq, self._routes.broker_addr(route, mq.broker_name, req.topic)

    def _ext(self, op: SendOperation, mq: MessageQueue) -> bytes:
        """The extFields of this attempt's request (its born timestamp: now)."""
        return send_ext(
            op.req,
            group=self._group,
            queue_id=mq.queue_id,
            broker_name=mq.broker_name,
            born_timestamp=self._clock_ms(),
            default_topic=self._config.create_topic_key,
            default_topic_queue_nums=self._config.default_topic_queue_nums,
        )

    def _command(self, op: SendOperation, mq: MessageQueue) -> RemotingCommand:
        """The attempt's request as a command (a oneway send is written as one)."""
        return send_request_command(op.req, self._ext(op, mq))

    def _write_oneway(self, op: SendOperation, mq: MessageQueue, addr: str) -> None:
        begin = time.monotonic()
        hook = self.hooks.before(op, mq, addr) if self.hooks is not None else None
        try:
            self._remoting.invoke_oneway(addr, self._command(op, mq))
        except RemotingError as exc:
            self.fault_strategy.update_fault_item(mq.broker_name, int((time.monotonic() - begin) * 1000), True)
            self._count("failures", 1)
            if hook is not None and self.hooks is not None:
                self.hooks.after(hook, None, exc)
            op.settle(None, exc)
            return
        if hook is not None and self.hooks is not None:
            self.hooks.after(hook, None, None)
        with self._lock:
            self.counters.requests += 1
            self.counters.bytes_sent += len(op.req.body)
            self.counters.messages += op.req.count
        op.settle(None, None)

    def _write(self, attempt: _Attempt) -> None:
        op = attempt.op
        remaining_ms = (op.deadline - time.monotonic()) * 1000.0
        if remaining_ms <= 0:  # its time ran out while it waited for the window
            self._release(attempt, None, written=False)
            self._give_up(op, RemotingTimeoutError(f"send to topic {op.req.topic!r} ran out of its {op.timeout_ms} ms"))
            return
        ext = self._ext(op, attempt.mq)
        if self.hooks is not None:
            attempt.hook = self.hooks.before(op, attempt.mq, attempt.addr)
        sent_at = time.monotonic()

        def done(answer: RemotingCommand | None, error: BaseException | None) -> None:
            self._on_answer(attempt, sent_at, answer, error)

        self._remoting.invoke_rocketmq(attempt.addr, op.req.code, ext, op.req.body, remaining_ms, done)

    # -- answers -------------------------------------------------------------------------------------
    def _on_answer(
        self, attempt: _Attempt, sent_at: float, answer: RemotingCommand | None, exc: BaseException | None
    ) -> None:
        latency = int((time.monotonic() - sent_at) * 1000)
        result: SendResult | None = None
        if answer is not None:
            self._routes.note_version(attempt.addr, answer.version)
            self.reachability.answered(attempt.mq.broker_name)
            try:
                result = send_result(attempt.op.req, answer, attempt.mq, attempt.addr)
            except (BrokerError, ProtocolError) as e:
                exc = e
        self._release(attempt, exc, sent_at)
        if attempt.hook is not None and self.hooks is not None:
            self.hooks.after(attempt.hook, result, exc)
        if result is not None:
            self.fault_strategy.update_fault_item(attempt.mq.broker_name, latency, False)
            self._settle_result(attempt.op, result)
        else:
            self._settle_error(attempt.op, exc, attempt.mq.broker_name, latency)

    def _release(
        self, attempt: _Attempt, exc: BaseException | None, sent_at: float = 0.0, *, written: bool = True
    ) -> None:
        """Give the attempt's units back, resize the window, and write the attempts now let in."""
        with self._lock:
            counters = self.counters
            window = self._windows[attempt.addr]
            if not written:
                counters.requests -= 1
                counters.bytes_sent -= len(attempt.op.req.body)
            elif exc is None:
                window.grow(attempt.cost)
            elif is_busy(exc) or isinstance(exc, RemotingTimeoutError):
                window.cut(sent_at)
            ready = window.release(attempt.cost)
            for nxt in ready:
                counters.requests += 1
                counters.bytes_sent += len(nxt.op.req.body)
        for nxt in ready:
            self._write(nxt)

    def _settle_result(self, op: SendOperation, result: SendResult) -> None:
        if (
            result.status != SendStatus.SEND_OK
            and op.sync
            and self._config.retry_another_broker_when_not_store_ok
            and op.attempts - op.busy < op.max_attempts
        ):
            op.stored = result
            self._retry(op, 0.0, None)
            return
        self._finish(op, result)

    def _settle_error(self, op: SendOperation, exc: BaseException | None, broker: str | None, latency: int) -> None:
        assert exc is not None
        if isinstance(exc, BrokerError) and refuses_timers(exc):
            exc = self._wheel_off(op.req, broker, exc)
        if is_busy(exc):
            self._count("busy_answers", 1)
            if broker is not None:
                self.fault_strategy.update_fault_item(broker, latency, False)
            op.busy += 1  # back-pressure: resent while time lasts, without using up the retry count
            self._retry(op, BUSY_BACKOFF.delay(op.busy), exc)
            return
        if broker is not None:
            self.fault_strategy.update_fault_item(broker, latency, True)
            if isinstance(exc, CannotConnectError):
                self.reachability.cannot_connect(broker, exc)
            if is_retryable(exc):  # a dead, frozen or demoted master: its brokerName may have a new one
                self._routes.follow_failure()
        if not is_retryable(exc) or (not op.sync and isinstance(exc, BrokerError)):
            self._give_up(op, exc, wrap=False)  # an answer no other broker would take better, or bad input
        elif op.attempts - op.busy < op.max_attempts:
            self._retry(op, 0.0, exc)
        else:
            self._give_up(op, exc)

    def _retry(self, op: SendOperation, delay_s: float, exc: BaseException | None) -> None:
        op.last_error = exc or op.last_error
        if self._abandoned or time.monotonic() + delay_s >= op.deadline:
            self._give_up(op, exc or RemotingTimeoutError(f"send to topic {op.req.topic!r} ran out of time"))
            return
        if not self._scheduler.call_later(delay_s, lambda: self._attempt(op)):
            self._give_up(op, exc or RemotingConnectError("the producer is closed"))

    def _give_up(self, op: SendOperation, exc: BaseException, *, wrap: bool = True) -> None:
        """End the operation: with a result an earlier attempt stored, else with the error (wrapped in
        SendFailedError with the attempt count when it is one retries could have healed)."""
        if op.stored is not None:
            self._finish(op, op.stored)
            return
        diagnosed = self._diagnose(op, exc)
        if diagnosed is not None:
            self._fail(op, diagnosed)
            return
        self._fail(op, exhausted(op, exc) if wrap and isinstance(exc, RocketMQError) else exc)

    def _diagnose(self, op: SendOperation, exc: BaseException) -> ClusterConfigError | None:
        """The configuration error behind a failed send, when it is one (diagnosis.py): a refusal naming
        its fix, or, while nothing was ever stored, a route none of whose brokers can be connected to."""
        if isinstance(exc, BrokerError):
            return explain_refusal(exc, op.last_broker, len(op.req.body), self._config.max_message_size, op.req.topic)
        if isinstance(exc, CannotConnectError) and not self.reachability.stored:
            route = self._routes.cached(op.req.wire_topic)
            if route is not None:
                return self.reachability.brokers_unreachable(op.req.topic, route.info.route)
        return None

    def _finish(self, op: SendOperation, result: SendResult) -> None:
        self.reachability.stored = True
        with self._lock:
            self.counters.messages += op.req.count
        op.settle(result, None)

    def _fail(self, op: SendOperation, exc: BaseException) -> None:
        self._count("failures", 1)
        op.settle(None, exc)

    def _wheel_off(self, req: SendRequest, broker: str | None, exc: BrokerError) -> BrokerVersionError:
        version = self._routes.broker_version(exc.addr or "")
        runs = f"runs RocketMQ {version_name(version)}" if version is not None else "runs RocketMQ 5.x"
        return BrokerVersionError(
            f"broker {broker} at {exc.addr} {runs} with its timer wheel off and refuses timer messages: "
            f"{exc.remark}; the message to topic {req.topic!r} was not stored. Turn the wheel on "
            "(timerWheelEnable=true in broker.conf) or send no delivery time"
        )

    # -- housekeeping --------------------------------------------------------------------------------
    def _expire_waiting(self) -> None:
        """Attempts waiting for a window past their deadline fail now, not when the window opens."""
        now = time.monotonic()
        late: list[_Attempt] = []
        with self._lock:
            for window in self._windows.values():
                late += window.take_expired(now, lambda a: a.op.deadline)
        for attempt in late:
            op = attempt.op
            self._give_up(op, RemotingTimeoutError(f"send to topic {op.req.topic!r} ran out of its {op.timeout_ms} ms"))

    def _count(self, name: str, n: int) -> None:
        with self._lock:
            setattr(self.counters, name, getattr(self.counters, name) + n)

    def abandon(self, join_s: float = 1.0) -> None:
        """Closing: no new attempt starts; attempts waiting for a window or for a resend fail now. Waits at
        most ``join_s`` for the scheduler thread."""
        self._abandoned = True
        for resend in self._scheduler.stop(join_s):
            resend()  # a resend that had not come due: _attempt fails its send now (the producer is closed)
        with self._lock:
            waiting = [a for w in self._windows.values() for a in w.waiting]
            for w in self._windows.values():
                w.waiting.clear()
        for attempt in waiting:
            self._fail(attempt.op, RemotingConnectError("the producer was closed before this send was written"))
