"""Producer: DefaultMQProducer's public face (send, send_async, send_oneway, send_batch, close).

Every send becomes a SendOperation run by the one send engine (sender.py): a sync send is submit and
wait. The batch sends are the mixin BatchSends (batch_sends.py). Routes and heartbeats live in routes.py,
connections in remoting.py and connection.py, and the bytes of every request are built in the protocol
layer (protocol/requests.py).

Delivery is at least once: a request that timed out or lost its connection may still have been
stored, and its retry stores it again. Every attempt of a send carries the same UNIQ_KEY
(SendResult.msg_id), so consumers can tell the copies apart.

Threads: any number of threads may share one Producer. Futures from send_async and
send_batch_body_async are completed on a connection's reader thread (or the timeout scanner's, or
a retry thread's); callbacks added to them should be short and must not wait for other sends: a send
from one raises RemotingTooMuchRequestError when max_in_flight sends are pending.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..errors import (
    ConfigError,
    RemotingConnectError,
    RemotingTooMuchRequestError,
    RocketMQError,
)
from ..protocol.command import RemotingCommand
from ..protocol.message import Message, validate_topic
from ..protocol.requests import SendRequest, message_request, wrap_namespace
from ..protocol.route import MessageQueue, check_queue, check_sharding_key
from .accumulator import ProduceAccumulator
from .batch_sends import BatchSends
from .config import ProducerConfig
from .connection import Connection
from .extensions import MessageQueueSelector, ProducerExtensions
from .fault import MQFaultStrategy, now_ms
from .futures import result_within
from .identity import UniqIdGenerator, default_instance_name, make_client_id
from .in_flight import in_reader_thread
from .namesrv import NameServerClient
from .remoting import RemotingClient
from .results import ProducerStats, SendResult, SendStatus
from .routes import RouteTable
from .send_operation import SendOperation
from .sender import Sender, sharding_queue_index
from .slots import SendSlots
from .stored_calls import StoredMessageCalls
from .transaction import CheckResponder, TransactionCheckListener

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider


class Producer(BatchSends, StoredMessageCalls, ProducerExtensions):
    """A RocketMQ producer speaking the remoting protocol, thread-safe, started when constructed.

    ``Producer(namesrv_addr="127.0.0.1:9876", group="g")`` or ``Producer(config=ProducerConfig(...))``;
    keyword options override the config's. ``clock_ms`` is the clock of bornTimestamp (tests that
    rebuild captured frames set it). ``transaction_listener`` answers brokers' check-backs, on
    ``check_threads`` threads (TransactionMQProducer's checkThreadPoolMaxSize, 1 by default: more only
    for a thread-safe listener). ``join_group=False``: the heartbeats do not register this producer with
    its group, so brokers never ask it check-backs (for a producer whose halves another producer of the
    group resolves). ``meter_provider``: where enable_metrics records (default: OpenTelemetry's global
    one). Use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        config: ProducerConfig | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
        transaction_listener: TransactionCheckListener | None = None,
        check_threads: int = 1,
        join_group: bool = True,
        meter_provider: MeterProvider | None = None,
        **options: Any,
    ) -> None:
        try:
            if config is None:
                config = ProducerConfig(**options)
            elif options:
                config = config.replace(**options)
        except TypeError as exc:
            raise ConfigError(f"{exc}; valid options: {', '.join(ProducerConfig.option_names())}") from None
        self.config = config
        self.instance_name = config.instance_name or default_instance_name()
        self.client_id = make_client_id(self.instance_name, config.unit_name)
        self.group = wrap_namespace(config.namespace, config.group)
        self._checks = CheckResponder(
            self.group, transaction_listener, self._oneway_on, check_threads, on_answered=self._check_back_answered
        )
        self._start_extensions(meter_provider)  # what the options ask for, before anything runs
        self._remoting = RemotingClient.for_config(config, on_request=self._on_broker_request)
        self._routes = RouteTable(
            config,
            self._remoting,
            client_id=self.client_id,
            groups=(self.group,) if join_group else (),
            unwrap=self._unwrap,
        )
        self.fault_strategy = MQFaultStrategy(enabled=config.send_latency_fault_enable)
        self._sender = Sender(
            config,
            self._remoting,
            self._routes,
            self.fault_strategy,
            group=self.group,
            clock_ms=clock_ms or now_ms,
        )
        self._sender.hooks = None if self._hooks.empty else self._hooks
        self._ids = UniqIdGenerator()
        self._slots = SendSlots(config.max_in_flight)
        self._accumulator = (
            ProduceAccumulator(
                config,
                next_ids=self._ids.next_ids,
                batch_request=self._batch_request,
                submit=lambda req, queue, sync: self._submit(req, queue, None, sync=sync),
            )
            if config.auto_batch
            else None
        )
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Closed, or broken (its I/O loop failed): either way it sends no more."""
        return self._closed or self._remoting.broken

    def close(self, timeout_s: float | None = None) -> None:
        """Wait for sends in flight, unregister from the brokers, disconnect; returns within ``timeout_s``
        (default send_msg_timeout_ms) whatever the brokers do. Sends still unsettled then fail."""
        if self._closed:
            return
        wait = self.config.send_msg_timeout_ms / 1000.0 if timeout_s is None else max(0.0, timeout_s)
        deadline = time.monotonic() + wait
        if self._accumulator is not None:
            self._accumulator.close(min(1.0, wait))  # what is accumulated goes out, and is waited for below
        self._closed = True
        self._slots.wait_idle(deadline)
        self._close_extensions(max(0.0, deadline - time.monotonic()))  # settled sends' traces go out

        def left() -> float:  # joining a background thread must not take close() past its deadline
            return min(1.0, max(0.0, deadline - time.monotonic()))

        self._sender.abandon(left())
        self._routes.close(left())
        self._routes.unregister(min(deadline, time.monotonic() + 1.0) if wait > 0 else time.monotonic())
        self._remoting.close(left())  # fails whatever is still in flight
        self._checks.close()

    def _on_broker_request(self, conn: Connection, cmd: RemotingCommand) -> bool:
        """A request a broker sent on one of our connections: CHECK_TRANSACTION_STATE is served."""
        if not self._checks.handles(cmd):
            return False
        self._checks.on_request(conn, conn.addr, cmd)
        return True

    def _oneway_on(self, conn: object, cmd: RemotingCommand) -> None:
        assert isinstance(conn, Connection)
        self._remoting.oneway_on(conn, cmd)

    def _check_open(self) -> None:
        if self._closed:
            raise RemotingConnectError("the producer is closed")

    def _unwrap(self, wire_topic: str) -> str:
        ns = self.config.namespace
        return wire_topic.split("%", 1)[1] if ns and wire_topic.startswith(f"{ns}%") else wire_topic

    # -- routes ----------------------------------------------------------------------------------------
    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues (topic without namespace), in the order queue selection uses.

        From the route cache (kept fresh by the background refresh), else from the NameServer.
        """
        self._check_open()
        topic = validate_topic(topic)
        queues = self._routes.publish_queues(wrap_namespace(self.config.namespace, topic))
        return [MessageQueue(topic, mq.broker_name, mq.queue_id) for mq in queues]

    def proxy_addr(self, topic: str) -> str | None:
        """The address of the RocketMQ Proxy the topic's route points at (TopicRouteData.proxy_addr), or
        None when its brokers are reached directly (topic without namespace; asks for the route on first use)."""
        self._check_open()
        route = self._routes.get(wrap_namespace(self.config.namespace, validate_topic(topic)))
        return route.info.route.proxy_addr(self._routes.namesrv.addrs)

    @property
    def namesrv(self) -> NameServerClient:
        """The NameServer client: the addresses, the one asked now (``current``), ``use(addr)``."""
        return self._routes.namesrv

    def connections(self) -> list[str]:
        """Addresses this producer holds an open connection to (NameServers and brokers)."""
        return self._remoting.addresses()

    def refresh_routes(self) -> None:
        """Fetch every cached topic's route again (the background refresh does this periodically)."""
        self._routes.refresh()

    # -- sends -----------------------------------------------------------------------------------------
    def _submit(
        self,
        req: SendRequest,
        queue: MessageQueue | None,
        sharding_key: str | None,
        *,
        sync: bool,
        settle_as: Callable[[SendResult], Any] | None = None,
    ) -> Future[Any]:
        """Start a send: sync sends take retry_times_when_send_failed, async ones
        retry_times_when_send_async_failed (and retry only failures to reach a broker, as Java's). The
        future holds the SendResult, or what ``settle_as`` makes of it."""
        c = self.config
        retries = c.retry_times_when_send_failed if sync else c.retry_times_when_send_async_failed
        self._check_open()
        if queue is not None:
            queue = check_queue(req.topic, queue)
        if sharding_key is not None:
            sharding_key = check_sharding_key(sharding_key)
        if in_reader_thread():
            # A callback of another send: blocking here would stop the very thread that completes sends.
            if not self._slots.acquire(0):
                raise RemotingTooMuchRequestError(
                    f"max_in_flight ({self.config.max_in_flight}) sends pending, and a send callback cannot wait "
                    "for room; send from another thread or raise max_in_flight"
                )
        else:
            while not self._slots.acquire(0.5):
                self._check_open()
        op = SendOperation(
            req,
            queue=queue,
            sharding_key=sharding_key,
            retries=retries,
            timeout_ms=c.send_msg_timeout_ms,
            sync=sync,
            on_settled=self._slots.release,
            settle_as=settle_as,
        )
        return self._sender.start(op)

    def _message_request(self, message: Message) -> SendRequest:
        c = self.config
        uniq = self._ids.next_id() if isinstance(message, Message) and message.uniq_key is None else ""
        return message_request(
            message,
            uniq,
            max_message_size=c.max_message_size,
            compress_over=c.compress_msg_body_over,
            namespace=c.namespace,
        )

    def send(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer (at most send_msg_timeout_ms).

        ``sharding_key``: the same key always goes to the same queue (Java's SelectMessageQueueByHash);
        retried on that queue only. ``queue``: send to this queue (retried on it only). ``selector``:
        ``selector(queues, message, arg)`` picks one of the topic's writable queues (MessageQueueSelector),
        which the send is retried on only.
        """
        queue = self._target(message, sharding_key, queue, selector, arg)
        fut = self._accumulate(message, queue, sharding_key, sync=True)
        if fut is not None:
            return result_within(fut, self.config.send_msg_timeout_ms + self.config.batch_max_delay_ms)
        fut = self._submit(self._message_request(message), queue, sharding_key, sync=True)
        return result_within(fut, self.config.send_msg_timeout_ms)

    def send_async(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> Future[SendResult]:
        """Send without waiting: a Future of the SendResult. Blocks while max_in_flight sends are pending.
        ``sharding_key``, ``queue``, ``selector`` and ``arg`` as send's.

        Callbacks added to the future run on a connection's reader thread: keep them short.
        """
        queue = self._target(message, sharding_key, queue, selector, arg)
        if self._accumulator is not None:
            fut = self._accumulate(message, queue, sharding_key, sync=False)
            if fut is not None:
                return fut
        return self._submit(self._message_request(message), queue, sharding_key, sync=False)

    def _accumulate(
        self, message: Message, queue: MessageQueue | None, sharding_key: str | None, *, sync: bool
    ) -> Future[SendResult] | None:
        """With auto_batch: the message's future from the accumulator; None when it goes alone.

        A keyed message joins the batch of its key's queue, chosen when it is added (Java's selector
        sends with autoBatch); when the topic's queues cannot be had, it goes alone, and the single
        send reports why.
        """
        if self._accumulator is None or not isinstance(message, Message):
            return None
        self._check_open()
        queue = check_queue(message.topic, queue)
        key = check_sharding_key(sharding_key)
        if key is not None:
            try:
                queues = self.fetch_publish_queues(message.topic)
            except RocketMQError:
                return None
            if not queues:
                return None
            queue = queues[sharding_queue_index(key, len(queues))]
        return self._accumulator.add(message, queue, sync=sync)

    def send_oneway(self, message: Message) -> None:
        """Send without an answer: one attempt, nothing to tell whether it was stored."""
        self._check_open()
        op = SendOperation(
            self._message_request(message),
            queue=None,
            sharding_key=None,
            retries=0,
            timeout_ms=self.config.send_msg_timeout_ms,
            oneway=True,
        )
        self._sender.start(op).result()

    def stats(self) -> ProducerStats:
        c = self._sender.counters
        return ProducerStats(
            requests=c.requests,
            messages=c.messages,
            retries=c.retries,
            failures=c.failures,
            bytes_sent=c.bytes_sent,
            in_flight=self._slots.pending,
            busy_answers=c.busy_answers,
        )


__all__ = ["Producer", "ProducerStats", "SendResult", "SendStatus", "sharding_queue_index"]
