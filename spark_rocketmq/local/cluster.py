"""LocalCluster: NameServers and brokers on loopback, for `make run` and the tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypedDict

from ..errors import RocketMQError
from ..protocol.codes import Perm
from .broker import LocalBroker
from .namesrv import LocalNameServer
from .schedule import DEFAULT_MESSAGE_DELAY_LEVEL
from .send_queue import DEFAULT_SEND_QUEUE_CAPACITY, DEFAULT_WAIT_TIME_MILLS_IN_SEND_QUEUE
from .store import LocalMessage
from .timer import TimerConfig
from .transaction import DEFAULT_CHECK_INTERVAL_MS, DEFAULT_CHECK_MAX, DEFAULT_TIMEOUT_MS


class _BrokerOptions(TypedDict):
    """The LocalBroker keyword arguments every broker of a cluster shares."""

    cluster: str
    auto_create_topic: bool
    max_message_size: int
    register_interval_s: float
    ack_only: bool
    wait_time_mills_in_send_queue: int | None
    send_queue_capacity: int
    request_log: int
    message_delay_level: str
    transaction_check_interval_ms: int
    transaction_timeout_ms: int
    transaction_check_max: int
    rocketmq_version: str
    timer: TimerConfig | None
    clock_ms: Callable[[], int] | None
    trace_on: bool


class LocalCluster:
    """``with LocalCluster(brokers=2, namesrvs=1) as c:`` — free loopback ports unless given.

    store_dir=None keeps the stores in a temporary directory removed at stop(); a given
    store_dir is kept, and a cluster started on it again finds every message. ack_only,
    wait_time_mills_in_send_queue, send_queue_capacity, request_log, message_delay_level, the
    transaction_* settings, rocketmq_version ("4.9.8", or "5.3.3": timer messages and recall), timer,
    clock_ms and trace_on are every broker's (see LocalBroker, local/transaction.py and local/timer.py).
    """

    def __init__(
        self,
        brokers: int = 2,
        namesrvs: int = 1,
        store_dir: str | Path | None = None,
        *,
        namesrv_port: int = 0,
        broker_port: int = 0,
        cluster_name: str = "DefaultCluster",
        auto_create_topic: bool = True,
        max_message_size: int = 4 * 1024 * 1024,
        register_interval_s: float = 30.0,
        broker_expiry_s: float = 120.0,
        scan_interval_s: float = 10.0,
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
        trace_on: bool = True,
    ) -> None:
        self._tmp: str | None = None
        if store_dir is None:
            self._tmp = store_dir = tempfile.mkdtemp(prefix="rocketmq-local-")
        self.store_dir = Path(store_dir)
        self.cluster_name = cluster_name
        self._broker_opts: _BrokerOptions = {
            "cluster": cluster_name,
            "auto_create_topic": auto_create_topic,
            "max_message_size": max_message_size,
            "register_interval_s": register_interval_s,
            "ack_only": ack_only,
            "wait_time_mills_in_send_queue": wait_time_mills_in_send_queue,
            "send_queue_capacity": send_queue_capacity,
            "request_log": request_log,
            "message_delay_level": message_delay_level,
            "transaction_check_interval_ms": transaction_check_interval_ms,
            "transaction_timeout_ms": transaction_timeout_ms,
            "transaction_check_max": transaction_check_max,
            "rocketmq_version": rocketmq_version,
            "timer": timer,
            "clock_ms": clock_ms,
            "trace_on": trace_on,
        }
        self.namesrvs = [
            LocalNameServer(
                namesrv_port + i if namesrv_port else 0,
                broker_expiry_s=broker_expiry_s,
                scan_interval_s=scan_interval_s,
                name=f"namesrv-{i}",
            )
            for i in range(namesrvs)
        ]
        self._broker_port = broker_port
        self._broker_count = brokers
        self.brokers: dict[str, LocalBroker] = {}

    @property
    def namesrv_addr(self) -> str:
        return ";".join(n.addr for n in self.namesrvs)

    def start(self) -> LocalCluster:
        for ns in self.namesrvs:
            ns.start()
        for i in range(self._broker_count):
            self.add_broker(f"broker-{chr(ord('a') + i)}")
        return self

    def add_broker(self, name: str, port: int | None = None) -> LocalBroker:
        """A new broker joins the cluster and registers with every NameServer."""
        if name in self.brokers:
            raise RocketMQError(f"broker {name!r} already exists in this cluster")
        if port is None:
            port = self._broker_port + 10 * len(self.brokers) if self._broker_port else 0
        broker = LocalBroker(
            name,
            [n.addr for n in self.namesrvs],
            self.store_dir / name,
            port=port,
            **self._broker_opts,
        )
        self.brokers[name] = broker
        return broker.start()

    def add_slave(self, name: str, broker_id: int = 1) -> LocalBroker:
        """A slave of brokerName ``name`` (its own store, no replication): routes list it beside the master,
        under ``broker_id``, and give its queues to the master only, so a producer never sends to it."""
        key = f"{name}-s{broker_id}"
        if key in self.brokers:
            raise RocketMQError(f"broker {name!r} already has a slave {broker_id}")
        slave = LocalBroker(
            name, [n.addr for n in self.namesrvs], self.store_dir / key, broker_id=broker_id, **self._broker_opts
        )
        self.brokers[key] = slave
        slave.start()
        for conf in self.broker(name).topic_configs():  # as a slave syncs its master's topics
            slave.create_topic(conf.topic_name, queues=conf.write_queue_nums, perm=conf.perm)
        return slave

    def fail_over(self, name: str) -> LocalBroker:
        """The master of brokerName ``name`` is gone and a replica takes over under the same name with another
        address, as after a DLedger election or the controller's promotion of a slave: the old broker stops
        (its connections drop, it leaves the NameServers' routes), and a new one starts on another free port
        over the same store (the replica held every message) and registers as the brokerName's master."""
        self.broker(name).stop()
        del self.brokers[name]
        return self.add_broker(name, port=0)

    def broker(self, name: str) -> LocalBroker:
        try:
            return self.brokers[name]
        except KeyError:
            raise RocketMQError(f"no broker {name!r}; brokers are {sorted(self.brokers)}") from None

    def namesrv(self, index: int) -> LocalNameServer:
        return self.namesrvs[index]

    def create_topic(
        self, topic: str, queues: int = 4, brokers: list[str] | None = None, perm: int = Perm.READ_WRITE
    ) -> None:
        """Create (or update) a topic on the brokers (all by default); it reaches the NameServers at once."""
        for name in brokers or list(self.brokers):
            self.broker(name).create_topic(topic, queues=queues, perm=perm)

    def delete_topic(self, topic: str, brokers: list[str] | None = None) -> None:
        """Remove the topic from the brokers (all by default); it leaves their routes at once."""
        for name in brokers or list(self.brokers):
            self.broker(name).delete_topic(topic)

    def messages(self, topic: str) -> list[LocalMessage]:
        """Every stored message of the topic, ordered by (broker, queue, queue offset)."""
        out: list[LocalMessage] = []
        for name in sorted(self.brokers):
            b = self.brokers[name]
            if b.running:
                out.extend(b.messages(topic))
        out.sort(key=lambda m: (m.broker_name, m.queue_id, m.queue_offset))
        return out

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop()
        for ns in self.namesrvs:
            ns.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
