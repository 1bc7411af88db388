"""Replicated brokers: a streaming query through the death of a master that the cluster replaces.

A DLedger group (broker-d: d0, d1, d2) elects a new leader when its leader dies; RocketMQ 5's controller
(broker-e: e0, e1) promotes the slave. Either way the brokerName gets a master with ANOTHER address, and
until it registers, sends to broker-d (or broker-e) fail. The topic lives on that brokerName alone, so
the stream has nowhere else to go: the longest micro-batch after the kill is the sink's stall, which the
test prints beside the kit's own failover time (the route naming a new master). Both delivery modes:
at_least_once (every row stored, copies under one UNIQ_KEY) and exactly_once (every row once; halves
stored on the dead leader are replicated, and the new one checks them back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq import Message, Producer, RocketMQSink
from spark_rocketmq.client.namesrv import NameServerClient
from spark_rocketmq.client.remoting import RemotingClient
from spark_rocketmq.errors import RocketMQError
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand

from .conftest import FAST_CHECKS_AND_RECALL, MEASURED, ONCE, fresh_topic_name
from .kit import BROKER_NAMES, Kit
from .readback import assert_each_body_once, assert_each_row_delivered, sha256
from .test_sink import stream_through, write_json_files

FILES, ROWS_PER_FILE = 8, 500
KILL_AT = 2  # the master is killed as micro-batch 2 starts

#: RequestCode.GET_ALL_TOPIC_CONFIG: a broker's topic configs (mqadmin's, not the client's).
GET_ALL_TOPIC_CONFIG = 21

TOPOLOGIES = {"dledger": ("d0", "d1", "d2"), "controller": ("e0", "e1")}


def _master_addr(kit: Kit, topic: str, broker_name: str) -> str | None:
    """The master (brokerId 0) of ``broker_name`` in the NameServer's route of ``topic``, or None."""
    client = RemotingClient(connect_timeout_ms=5000)
    try:
        route = NameServerClient(client, [kit.namesrv_addr], 5000).get_route(topic)
    except RocketMQError:
        return None
    finally:
        client.close()
    return None if route is None else route.broker_addr(broker_name)


def _has_topic(kit: Kit, broker: str, topic: str) -> bool:
    """Whether ``broker``'s topic configs (GET_ALL_TOPIC_CONFIG) have ``topic``."""
    client = RemotingClient(connect_timeout_ms=5000)
    try:
        answer = client.invoke_async(kit.broker_addr(broker), RemotingCommand(GET_ALL_TOPIC_CONFIG), 5000).result(10)
    finally:
        client.close()
    return answer.code == ResponseCode.SUCCESS and f'"{topic}"'.encode() in bytes(answer.body)


#: How long a replicated brokerName may take to take a first write, and a micro-batch to be delivered: on a
#: loaded machine (the whole tier beside it) a DLedger group that just started can miss heartbeats and elect
#: again on its own, and its new leader registers once its followers acknowledged its log (minutes, seen
#: once in CI: every node answered SYSTEM_BUSY as a follower for the 120 s of the default delivery timeout).
#: The tests are about the master the kill removes, so they wait out such an election rather than fail on it.
SETTLE_S = 300


def await_writable(kit: Kit, topic: str) -> None:
    """Wait until a send to ``topic`` (a topic of the replicated brokerName alone) is stored: the group has a
    master that takes writes. Fails naming what the last send got after SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    with Producer(namesrv_addr=kit.namesrv_addr, group="spark_rocketmq_replication_probe") as producer:
        while True:
            try:
                producer.send(Message(topic, b"probe"))
                return
            except RocketMQError as err:
                if time.monotonic() > deadline:
                    failed = f"no master of {topic}'s brokerName took a write in {SETTLE_S} s: {err}"
                    raise AssertionError(failed) from err
                time.sleep(1.0)  # between attempts: an election takes seconds


class FailoverClock:
    """Kills the master and times, from the kill, when the NameServer names another master (polled every
    100 ms on a thread of its own, as the kits' READMEs measured it)."""

    def __init__(self, kit: Kit, processes: tuple[str, ...], topic: str, broker_name: str) -> None:
        self.kit, self.processes, self.topic, self.broker_name = kit, processes, topic, broker_name
        self.master = ""
        self.killed_at = 0.0
        self.new_master_after: float | None = None
        self._watch = threading.Thread(target=self._poll, daemon=True)

    def kill(self) -> None:
        """Kill the process the route names master now (a DLedger group may have moved its leadership)."""
        deadline = time.monotonic() + 30
        while (old := _master_addr(self.kit, self.topic, self.broker_name)) is None and time.monotonic() < deadline:
            time.sleep(0.1)  # a NameServer on a loaded machine may not answer at once
        self._old = old
        (self.master,) = [p for p in self.processes if self.kit.broker_addr(p) == old]
        self.killed_at = time.monotonic()
        self.kit.kill(self.master)
        self._watch.start()

    def _poll(self) -> None:
        while time.monotonic() - self.killed_at < 120:
            addr = _master_addr(self.kit, self.topic, self.broker_name)
            if addr is not None and addr != self._old:
                self.new_master_after = time.monotonic() - self.killed_at
                return
            time.sleep(0.1)  # the kits' READMEs poll the NameServer every 100 ms too

    def join(self) -> None:
        self._watch.join(timeout=130)


#: A replicated cluster takes 15-50 s to start, a stream of micro-batches a minute or two on a loaded machine.
pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize(
    "topology",
    # DLedger runs on both versions: its two cases share the tier run's kits (CI time; the controller is 5.x's)
    [pytest.param(t, marks=getattr(pytest.mark, ONCE)) if t == "dledger" else t for t in sorted(TOPOLOGIES)],
)
def test_a_master_killed_mid_stream(
    spark: Any, kit: Kit, make_kit: Callable[..., Kit], tmp_path: Path, topology: str, guarantee: str
) -> None:
    processes = TOPOLOGIES[topology]
    if not kit.has_processes(*processes):
        pytest.skip(f"the RocketMQ {kit.version} kit has no {topology} topology ({', '.join(processes)})")
    cluster = make_kit(brokers=processes, props=FAST_CHECKS_AND_RECALL)
    broker_name = BROKER_NAMES[processes[0]]
    topic = fresh_topic_name(f"{topology}_{guarantee}")
    cluster.rmq("topic", topic, "4")  # on the brokerName's master (its slaves and followers sync it)
    probe = fresh_topic_name(f"{topology}_probe")
    cluster.rmq("topic", probe, "1")
    await_writable(cluster, probe)  # not the stream's topic: the read-back asserts nothing else is stored there
    names = write_json_files(tmp_path / "in", files=FILES, rows_per_file=ROWS_PER_FILE)
    options: dict[str, Any] = {"delivery_guarantee": guarantee, "delivery_timeout_ms": SETTLE_S * 1000}
    if guarantee == "exactly_once":
        options["transaction_log_dir"] = str(tmp_path / "txlog")
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic=topic, group=f"spark_rocketmq_{topology}", **options)
    clock = FailoverClock(cluster, processes, topic, broker_name)
    took: dict[int, float] = {}

    def publish(df: Any, batch_id: int) -> None:
        if batch_id == KILL_AT:
            clock.kill()
        started = time.monotonic()
        sink(df, batch_id)
        took[batch_id] = time.monotonic() - (clock.killed_at if batch_id == KILL_AT else started)

    stream_through(spark, tmp_path, publish, sink)
    clock.join()
    stall = max(t for b, t in took.items() if b >= KILL_AT)
    elected = "no" if clock.new_master_after is None else f"{clock.new_master_after:.1f} s"
    MEASURED.append(
        f"{topology} {guarantee} on RocketMQ {kit.version}: killed {clock.master}; the NameServer named a new "
        f"master of {broker_name}: {elected} after the kill; longest micro-batch from the kill: "
        f"{stall:.1f} s; micro-batches: {', '.join(f'{b}: {t:.1f} s' for b, t in sorted(took.items()))}"
    )
    assert clock.new_master_after is not None, f"no new master of {broker_name} registered after {clock.master} died"
    assert sorted(took) == list(range(FILES))  # no batch failed and was replayed
    assert sink.totals["failed_rows"] == 0 and sink.totals["rows"] == len(names)
    stored = cluster.dump(topic, at_least=len(names), timeout=180)
    if guarantee == "exactly_once":
        assert_each_body_once(stored, names)
    else:
        assert_each_row_delivered(stored, names)


#: The micro-batches that meet broker-a without its slave (killed as the first starts), and those without its
#: master (killed as the first starts).
SLAVE_DEAD, MASTER_DEAD = range(2, 5), range(5, FILES)


# 2-3 minutes of two replicated pairs: one kit of a tier run (CI time), the 4.9.8 one, which has fewer cases
@getattr(pytest.mark, ONCE)(4)
def test_sync_master_pairs_through_the_death_of_a_slave_then_a_master(
    spark: Any, kit: Kit, make_kit: Callable[..., Kit], tmp_path: Path
) -> None:
    """Two SYNC_MASTER pairs (a + a1, b + b1), ready before the stream starts: the route names both pairs and
    each slave holds its master's commit log. Slave a1 killed as micro-batch 2 starts: broker-a stores but
    answers SLAVE_NOT_AVAILABLE (4.9.8, at once) or FLUSH_SLAVE_TIMEOUT (5.3.3 with inSyncReplicas=2, after its
    slaveTimeout of 3 s, so the sink waits 6 s for an answer): the rows are delivered and counted by status.
    Master a killed as micro-batch 5 starts: broker-a's queues have no master, the rows go to broker-b. Every
    row is stored (read back once broker-a's master is back), where the kills decide.

    The sink's fault avoidance is off: it would keep rows off broker-a after its slow answers (a slave slow to
    confirm on a loaded machine, or dead), and micro-batches 2-4 would never meet its missing slave. Requests
    of 4 KiB: a micro-batch (500 rows, ~50 KB) is a dozen requests, which the round robin spreads over all 8
    queues. Sends with both slaves up may still be answered FLUSH_SLAVE_TIMEOUT on a loaded machine: the
    statuses asserted are those the kills decide."""
    cluster = make_kit(brokers=("a", "a1", "b", "b1"), env={"RMQ_MASTER_ROLE": "SYNC_MASTER"})
    topic = cluster.topic(fresh_topic_name("sync_master"))
    names = write_json_files(tmp_path / "in", files=FILES, rows_per_file=ROWS_PER_FILE)
    probe_topic = cluster.topic(fresh_topic_name("sync_master_probe"))
    with Producer(namesrv_addr=cluster.namesrv_addr, group="spark_rocketmq_sync_master", send_msg_timeout_ms=6000) as p:
        for probe in {q.broker_name: q for q in p.fetch_publish_queues(probe_topic)}.values():
            p.send(Message(probe_topic, b"probe"), queue=probe)  # on each master: something for its slave to copy
    cluster.await_pairs(topic, {"a": "a1", "b": "b1"})
    # a 5.x master answers after its slaveTimeout (3 s), the default send_msg_timeout_ms: wait longer for it.
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic=topic,
        group="spark_rocketmq_sync_master",
        send_msg_timeout_ms=6000,
        max_request_bytes=4096,
        send_latency_fault_enable=False,
    )
    not_replicated: dict[int, dict[str, int]] = {}
    bodies: dict[int, list[str]] = {}

    def publish(df: Any, batch_id: int) -> None:
        if batch_id == SLAVE_DEAD[0]:
            cluster.kill("a1")
        elif batch_id == MASTER_DEAD[0]:
            cluster.kill("a")
        bodies[batch_id] = [r.body for r in df.select("body").collect()]
        report = sink(df, batch_id)
        not_replicated[batch_id] = dict(report.not_replicated)

    stream_through(spark, tmp_path, publish, sink)
    MEASURED.append(
        f"SYNC_MASTER pairs on RocketMQ {kit.version}: stored, not replicated, per micro-batch: {not_replicated}"
    )
    assert sorted(not_replicated) == list(range(FILES))  # no batch failed and was replayed
    assert sink.totals["failed_rows"] == 0 and sink.totals["rows"] == len(names)
    cluster.start("a")  # broker-a's master back: its rows readable again
    stored = cluster.dump(topic, at_least=len(names), timeout=180)
    assert_each_row_delivered(stored, names)
    broker_of = {m["bodySha256"]: m["broker"] for m in stored}
    on_a = {b: sum(broker_of[sha256(body)] == "broker-a" for body in rows) for b, rows in bodies.items()}
    assert not any(on_a[b] for b in MASTER_DEAD), on_a  # broker-a without a master: broker-b took every row
    # Every row broker-a stored without its slave is reported so: SLAVE_NOT_AVAILABLE once a 4.9.8 master
    # noticed its slave's connection close (a send before that waits for the slave: FLUSH_SLAVE_TIMEOUT).
    status = "SLAVE_NOT_AVAILABLE" if kit.major < 5 else "FLUSH_SLAVE_TIMEOUT"
    for b in SLAVE_DEAD:
        assert on_a[b] > 0, on_a  # the round robin met broker-a
        assert sum(not_replicated[b].values()) >= on_a[b], (on_a, not_replicated)
    assert not_replicated[SLAVE_DEAD[-1]].get(status, 0) >= on_a[SLAVE_DEAD[-1]], (on_a, not_replicated)
    if kit.major < 5:  # a 4.9.8 master answers SLAVE_NOT_AVAILABLE only without a slave: exactly broker-a's
        assert all(not_replicated[b].get(status, 0) <= on_a[b] for b in not_replicated), (on_a, not_replicated)


@getattr(pytest.mark, ONCE)(4)  # a pair of its own: one kit of a tier run, the 4.9.8 one (the 5.x one is longer)
def test_a_slave_serves_the_read_of_a_topic_whose_master_is_down(spark: Any, make_kit: Callable[..., Kit]) -> None:
    """A master-slave pair (a + a1): once the slave holds the master's commit log and the master is killed,
    the route names the slave alone, and a batch read of the topic is served by it, every message once."""
    cluster = make_kit(brokers=("a", "a1"))
    topic = cluster.topic(fresh_topic_name("slave_read"), brokers=("a",))
    bodies = [f"slave-read-{i}".encode() for i in range(200)]
    with Producer(namesrv_addr=cluster.namesrv_addr, group="spark_rocketmq_slave_read") as p:
        p.send_batch([Message(topic, body) for body in bodies])
    started = time.monotonic()
    cluster.await_pairs(topic, {"a": "a1"})
    paired = time.monotonic()
    # a slave copies its master's topics (every 10 s on 4.9.8, less often on 5.3.3); until then it refuses a pull
    # of the topic (TOPIC_NOT_EXIST), though the route names it. A 5.x slave may be given the topic at once.
    if cluster.major >= 5:
        cluster.topic(topic, brokers=("a1",))
    deadline = time.monotonic() + 60
    while not _has_topic(cluster, "a1", topic):
        assert time.monotonic() < deadline, f"slave a1 has no topic {topic} 60 s after its master had it"
        time.sleep(0.5)
    cluster.kill("a")
    deadline = time.monotonic() + 60
    while _master_addr(cluster, topic, "broker-a") is not None:  # the NameServer drops the master's address
        assert time.monotonic() < deadline, "the route still names broker-a's master 60 s after its kill"
        time.sleep(0.2)
    killed = time.monotonic()
    rows = (
        spark.read.format("rocketmq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", topic)
        .load()
        .select("body", "broker_name", "store_host")
        .collect()
    )
    MEASURED.append(
        f"slave read on RocketMQ {cluster.version}: pair ready {paired - started:.0f} s, slave with the topic and "
        f"master gone from the route {killed - paired:.0f} s, read {time.monotonic() - killed:.0f} s"
    )
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    # the messages' store host is the master that stored them; the slave served them
    assert {(r.broker_name, r.store_host) for r in rows} == {("broker-a", cluster.broker_addr("a"))}
