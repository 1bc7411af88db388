"""Producer: the send path of DefaultMQProducer (sync, async, oneway, batch, sharding key) in Python.

One Producer holds one connection per broker, shared by every thread that sends through it. Routes
come from the NameServers and are refreshed in the background; queues are chosen round-robin
avoiding slow or failed brokers (MQFaultStrategy); failed sends are retried on another broker.

Delivery is at least once: a request that timed out or lost its connection may still have been
stored, and its retry stores it again. Every attempt of a send carries the same UNIQ_KEY
(SendResult.msg_id), so consumers can tell the copies apart.

Threads: any number of threads may share one Producer. Futures from send_async and
send_batch_body_async are completed on a connection's reader thread; callbacks added to them
should be short and must not wait for other sends.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import random
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base

from ..errors import (
    BrokerError,
    ConfigError,
    InvalidMessageError,
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
    RocketMQError,
    SendFailedError,
    TopicNotFoundError,
)
from ..protocol.codes import BROKER_BUSY_CODES, RETRY_ANOTHER_BROKER_CODES, RequestCode, ResponseCode, SysFlag
from ..protocol.frame import RemotingCommand
from ..protocol.headers import (
    CLIENT_INNER_PRODUCER_GROUP,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    heartbeat_request,
    unregister_client_request,
)
from ..protocol.javamap import hashmap_order, java_string_hash
from ..protocol.message import (
    BATCH_RECORD_OVERHEAD,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    check_body,
    check_properties_length,
    compress_body,
    encode_properties,
    validate_topic,
)
from ..protocol.route import MessageQueue, TopicPublishInfo, TopicRouteData, publish_info
from ..protocol.uniq_id import check_uniq_id
from .config import ProducerConfig
from .fastpath import (
    encoded_properties,
    properties_need_full_check,
    properties_size_bound,
    send_v2_fields,
    simple_properties_template,
)
from .fault import MQFaultStrategy
from .ids import UniqIdGenerator, default_instance_name, make_client_id
from .namesrv import NameServerClient
from .remoting import RemotingClient, in_reader_thread

log = logging.getLogger(__name__)

#: Backoff before retrying a broker that answered SYSTEM_BUSY / FLOW_CONTROL (doubles per attempt).
BUSY_BACKOFF_S = 0.05
BUSY_BACKOFF_MAX_S = 1.0
_RECORD_HEAD = struct.Struct(">iiiii")
_SHORT = struct.Struct(">h")
#: MessageConst.PROPERTY_INSTANCE_ID: the namespace of a namespaced producer.
PROPERTY_INSTANCE_ID = "INSTANCE_ID"


class SendStatus(StrEnum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True)
class SendResult:
    """What the broker answered to one send request (one message, or one batch body)."""

    status: SendStatus
    #: The UNIQ_KEY (the id consumers see); comma-joined for a batch.
    msg_id: str
    #: The broker's offset id(s): store address + commit-log offset; comma-joined for a batch.
    offset_msg_id: str
    #: Where it went (topic without namespace).
    queue: MessageQueue
    #: Consume-queue offset of the (first) message.
    queue_offset: int
    #: Messages in this request.
    count: int = 1
    transaction_id: str | None = None
    region_id: str | None = None


@dataclass(frozen=True)
class ProducerStats:
    """Counters since the producer started."""

    requests: int
    messages: int
    retries: int
    failures: int
    bytes_sent: int
    in_flight: int


@dataclass
class _Request:
    """A send request ready for the wire, apart from the queue and the born timestamp."""

    code: int
    topic: str  # without namespace
    wire_topic: str
    body: bytes
    properties: str
    sys_flag: int
    flag: int
    batch: bool
    count: int
    msg_id: str


@dataclass
class _TopicState:
    info: TopicPublishInfo
    counter: itertools.count
    auto_created: bool = False


class _NotStoreOk(Exception):
    """A stored-but-not-SEND_OK answer that retry_another_broker_when_not_store_ok retries."""

    def __init__(self, result: SendResult) -> None:
        super().__init__(f"broker answered {result.status.value}")
        self.result = result


def sharding_queue_index(key: str, queue_count: int) -> int:
    """SelectMessageQueueByHash: String.hashCode() % count, made non-negative, as the Java client does."""
    # Java: hashCode() % n (truncating), then Math.abs when negative: the same as |hash| % n.
    return abs(java_string_hash(key)) % queue_count


class _Scheduler:
    """Runs callables after a delay on a small worker pool (retries never run on a reader thread)."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="rocketmq-retry-scheduler", daemon=True)
        self._thread.start()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> None:
        if delay_s <= 0:
            self._pool.submit(fn)
            return
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn))
            self._cond.notify()

    def _loop(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, fn = heapq.heappop(self._heap)
                    self._pool.submit(fn)
                timeout = self._heap[0][0] - now if self._heap else None
                self._cond.wait(timeout)

    def stop(self) -> list[Callable[[], None]]:
        with self._cond:
            self._stopped = True
            left = [fn for _, _, fn in self._heap]
            self._heap.clear()
            self._cond.notify()
        self._thread.join(timeout=2)
        return left


class Producer:
    """A RocketMQ producer speaking the remoting protocol, thread-safe.

    ``Producer(namesrv_addr="127.0.0.1:9876", group="g")`` or ``Producer(config=ProducerConfig(...))``;
    keyword options override the config's. Use as a context manager or call ``close()``.
    """

    def __init__(self, config: ProducerConfig | None = None, **options: Any) -> None:
        try:
            if config is None:
                config = ProducerConfig(**options)
            elif options:
                config = config.replace(**options)
        except TypeError as exc:
            raise ConfigError(f"{exc}; valid options: {', '.join(ProducerConfig.option_names())}") from None
        self.config = config
        addrs = config.namesrv_addrs
        self.instance_name = config.instance_name or default_instance_name()
        self.client_id = make_client_id(self.instance_name, config.unit_name)
        self.group = self._wrap(config.group)
        self._remoting = RemotingClient(
            connect_timeout_ms=config.connect_timeout_ms,
            use_tls=config.use_tls,
            tls_verify=config.tls_verify,
            access_key=config.access_key,
            secret_key=config.secret_key,
        )
        self._namesrv = NameServerClient(self._remoting, addrs, config.remoting_timeout_ms)
        self.fault_strategy = MQFaultStrategy(enabled=config.send_latency_fault_enable)
        self._ids = UniqIdGenerator()
        wrapper = {PROPERTY_WAIT_STORE_MSG_OK: "true"}
        if config.namespace:
            wrapper[PROPERTY_INSTANCE_ID] = config.namespace
        #: Properties of a MessageBatch itself ("i"); each message's own are inside the body.
        self._batch_wrapper_properties = encode_properties({k: wrapper[k] for k in hashmap_order(wrapper)})
        #: The clock of bornTimestamp ("g"); replaceable in tests that rebuild captured frames.
        self._now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
        self._topics: dict[str, _TopicState] = {}
        self._route_lock = threading.Lock()
        self._brokers_seen: set[str] = set()
        self._stats_lock = threading.Lock()
        self._requests = self._messages = self._retries = self._failures = self._bytes = 0
        self._in_flight = threading.BoundedSemaphore(config.max_in_flight)
        self._in_flight_count = 0
        self._idle = threading.Condition(self._stats_lock)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rocketmq-retry")
        self._scheduler = _Scheduler(self._pool)
        self._closed = False
        self._abandoned = False
        self._stop = threading.Event()
        self._service = threading.Thread(target=self._service_loop, name="rocketmq-producer-service", daemon=True)
        self._service.start()

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Producer:
        """Nothing to do (the constructor starts the producer); kept for DefaultMQProducer habits."""
        return self

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout_s: float | None = None) -> None:
        """Wait for sends in flight (up to send_msg_timeout_ms), unregister from the brokers, disconnect."""
        if self._closed:
            return
        self._closed = True  # no new sends; those in flight may still retry until the wait ends
        wait = self.config.send_msg_timeout_ms / 1000.0 if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait
        with self._idle:
            while self._in_flight_count > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
        self._abandoned = True
        self._stop.set()
        for fn in self._scheduler.stop():
            try:
                fn()
            except Exception:
                log.exception("retry at close failed")
        self._pool.shutdown(wait=True)
        for addr in self._broker_addrs():
            for group in (self.group, CLIENT_INNER_PRODUCER_GROUP):
                try:
                    self._remoting.invoke_sync(addr, unregister_client_request(self.client_id, group), 1000)
                except Exception as exc:  # best effort: the broker forgets silent clients anyway
                    log.debug("UNREGISTER_CLIENT to %s failed: %s", addr, exc)
                    break
        self._remoting.close()
        if self._service is not threading.current_thread():
            self._service.join(timeout=2)

    def _check_open(self) -> None:
        if self._closed:
            raise RemotingConnectError("the producer is closed")

    # -- names ---------------------------------------------------------------------------------
    def _wrap(self, name: str) -> str:
        """NamespaceUtil.wrapNamespace: "namespace%name"."""
        ns = self.config.namespace
        if not ns or name.startswith(f"{ns}%"):
            return name
        return f"{ns}%{name}"

    # -- routes --------------------------------------------------------------------------------
    def _fetch_state(self, topic: str, wire_topic: str) -> _TopicState:
        route = self._namesrv.get_route(wire_topic)
        auto = False
        if route is None:
            default = self._namesrv.get_route(self.config.create_topic_key)
            if default is None:
                raise TopicNotFoundError(
                    topic, f"NameServer {self._namesrv.current} knows neither it nor {self.config.create_topic_key}"
                )
            n = self.config.default_topic_queue_nums
            route = TopicRouteData(
                queue_datas=[
                    replace(qd, read_queue_nums=min(n, qd.read_queue_nums), write_queue_nums=min(n, qd.read_queue_nums))
                    for qd in default.queue_datas
                ],
                broker_datas=default.broker_datas,
                filter_server_table=default.filter_server_table,
            )
            auto = True
        info = publish_info(wire_topic, route)
        if not info.ok:
            raise TopicNotFoundError(topic, "its route has no writable queue on a broker with a master")
        return _TopicState(info, itertools.count(random.randrange(1 << 16)), auto)

    def _topic_state(self, topic: str, wire_topic: str) -> _TopicState:
        st = self._topics.get(wire_topic)
        if st is not None:
            return st
        with self._route_lock:
            st = self._topics.get(wire_topic)
            if st is None:
                st = self._fetch_state(topic, wire_topic)
                self._topics[wire_topic] = st
        self._greet_new_brokers()
        return st

    def refresh_routes(self) -> None:
        """Fetch every cached topic's route again (the background refresh does this periodically)."""
        for wire_topic, st in list(self._topics.items()):
            topic = wire_topic.split("%", 1)[1] if self.config.namespace and "%" in wire_topic else wire_topic
            try:
                new = self._fetch_state(topic, wire_topic)
            except Exception as exc:
                log.warning("route refresh of %s failed: %s", topic, exc)
                continue
            if new.info.message_queues != st.info.message_queues or new.info.route != st.info.route:
                log.info("route of %s changed: %s", topic, new.info.broker_names)
                self._topics[wire_topic] = _TopicState(new.info, st.counter, new.auto_created)
        self._greet_new_brokers()

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues (topic without namespace), in the order queue selection uses.

        From the route cache (kept fresh by the background refresh), else from the NameServer.
        """
        self._check_open()
        validate_topic(topic)
        st = self._topic_state(topic, self._wrap(topic))
        return [MessageQueue(topic, mq.broker_name, mq.queue_id) for mq in st.info.message_queues]

    def _broker_addrs(self) -> list[str]:
        addrs: dict[str, None] = {}
        for st in list(self._topics.values()):
            for bd in st.info.route.broker_datas:
                if bd.master_addr:
                    addrs[bd.master_addr] = None
        return list(addrs)

    # -- heartbeats and background refresh -------------------------------------------------------
    def _heartbeat(self, addr: str) -> None:
        cmd = heartbeat_request(self.client_id, [self.group])
        fut = self._remoting.invoke_async(addr, cmd, self.config.remoting_timeout_ms)

        def done(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                log.debug("HEART_BEAT to %s failed: %s", addr, exc)
            elif f.result().code != ResponseCode.SUCCESS:
                resp = f.result()
                log.warning("HEART_BEAT refused by %s: code %s %s", addr, resp.code, resp.remark)

        fut.add_done_callback(done)

    def _greet_new_brokers(self) -> None:
        for addr in self._broker_addrs():
            if addr not in self._brokers_seen:
                self._brokers_seen.add(addr)
                self._heartbeat(addr)

    def send_heartbeats(self) -> None:
        for addr in self._broker_addrs():
            self._brokers_seen.add(addr)
            self._heartbeat(addr)

    def _service_loop(self) -> None:
        poll = self.config.poll_name_server_interval_ms / 1000.0
        beat = self.config.heartbeat_broker_interval_ms / 1000.0
        next_poll = time.monotonic() + poll
        next_beat = time.monotonic() + beat
        while not self._stop.wait(max(0.0, min(next_poll, next_beat) - time.monotonic())):
            now = time.monotonic()
            try:
                if now >= next_poll:
                    next_poll = now + poll
                    self.refresh_routes()
                if now >= next_beat:
                    next_beat = now + beat
                    self.send_heartbeats()
            except Exception:
                log.exception("producer background task failed")

    # -- preparing requests ----------------------------------------------------------------------
    def _prepare(self, msg: Message) -> _Request:
        if not isinstance(msg, Message):
            raise InvalidMessageError(f"expected a Message, got {type(msg).__name__}")
        topic = validate_topic(msg.topic)
        body = check_body(topic, msg.body, self.config.max_message_size)
        if self.config.namespace:
            # DefaultMQProducerImpl.sendKernelImpl: a namespaced producer tags each message with INSTANCE_ID.
            msg = dataclasses.replace(msg, _extra={**msg._extra, PROPERTY_INSTANCE_ID: self.config.namespace})
        uniq = check_uniq_id(msg.uniq_key) if msg.uniq_key is not None else self._ids.next_id()
        props = encoded_properties(msg, uniq)
        check_properties_length(topic, props.encode("utf-8"))
        sys_flag = 0
        if len(body) >= self.config.compress_msg_body_over:
            body = compress_body(body, 5)
            sys_flag |= SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB
        return _Request(
            code=RequestCode.SEND_MESSAGE_V2,
            topic=topic,
            wire_topic=self._wrap(topic),
            body=body,
            properties=props,
            sys_flag=sys_flag,
            flag=msg.flag,
            batch=False,
            count=1,
            msg_id=uniq,
        )

    def encode_batch(self, messages: Sequence[Message]) -> list[tuple[bytes, int, list[str]]]:
        """Validate a batch and encode it into MessageBatch bodies of at most max_message_size bytes.

        Returns (body, message count, UNIQ_KEYs) per request.
        """
        topic = self._check_batch(messages)
        return list(self._batch_bodies(messages, topic))

    def _check_batch(self, messages: Sequence[Message]) -> str:
        """Every check of a batch, done before anything is encoded or sent; returns the topic."""
        if not messages:
            raise InvalidMessageError("send_batch got no messages")
        topic = validate_topic(messages[0].topic if isinstance(messages[0], Message) else None)
        if topic.startswith("%RETRY%"):
            raise InvalidMessageError(f"topic {topic!r}: retry topics cannot be sent to in a batch")
        limit = self.config.max_message_size
        wait = messages[0].wait_store_msg_ok
        for i, msg in enumerate(messages):
            if not isinstance(msg, Message):
                raise InvalidMessageError(f"batch item {i}: expected a Message, got {type(msg).__name__}")
            if msg.topic != topic:
                raise InvalidMessageError(
                    f"batch item {i}: topic {msg.topic!r} differs from {topic!r}; a batch goes to one topic"
                )
            if msg.delay_level:
                raise InvalidMessageError(
                    f"batch item {i} (topic {topic!r}): delayed messages (delay_level) cannot be sent in a batch"
                )
            if msg.wait_store_msg_ok != wait:
                raise InvalidMessageError(
                    f"batch item {i} (topic {topic!r}): wait_store_msg_ok differs from item 0; "
                    "a batch's messages must all agree on it"
                )
            body = msg.body
            if type(body) is not bytes or not body or len(body) > limit:
                body = check_body(topic, body, limit)
            if msg.uniq_key is not None:
                check_uniq_id(msg.uniq_key)
            if (
                properties_need_full_check(msg)
                or BATCH_RECORD_OVERHEAD + len(body) + properties_size_bound(msg) > limit
            ):
                props = encoded_properties(msg, msg.uniq_key or "0" * 32).encode("utf-8")  # raises if invalid
                check_properties_length(topic, props)
                rec_size = BATCH_RECORD_OVERHEAD + len(body) + len(props)
                if rec_size > limit:
                    raise InvalidMessageError(
                        f"batch item {i} (topic {topic!r}): {rec_size} bytes encoded, over max_message_size {limit}"
                    )
        return topic

    def _batch_bodies(self, messages: Sequence[Message], topic: str) -> Iterator[tuple[bytes, int, list[str]]]:
        """Encode checked messages into request bodies, one body at a time (so sending can start early)."""
        limit = self.config.max_message_size
        ids = self._ids.next_ids(len(messages))
        parts: list[bytes] = []
        chunk_ids: list[str] = []
        size = 0
        head = _RECORD_HEAD.pack
        short = _SHORT.pack
        template = simple_properties_template
        for i, msg in enumerate(messages):
            body = msg.body
            if type(body) is not bytes:
                body = bytes(body)
            uniq = ids[i] if msg.uniq_key is None else msg.uniq_key
            if msg.properties or msg._extra:
                props = encoded_properties(msg, uniq).encode("utf-8")
            else:  # checked already: only tags / keys / WAIT / UNIQ_KEY, in a cached HashMap order
                tags = msg.tags or None
                keys = msg.keys
                if keys is not None and type(keys) is not str:
                    keys = " ".join(keys)
                keys = keys or None
                props = (
                    template(tags is not None, keys is not None, bool(msg.wait_store_msg_ok))
                    .format(tags, keys, uniq)
                    .encode("utf-8")
                )
            rec_size = BATCH_RECORD_OVERHEAD + len(body) + len(props)
            if size + rec_size > limit and chunk_ids:
                yield b"".join(parts), len(chunk_ids), chunk_ids
                parts, chunk_ids, size = [], [], 0
            # One record as MessageDecoder.encodeMessage lays it out (encode_batch_body, inlined).
            parts += (head(rec_size, 0, 0, msg.flag, len(body)), body, short(len(props)), props)
            chunk_ids.append(uniq)
            size += rec_size
        if chunk_ids:
            yield b"".join(parts), len(chunk_ids), chunk_ids

    def _batch_request(self, topic: str, body: bytes, count: int, uniq_keys: Sequence[str] | None) -> _Request:
        topic = validate_topic(topic)
        if not isinstance(body, (bytes, bytearray, memoryview)):
            try:  # any buffer (a pyarrow Buffer slice, ...) is written as it is, without a copy
                body = memoryview(body)
            except TypeError:
                raise InvalidMessageError(
                    f"topic {topic!r}: a batch body must be bytes or a buffer, not {type(body).__name__}"
                ) from None
        if isinstance(body, memoryview):
            body = body.cast("B") if body.format != "B" or body.ndim != 1 else body
        if len(body) == 0:
            raise InvalidMessageError(f"topic {topic!r}: a batch body must not be empty")
        if len(body) > self.config.max_message_size:
            raise InvalidMessageError(
                f"topic {topic!r}: batch body of {len(body)} bytes is over max_message_size "
                f"{self.config.max_message_size}; split it into smaller requests"
            )
        if count <= 0:
            raise InvalidMessageError(f"topic {topic!r}: a batch body holds at least one message (count={count})")
        if uniq_keys is not None and len(uniq_keys) != count:
            raise InvalidMessageError(f"topic {topic!r}: {len(uniq_keys)} uniq_keys for {count} messages")
        return _Request(
            code=RequestCode.SEND_BATCH_MESSAGE,
            topic=topic,
            wire_topic=self._wrap(topic),
            body=body,
            properties=self._batch_wrapper_properties,
            sys_flag=0,
            flag=0,
            batch=True,
            count=count,
            msg_id=",".join(uniq_keys) if uniq_keys is not None else "",
        )

    def _command(self, req: _Request, mq: MessageQueue) -> RemotingCommand:
        header = SendMessageRequestHeader(
            producer_group=self.group,
            topic=req.wire_topic,
            queue_id=mq.queue_id,
            sys_flag=req.sys_flag,
            born_timestamp=self._now_ms(),
            flag=req.flag,
            properties=req.properties,
            default_topic=self.config.create_topic_key,
            default_topic_queue_nums=self.config.default_topic_queue_nums,
            batch=req.batch,
            broker_name=mq.broker_name,
        )
        return RemotingCommand(code=req.code, ext_fields=send_v2_fields(header), body=req.body)

    # -- one attempt ------------------------------------------------------------------------------
    def _choose_queue(self, req: _Request, op: _SendOp) -> tuple[MessageQueue, str]:
        st = self._topic_state(req.topic, req.wire_topic)
        info = st.info
        if op.fixed_queue is not None:
            mq = MessageQueue(req.wire_topic, op.fixed_queue.broker_name, op.fixed_queue.queue_id)
        elif op.sharding_key is not None:
            queues = info.message_queues
            mq = queues[sharding_queue_index(op.sharding_key, len(queues))]
        else:
            mq = self.fault_strategy.select_one_message_queue(info, op.last_broker, st.counter)
        addr = info.route.broker_addr(mq.broker_name)
        if addr is None:
            raise RemotingConnectError(
                f"broker {mq.broker_name!r} has no master address in the route of topic {req.topic!r}"
            )
        return mq, addr

    def _attempt(self, op: _SendOp) -> Future:
        """Send once; the future gets a SendResult or the error (BrokerError, RemotingError, ...)."""
        req = op.req
        remaining_ms = (op.deadline - time.monotonic()) * 1000.0
        if remaining_ms <= 0:
            raise RemotingTimeoutError(
                f"send to topic {req.topic!r} ran out of its {op.timeout_ms} ms (send_msg_timeout_ms)"
            )
        mq, addr = self._choose_queue(req, op)
        op.last_broker = mq.broker_name
        cmd = self._command(req, mq)
        with self._stats_lock:
            self._requests += 1
            self._bytes += len(req.body)
        begin = time.monotonic()
        raw = self._remoting.invoke_async(addr, cmd, remaining_ms)
        out: Future = Future()

        def done(f: Future) -> None:
            latency = int((time.monotonic() - begin) * 1000)
            exc = f.exception()
            result: SendResult | None = None
            if exc is None:
                try:
                    result = self._process_response(req, f.result(), mq, addr)
                except Exception as e:
                    exc = e
            if exc is None:
                self.fault_strategy.update_fault_item(mq.broker_name, latency, False)
                out.set_result(result)
            else:
                if _is_retryable(exc):
                    self.fault_strategy.update_fault_item(mq.broker_name, latency, True)
                out.set_exception(exc)

        raw.add_done_callback(done)
        return out

    def _process_response(self, req: _Request, resp: RemotingCommand, mq: MessageQueue, addr: str) -> SendResult:
        status = _STATUS_BY_CODE.get(resp.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError(resp.code, resp.remark, addr, request=f"send to topic {req.topic!r}")
        try:
            rh = SendMessageResponseHeader.from_command(resp)
        except ProtocolError as exc:
            raise ProtocolError(f"send answer from {addr}: {exc}") from None
        return SendResult(
            status=status,
            msg_id=req.msg_id,
            offset_msg_id=rh.msg_id,
            queue=MessageQueue(req.topic, mq.broker_name, rh.queue_id),
            queue_offset=rh.queue_offset,
            count=req.count,
            transaction_id=rh.transaction_id,
            region_id=resp.field("MSG_REGION"),
        )

    # -- sync sends (tenacity) --------------------------------------------------------------------
    def _send_sync(
        self, req: _Request, fixed_queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> SendResult:
        self._check_open()
        op = _SendOp(self, req, fixed_queue, sharding_key, self.config.retry_times_when_send_failed)
        retry_not_ok = self.config.retry_another_broker_when_not_store_ok

        def attempt() -> SendResult:
            op.attempts += 1
            if op.attempts > 1:
                with self._stats_lock:
                    self._retries += 1
            fut = self._attempt(op)
            try:
                result = fut.result(timeout=max(0.0, op.deadline - time.monotonic()) + 1.0)
            except FutureTimeout:
                raise RemotingTimeoutError(f"send to topic {req.topic!r} got no answer in time") from None
            if retry_not_ok and result.status != SendStatus.SEND_OK:
                raise _NotStoreOk(result)
            return result

        retrying = Retrying(
            stop=stop_after_attempt(op.max_attempts) | _stop_at(op.deadline),
            retry=retry_if_exception(_is_retryable_or_not_ok),
            wait=_wait_for_error,
            reraise=False,
        )
        try:
            result = retrying(attempt)
        except RetryError as err:
            last = err.last_attempt.exception()
            if isinstance(last, _NotStoreOk):
                return last.result
            self._count_failure()
            raise _exhausted(req, op.attempts, last) from last
        except BaseException:
            self._count_failure()
            raise
        with self._stats_lock:
            self._messages += req.count
        return result

    def _count_failure(self) -> None:
        with self._stats_lock:
            self._failures += 1

    # -- public API -------------------------------------------------------------------------------
    def send(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer.

        ``sharding_key``: the same key always goes to the same queue (Java's SelectMessageQueueByHash);
        retried on that queue only. ``queue``: send to this queue (retried on it only).
        """
        if sharding_key is not None and queue is not None:
            raise InvalidMessageError("give sharding_key or queue, not both")
        req = self._prepare(message)
        return self._send_sync(req, _check_queue(req.topic, queue), _check_key(sharding_key))

    def send_async(
        self,
        message: Message,
        *,
        sharding_key: str | None = None,
        queue: MessageQueue | None = None,
    ) -> Future:
        """Send without waiting: a Future of the SendResult. Blocks while max_in_flight sends are pending.

        Callbacks added to the future run on a connection's reader thread: keep them short.
        """
        if sharding_key is not None and queue is not None:
            raise InvalidMessageError("give sharding_key or queue, not both")
        req = self._prepare(message)
        return self._submit(
            req,
            _check_queue(req.topic, queue),
            _check_key(sharding_key),
            self.config.retry_times_when_send_async_failed,
        )

    def send_oneway(self, message: Message) -> None:
        """Send without an answer (no retry, nothing to know whether it was stored)."""
        self._check_open()
        req = self._prepare(message)
        op = _SendOp(self, req, None, None, 0)
        mq, addr = self._choose_queue(req, op)
        cmd = self._command(req, mq)
        with self._stats_lock:
            self._requests += 1
            self._messages += 1
            self._bytes += len(req.body)
        self._remoting.invoke_oneway(addr, cmd)

    def send_batch(
        self, messages: Sequence[Message], *, sharding_key: str | None = None, queue: MessageQueue | None = None
    ) -> list[SendResult]:
        """Send messages of one topic as MessageBatch requests of at most max_message_size bytes.

        Returns one SendResult per request, in order. The requests are pipelined; if any fails, the
        first error is raised once all have finished (the others may have been stored).
        """
        topic = self._check_batch(messages)  # bad input is refused before the first request goes out
        # Each body is sent as soon as it is encoded: the brokers store one while the next is encoded.
        futures = [
            self.send_batch_body_async(topic, body, count, uniq_keys=ids, queue=queue, sharding_key=sharding_key)
            for body, count, ids in self._batch_bodies(messages, topic)
        ]
        return _gather(futures)

    def send_batch_body_async(
        self,
        topic: str,
        body: bytes,
        count: int,
        *,
        uniq_keys: Sequence[str] | None = None,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
    ) -> Future:
        """Send an already-encoded MessageBatch body (encode_batch_body layout) of ``count`` messages.

        Same retries, fault avoidance and timeout as send_batch; ``queue`` pins the queue (retried on
        it only). SendResult.msg_id is ",".join(uniq_keys) when given. Blocks while max_in_flight
        requests are pending.
        """
        req = self._batch_request(topic, body, count, uniq_keys)
        return self._submit(
            req, _check_queue(req.topic, queue), _check_key(sharding_key), self.config.retry_times_when_send_failed
        )

    def send_batch_body(
        self,
        topic: str,
        body: bytes,
        count: int,
        *,
        uniq_keys: Sequence[str] | None = None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        req = self._batch_request(topic, body, count, uniq_keys)
        return self._send_sync(req, _check_queue(req.topic, queue))

    def stats(self) -> ProducerStats:
        with self._stats_lock:
            return ProducerStats(
                requests=self._requests,
                messages=self._messages,
                retries=self._retries,
                failures=self._failures,
                bytes_sent=self._bytes,
                in_flight=self._in_flight_count,
            )

    # -- async machinery --------------------------------------------------------------------------
    def _submit(
        self, req: _Request, fixed_queue: MessageQueue | None, sharding_key: str | None, retries: int
    ) -> Future:
        self._check_open()
        if in_reader_thread():
            # A callback of another send: blocking here would stop the very thread that completes sends.
            if not self._in_flight.acquire(blocking=False):
                raise RemotingTooMuchRequestError(
                    f"max_in_flight ({self.config.max_in_flight}) sends pending, and a send callback cannot wait "
                    "for room; send from another thread or raise max_in_flight"
                )
        else:
            while not self._in_flight.acquire(timeout=0.5):
                self._check_open()
        with self._stats_lock:
            self._in_flight_count += 1
        op = _SendOp(self, req, fixed_queue, sharding_key, retries)
        op.outer.add_done_callback(self._release)
        op.run()
        return op.outer

    def _release(self, _: Future) -> None:
        with self._idle:
            self._in_flight_count -= 1
            if self._in_flight_count == 0:
                self._idle.notify_all()
        self._in_flight.release()

    def _schedule_retry(self, delay_s: float, fn: Callable[[], None]) -> None:
        try:
            self._scheduler.call_later(delay_s, fn)
        except RuntimeError:  # pool shut down: run here
            fn()


class _SendOp:
    """One logical send and its attempts (the async path drives it from callbacks)."""

    def __init__(
        self,
        producer: Producer,
        req: _Request,
        fixed_queue: MessageQueue | None,
        sharding_key: str | None,
        retries: int,
    ) -> None:
        self.producer = producer
        self.req = req
        self.fixed_queue = fixed_queue
        self.sharding_key = sharding_key
        self.max_attempts = 1 + retries
        self.timeout_ms = producer.config.send_msg_timeout_ms
        self.deadline = time.monotonic() + self.timeout_ms / 1000.0
        self.attempts = 0
        self.last_broker: str | None = None
        self.last_error: BaseException | None = None
        self.last_result: SendResult | None = None
        self.outer: Future = Future()

    def run(self) -> None:
        p = self.producer
        self.attempts += 1
        if self.attempts > 1:
            with p._stats_lock:
                p._retries += 1
        try:
            fut = p._attempt(self)
        except BaseException as exc:
            self._failed(exc)
            return
        fut.add_done_callback(self._on_done)

    def _on_done(self, fut: Future) -> None:
        exc = fut.exception()
        if exc is not None:
            self._failed(exc)
            return
        result: SendResult = fut.result()
        p = self.producer
        if (
            result.status != SendStatus.SEND_OK
            and p.config.retry_another_broker_when_not_store_ok
            and self.attempts < self.max_attempts
            and time.monotonic() < self.deadline
        ):
            self.last_result = result
            p._schedule_retry(0, self.run)
            return
        self._finish(result)

    def _finish(self, result: SendResult) -> None:
        with self.producer._stats_lock:
            self.producer._messages += self.req.count
        self.outer.set_result(result)

    def _failed(self, exc: BaseException) -> None:
        p = self.producer
        if self.last_result is not None and not _is_retryable(exc):
            self._finish(self.last_result)
            return
        if not _is_retryable(exc):
            p._count_failure()
            self.outer.set_exception(exc)
            return
        self.last_error = exc
        delay = _retry_delay(exc, self.attempts)
        if self.attempts >= self.max_attempts or time.monotonic() + delay >= self.deadline or p._abandoned:
            if self.last_result is not None:
                self._finish(self.last_result)
                return
            p._count_failure()
            self.outer.set_exception(_exhausted(self.req, self.attempts, exc))
            return
        p._schedule_retry(delay, self.run)


# -- retry policy -----------------------------------------------------------------------------------
def _is_retryable(exc: BaseException | None) -> bool:
    """Connection errors, timeouts and the answers DefaultMQProducerImpl retries (plus busy brokers)."""
    if isinstance(exc, RemotingError):
        return True
    if isinstance(exc, BrokerError):
        return exc.code in RETRY_ANOTHER_BROKER_CODES or exc.code in BROKER_BUSY_CODES
    return False


def _is_retryable_or_not_ok(exc: BaseException) -> bool:
    return isinstance(exc, _NotStoreOk) or _is_retryable(exc)


def _retry_delay(exc: BaseException | None, attempt: int) -> float:
    if isinstance(exc, BrokerError) and exc.code in BROKER_BUSY_CODES:
        return min(BUSY_BACKOFF_S * (2 ** max(0, attempt - 1)), BUSY_BACKOFF_MAX_S)
    return 0.0


def _wait_for_error(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome is not None else None
    return _retry_delay(exc, state.attempt_number)


class _stop_at(stop_base):
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __call__(self, state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome is not None else None
        return time.monotonic() + _retry_delay(exc, state.attempt_number) >= self.deadline


def _exhausted(req: _Request, attempts: int, last: BaseException | None) -> RocketMQError:
    if isinstance(last, BrokerError) and last.code == ResponseCode.TOPIC_NOT_EXIST:
        # Every broker tried refused the topic (no autoCreateTopicEnable behind TBW102, or a stale route).
        return TopicNotFoundError(req.topic, f"broker {last.addr} answered: {last.remark}")
    what = f"batch of {req.count} messages" if req.batch else "message"
    return SendFailedError(
        f"send of a {what} to topic {req.topic!r} failed after {attempts} attempt(s): {last}", attempts, last
    )


def _check_queue(topic: str, queue: MessageQueue | None) -> MessageQueue | None:
    if queue is None:
        return None
    if not isinstance(queue, MessageQueue):
        raise InvalidMessageError(f"queue must be a MessageQueue, got {type(queue).__name__}")
    if queue.topic != topic and queue.topic.split("%", 1)[-1] != topic:  # plain or namespaced name
        raise InvalidMessageError(f"queue {queue} belongs to topic {queue.topic!r}, not {topic!r}")
    return queue


def _check_key(key: str | None) -> str | None:
    if key is not None and not isinstance(key, str):
        raise InvalidMessageError(f"sharding_key must be a string, got {type(key).__name__}")
    return key


def _gather(futures: list[Future]) -> list[SendResult]:
    results: list[SendResult] = []
    first: BaseException | None = None
    for f in futures:
        try:
            results.append(f.result())
        except BaseException as exc:
            if first is None:
                first = exc
    if first is not None:
        raise first
    return results


__all__ = ["Producer", "ProducerStats", "SendResult", "SendStatus", "sharding_queue_index"]
