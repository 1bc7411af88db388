"""A local broker: accepts and stores messages as a 4.9.8 broker does (one send thread behind a
bounded queue, send.py and send_queue.py), registers its topics (topics.py) with NameServers
(namesrv_link.py), serves enough of the consumer protocol for a standard consumer to read a topic
back (consume.py), and takes injected faults for tests, a hang (SIGSTOP) among them."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError, ProtocolError, RocketMQError
from ..protocol.codes import MQ_VERSION_V4_9_8, Perm, RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.registry import TopicConfig, register_broker_request, unregister_broker_request
from ..protocol.timer import MQ_VERSION_V5_3_3, TIMER_TOPIC, RecallHandle
from .consume import ConsumerSide
from .faults import Faults
from .namesrv_link import NamesrvLink
from .schedule import DEFAULT_MESSAGE_DELAY_LEVEL, ScheduleService, parse_delay_levels
from .send import SEND_CODES, SendProcessor
from .send_queue import (
    DEFAULT_SEND_QUEUE_CAPACITY,
    DEFAULT_WAIT_TIME_MILLS_IN_SEND_QUEUE,
    OVERLOAD_REMARK,
    SendQueue,
)
from .server import Connection, Freeze, Handler, RemotingServer
from .stamp import broker_stamp, trace_fields
from .store import LocalMessage, MessageStore, as_local
from .timer import TimerConfig, TimerService, check_recall, marker_properties
from .topics import TopicConfigManager
from .transaction import DEFAULT_CHECK_INTERVAL_MS, DEFAULT_CHECK_MAX, DEFAULT_TIMEOUT_MS, TransactionService

log = logging.getLogger(__name__)


class LocalBroker:
    """Broker `name` (brokerId 0, a master; ``broker_id`` 1 or more registers it as a slave of that brokerName,
    which the NameServers list in routes without its queues) on 127.0.0.1, storing under store_dir.

    Send requests go through one send thread fed by a bounded queue (`send_queue_capacity`), and a
    request that waited `wait_time_mills_in_send_queue` ms or more (0 or None: no limit) is answered
    SYSTEM_BUSY, as a 4.9.8 broker's BrokerFastFailure does. `ack_only=True` checks every request
    and every batch record as the store would, answers SEND_OK with real queue offsets and offset
    message ids, and writes nothing (for benchmarks of the sending side). `request_log=n` keeps
    the last n requests the broker read, as decoded (see received(); 0 keeps none). A message sent
    with a delay level is held until its level's delay (`message_delay_level`, as in
    messageDelayLevel) has passed, then delivered to its topic (local/schedule.py).

    ``rocketmq_version`` "4.9.8" (the default) or "5.3.3": the version the broker's answers carry, and
    with "5.3.3" timer messages and RECALL_MESSAGE as a 5.3.3 broker serves them (local/timer.py; ``timer``
    its settings, ``clock_ms`` the clock of the hook and the wheel). A 4.9.8 broker stores a timer
    message at once, as a real one does: the client must not send it one. ``trace_on=False`` answers
    sends TRACE_ON=false, as a broker with traceOn=false does (the client's message trace skips them).
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
        request_log: int = 0,
        message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL,
        transaction_check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
        transaction_timeout_ms: int = DEFAULT_TIMEOUT_MS,
        transaction_check_max: int = DEFAULT_CHECK_MAX,
        rocketmq_version: str = "4.9.8",
        timer: TimerConfig | None = None,
        clock_ms: Callable[[], int] | None = None,
        broker_id: int = 0,
        trace_on: bool = True,
    ) -> None:
        if rocketmq_version not in VERSIONS:
            raise ConfigError(
                f"rocketmq_version {rocketmq_version!r}: the local brokers answer as {' or '.join(VERSIONS)}"
            )
        self.name = name
        #: 0 for a master; a slave registers under its master's brokerName with its own id (1, 2, ...).
        self.broker_id = broker_id
        self.rocketmq_version = rocketmq_version
        #: The timer settings of a 5.x broker; None for a 4.9.8 one (it has no timer wheel).
        self.timer_config = (timer or TimerConfig()) if rocketmq_version != "4.9.8" else None
        self.clock_ms: Callable[[], int] = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self.cluster = cluster
        #: What this broker puts into every message it stores, and whether it takes a single message's WAIT out.
        self.stamp = broker_stamp(cluster, rocketmq_version, trace_on)
        #: MSG_REGION and TRACE_ON of its send answers (traceOn=false: the Java client traces none of them).
        self.trace_fields = trace_fields(trace_on)
        self.strips_wait = rocketmq_version.startswith("4.")
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
        #: Each delay level's delay in ms (messageDelayLevel), level 1 first.
        self.delay_levels_ms = parse_delay_levels(message_delay_level)
        self.faults = Faults()
        self.transaction_check_interval_ms = transaction_check_interval_ms
        self.transaction_timeout_ms = transaction_timeout_ms
        self.transaction_check_max = transaction_check_max
        self._server = RemotingServer(name, self._dispatch, port=port)
        self._server.version = VERSIONS[rocketmq_version]
        self._links: list[NamesrvLink] = []
        self._store: MessageStore | None = None
        self._topic_configs = TopicConfigManager(self)
        # bound once, not wrapped: the send thread asks for every request's topic, the consumer side for every pull's
        self.topic = self._topic_configs.topic
        self.topic_for_send = self._topic_configs.topic_for_send
        self._stop = threading.Event()
        self._consumer_side = ConsumerSide(self)
        self._handlers: dict[int, Handler] = {
            **self._consumer_side.handlers(),
            RequestCode.UPDATE_AND_CREATE_TOPIC: self._topic_configs.create_topic,
            RequestCode.END_TRANSACTION: self._end_transaction,
            RequestCode.QUERY_MESSAGE: self._query_message,
        }
        self._send_queue: SendQueue | None = None
        self._schedule: ScheduleService | None = None
        self._transactions: TransactionService | None = None
        self._timer: TimerService | None = None
        if self.timer_config is not None:
            self._handlers[RequestCode.RECALL_MESSAGE] = self._recall
        #: Send requests answered SEND_OK (stored, or acknowledged when ack_only).
        self.sends = 0
        self._requests: deque[RemotingCommand] = deque(maxlen=request_log)
        self._requests_lock = threading.Lock()

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
        """Set by stop() until the next start()."""
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
    def max_delay_level(self) -> int:
        return len(self.delay_levels_ms)

    @property
    def schedule(self) -> ScheduleService:
        """What holds and delivers delayed messages (a storing broker's, while it runs)."""
        if self._schedule is None:
            raise RocketMQError(f"broker {self.name} holds no delayed messages: it is stopped or ack-only")
        return self._schedule

    @property
    def transactions(self) -> TransactionService:
        """Half messages, END_TRANSACTION and check-backs (a storing broker's, while it runs)."""
        if self._transactions is None:
            raise RocketMQError(f"broker {self.name} holds no half messages: it is stopped or ack-only")
        return self._transactions

    def _end_transaction(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if self._transactions is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"broker {self.name} stores no half messages")
        return self._transactions.end_transaction(conn, cmd)

    def _query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if self._transactions is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"broker {self.name} stores nothing")
        return self._transactions.query_message(conn, cmd)

    @property
    def timer(self) -> TimerService:
        """The timer wheel of a storing 5.x broker, while it runs."""
        if self._timer is None:
            raise RocketMQError(f"broker {self.name} has no timer wheel: it is 4.9.8, stopped or ack-only")
        return self._timer

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            raise RocketMQError(f"broker {self.name} is stopped: start() it to read its store")
        return self._store

    def start(self) -> LocalBroker:
        if self.running:
            return self
        self._store = MessageStore(self.store_dir)
        self._topic_configs.load(self._store.load_topics())
        self._stop.clear()
        self._consumer_side.start(self.store_dir)
        self._server.start()
        self._send_queue = SendQueue(
            self.name,
            SendProcessor(self, ack_only=self.ack_only).process,
            self._server.freeze,
            capacity=self.send_queue_capacity,
            wait_time_mills=self.wait_time_mills_in_send_queue,
        ).start()
        if not self.ack_only:
            self._schedule = ScheduleService(
                self.name, self._store, self.delay_levels_ms, self.store_dir, self._server.freeze
            ).start()
            self._transactions = TransactionService(
                self.name,
                self._store,
                self._server.freeze,
                self._consumer_side.producer_connections,
                check_interval_ms=self.transaction_check_interval_ms,
                timeout_ms=self.transaction_timeout_ms,
                check_max=self.transaction_check_max,
            ).start()
            if self.timer_config is not None:
                self._timer = TimerService(
                    self.name, self._store, self.store_dir, self._server.freeze, self.clock_ms
                ).start()
        self._links = [NamesrvLink(a) for a in self.namesrv_addrs]
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
                link.request(unregister_broker_request(self.cluster, self.name, self.addr, self.broker_id), timeout=1.0)
            link.close()
        self._server.stop()  # also ends a hang: every held thread leaves
        self._consumer_side.stop()
        if self._send_queue is not None:
            self._send_queue.join(timeout=5.0)  # the request being processed ends before the store closes
        if self._schedule is not None:
            self._schedule.stop()
            self._schedule = None
        if self._transactions is not None:
            self._transactions.stop()
            self._transactions = None
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self._store is not None:
            self._store.close()
            self._store = None

    def _register_loop(self) -> None:
        stop = self._stop
        freeze = self._server.freeze
        while not stop.wait(self.register_interval_s) and freeze.passage():
            self.register_all()

    def register_all(self) -> None:
        """REGISTER_BROKER to every NameServer now (topic perms masked by the broker's permission);
        nothing while hung (the registration loop sends the changes after resume())."""
        if self._server.freeze.frozen:
            return
        topics, version = self._topic_configs.registration()
        for link in self._links:
            req = register_broker_request(
                cluster_name=self.cluster,
                broker_name=self.name,
                broker_addr=self.addr,
                broker_id=self.broker_id,
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
    def create_topic(
        self, topic: str, queues: int = 4, perm: int = Perm.READ_WRITE, register: bool = True, order: bool = False
    ) -> None:
        self._topic_configs.put(TopicConfig(topic, queues, queues, perm=perm, order=order), self._store)
        if register and self.running:
            self.register_all()

    def topic_configs(self) -> list[TopicConfig]:
        """The broker's topics, as it would register them."""
        return self._topic_configs.topic_configs()

    def inject(
        self,
        latency_ms: float = 0.0,
        code: int | None = None,
        times: int | None = None,
        fraction: float | None = None,
        remark: str | None = None,
        *,
        then: Faults | None = None,
    ) -> None:
        """Extra latency on every send; and/or answer the next `times` sends (or a `fraction` of
        them, or all) with ResponseCode `code`. Both happen on the send thread: a slow broker
        builds a queue, and requests waiting in it 200 ms or more are answered SYSTEM_BUSY.

        A code in STORED_NOT_OK_CODES (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE)
        stores the messages and answers with that code and the send's fields, as a broker whose
        flush or replica did not complete in time. `then` takes over once `times` sends had these
        faults, e.g. ``inject(code=FLUSH_DISK_TIMEOUT, times=1, then=Faults(code=MESSAGE_ILLEGAL))``;
        ``then=Faults()`` limits the latency to those `times` sends too (without `then` it stays)."""
        self.faults = Faults(latency_ms, code, times, fraction, remark, then)

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

    def delete_before(self, topic: str, queue_id: int, offset: int) -> int:
        """Retention: delete the queue's messages below `offset`, as a broker deletes expired commit-log files.
        GET_MIN_OFFSET answers the new min offset (kept across restarts), pulls below it OFFSET_TOO_SMALL.
        Returns the min offset."""
        return self.store.delete_before(topic, queue_id, offset)

    def messages(self, topic: str) -> list[LocalMessage]:
        return [as_local(m, self.name) for m in self.store.messages(topic)]

    def received(self, *codes: int) -> list[RemotingCommand]:
        """The logged requests (see `request_log`) with one of the request codes, all without
        codes, oldest first: what a client wrote, e.g. for byte-for-byte comparisons."""
        with self._requests_lock:
            logged = list(self._requests)
        return [cmd for cmd in logged if not codes or cmd.code in codes]

    def delete_topic(self, topic: str, register: bool = True) -> None:
        """Remove the topic's config (its stored messages stay), as DELETE_TOPIC_IN_BROKER does;
        the NameServers drop this broker from the topic's route at the next registration."""
        self._topic_configs.remove(topic, self._store)
        if register and self.running:
            self.register_all()

    # -- requests ----------------------------------------------------------------------------------
    def _dispatch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if self._requests.maxlen:
            with self._requests_lock:
                self._requests.append(cmd)
        code = cmd.code
        if code in SEND_CODES:
            queue = self._send_queue
            if queue is not None and queue.submit(conn, cmd):
                return None  # the send thread answers
            return cmd.response(ResponseCode.SYSTEM_BUSY, remark=OVERLOAD_REMARK)
        handler = self._handlers.get(code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {code} not supported")
        return handler(conn, cmd)

    def _recall(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """RecallMessageProcessor: a delete marker for the held message the handle names."""
        assert self.timer_config is not None
        region = {"MSG_REGION": "DefaultRegion"}
        topic = cmd.require("topic")
        if self.topic(topic) is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, remark=f"recall failed, the topic[{topic}] not exist", ext_fields=region
            )
        now = self.clock_ms()
        checked = check_recall(topic, cmd.require("recallHandle"), self.name, now, self.timer_config)
        if not isinstance(checked, RecallHandle):
            return cmd.response(checked.code, remark=checked.remark, ext_fields=region)
        props, _out = marker_properties(checked, cmd.field("producerGroup"), now, self.cluster)
        self.store.append_messages(
            TIMER_TOPIC,
            0,
            [(0, b"0", props)],
            sys_flag=0,
            born_timestamp=now,
            born_host=conn.peer,
            store_host=("127.0.0.1", self.port),
            reconsume_times=0,
        )
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"msgId": checked.msg_id, **region})


#: The versions the local brokers answer as, and their MQVersion codes.
VERSIONS = {"4.9.8": MQ_VERSION_V4_9_8, "5.3.3": MQ_VERSION_V5_3_3}
