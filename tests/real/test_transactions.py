"""exactly_once against a real RocketMQ kit: what the Java consumer reads back (``kit.dump``) holds every
row of every committed batch once, none of an aborted one, whatever failed in between.

Tests that wait for check-backs run on a private cluster of the kit (``private_kit``, shared by them)
whose brokers check every 2 s, so that halves left to check-backs resolve within seconds (a broker's
default is 60 s); this process's check-back answers skip the clock margin. Each of those tests has a
producer group of its own: a broker checks a half back on a producer of its group, never another test's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from spark_rocketmq import Message, Producer, RocketMQSink
from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.client.transaction import TransactionCheck
from spark_rocketmq.errors import InvalidRowError
from spark_rocketmq.protocol.transaction import HALF_TOPIC, TransactionState
from spark_rocketmq.spark import transaction_listener, transaction_log
from spark_rocketmq.spark.commit import TransactionCoordinator, batch_handles
from spark_rocketmq.spark.job import WriteJob
from spark_rocketmq.spark.message_ids import batch_context
from spark_rocketmq.spark.options import SinkOptions
from spark_rocketmq.spark.pool import ProducerPool
from spark_rocketmq.spark.schema import MessageColumns
from spark_rocketmq.spark.transaction_log import BatchState, TransactionLog
from spark_rocketmq.spark.writer import PartitionWriter

from .conftest import FAST_CHECKS_AND_RECALL, MEASURED, ONCE, fresh_topic_name, wait_for
from .readback import assert_each_body_once
from .test_security import ADMIN, stored_count

pytestmark = pytest.mark.realcluster

WINDOW_MS = 1000
GROUP = "exactly-once-real"


@pytest.fixture(autouse=True)
def no_clock_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transaction_log, "CLOCK_MARGIN_MS", 0)


@pytest.fixture
def fast_kit(private_kit: Callable[..., Any]) -> Any:
    return private_kit(props=FAST_CHECKS_AND_RECALL)


#: The check interval of FAST_CHECKS_AND_RECALL (transactionCheckInterval=2000).
CHECK_INTERVAL_S = 2.0
#: Where a broker moves a half it checked transactionCheckMax times (60 in FAST_CHECKS_AND_RECALL): dropped,
#: never published.
DISCARDED_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


def assert_every_half_ended(
    kit: Any, topic: str, brokers: tuple[str, ...] = ("a", "b"), timeout: float = 120.0
) -> None:
    """Every half stored on the kit's brokers ended (committed or rolled back) and none of ``topic``'s was
    dropped. A broker writes a copy of each open half at every check round, so its half queue stops
    growing once none is open; and it moves a half it checked transactionCheckMax times to DISCARDED_TOPIC."""
    assert not every_half_ended(kit, topic, brokers, timeout), f"a half of {topic} was checked too often and dropped"


def every_half_ended(kit: Any, topic: str, brokers: tuple[str, ...] = ("a", "b"), timeout: float = 120.0) -> list[str]:
    """Wait until no half is open on the kit's brokers (assert_every_half_ended); the UNIQ_KEYs of the
    halves of ``topic`` they dropped instead (checked transactionCheckMax times: moved to DISCARDED_TOPIC;
    the private cluster's earlier tests may have left halves of their own there)."""
    deadline = time.monotonic() + timeout
    last: tuple[int | None, ...] = ()
    still_since = time.monotonic()
    while time.monotonic() - still_since < 3 * CHECK_INTERVAL_S:
        offsets = tuple(kit.max_offset(b, HALF_TOPIC) for b in brokers)
        if offsets != last:
            last, still_since = offsets, time.monotonic()
        assert time.monotonic() < deadline, f"half queues of {brokers} still grow after {timeout} s: {last}"
        time.sleep(0.5)  # a few small requests a poll
    assert None not in last, f"a broker of {brokers} did not tell its half queue's offset: {last}"
    if not any(kit.max_offset(b, DISCARDED_TOPIC) for b in brokers):
        return []
    return [
        str(m.get("uniq")) for m in kit.dump(DISCARDED_TOPIC) if m.get("props", {}).get("REAL_TOPIC", topic) == topic
    ]


def dumped_ids(kit: Any, topic: str) -> list[str]:
    return sorted(m["uniq"] for m in kit.dump(topic))


def test_half_messages_commit_rollback_and_check_back(fast_kit: Any) -> None:
    topic = fast_kit.topic("TxProducer")
    decide = threading.Event()
    asked: list[str] = []

    def listener(check: TransactionCheck) -> TransactionState:
        asked.append(check.msg_id)
        if not decide.is_set():
            return TransactionState.UNKNOWN  # asked again at the next check
        if not check.message.body.startswith(b"late-yes"):
            return TransactionState.ROLLBACK
        # A broker checks back a copy of a half (a new one at each check, 4.9.8 and 5.x alike), also
        # after another copy or the original was committed: a listener answers from its own state.
        topic_of = check.message.properties.get("REAL_TOPIC", topic)
        published = p.is_published(topic_of, check.msg_id, check.broker_addr)
        return TransactionState.ROLLBACK if published else TransactionState.COMMIT

    with Producer(namesrv_addr=fast_kit.namesrv_addr, group=f"{GROUP}-half", transaction_listener=listener) as p:
        handles = {
            kind: [p.send_half(Message(topic, f"{kind}-{i}".encode())) for i in range(5)]
            for kind in ("yes", "no", "late-yes", "late-no")
        }
        wait_for(lambda: len(set(asked)) >= 20, what="check-backs of every half (answered UNKNOWN)")
        assert dumped_ids(fast_kit, topic) == []  # halves are invisible
        for h in handles["yes"]:
            p.end_transaction(h, TransactionState.COMMIT)
        for h in handles["no"]:
            p.end_transaction(h, TransactionState.ROLLBACK)
        decide.set()
        committed = sorted(h.msg_id for k in ("yes", "late-yes") for h in handles[k])
        wait_for(lambda: dumped_ids(fast_kit, topic) == committed, what="the committed rows, once each")
        wait_for(lambda: p.transaction_checks().rollbacks >= 5, what="the late-no halves rolled back")
        time.sleep(5)  # more check intervals: copies of committed halves are rolled back, not published
        assert dumped_ids(fast_kit, topic) == committed
    late = {h.msg_id for k in ("late-yes", "late-no") for h in handles[k]}
    assert late <= set(asked)


def _sink(kit: Any, topic: str, log_dir: Path, **kw: Any) -> RocketMQSink:
    """A sink with the default commit window (the shared kit checks back at its default pace)."""
    return RocketMQSink(
        namesrv_addr=kit.namesrv_addr,
        topic=topic,
        group=GROUP,
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(log_dir),
        id_namespace="real-orders",
        **kw,
    )


def _rows(spark: Any, n: int) -> Any:
    return spark.range(0, n, numPartitions=2).select(F.format_string("row-%d", "id").alias("body"))


def test_batches_visible_once_and_a_replay_is_skipped(spark: Any, kit: Any, real_topic: str, tmp_path: Path) -> None:
    topic = kit.topic(real_topic)
    sink = _sink(kit, topic, tmp_path / "txlog")
    try:
        first = sink(_rows(spark, 2000), 0)
        replay = sink(_rows(spark, 2000), 0)
    finally:
        sink.close()
    assert first.transaction == "committed" and replay.transaction == "skipped"
    # A COMMIT whose answer timed out (a busy machine) leaves its half to the broker's check-back (every
    # 60 s by default), which the sink's producer answers COMMIT from the log: every row shows, once.
    dumped = kit.dump(topic, at_least=2000, timeout=180)
    assert len(dumped) == 2000 and len({m["uniq"] for m in dumped}) == 2000


def _job(
    kit: Any, topic: str, log_dir: Path, group: str, batch: int = 4, credentials: dict[str, str] | None = None
) -> tuple[WriteJob, SinkOptions, ProducerConfig]:
    config = ProducerConfig(namesrv_addr=kit.namesrv_addr, group=group, **(credentials or {}))
    options = SinkOptions(
        topic=topic,
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(log_dir),
        transaction_commit_window_ms=WINDOW_MS,
    )
    transaction_listener.serve_group(group, str(log_dir))
    ctx = batch_context("real", batch)
    return WriteJob(config, options, MessageColumns(body="body"), ctx, "run1"), options, config


def _attempt(job: WriteJob, rows: list[str], attempt: int, stop_after: int | None = None) -> Any:
    pool = ProducerPool()
    try:
        writer = PartitionWriter(job, partition=0, attempt=attempt, pool=pool)
        data = rows if stop_after is None else rows[:stop_after]
        for i in range(0, len(data), 50):
            writer.write(pa.record_batch({"body": pa.array(data[i : i + 50])}))
        return writer.commit()
    finally:
        pool.reset()


class DriverDied(Exception):
    """A simulated driver's death between its COMMITs and the batch's mark."""


def _crash_and_restart(
    spark: Any,
    kit: Any,
    topic: str,
    log_dir: Path,
    batch: int,
    committed: int,
    credentials: dict[str, str] | None = None,
) -> None:
    """The driver records the batch, sends ``committed`` COMMITs and dies; a restarted sink recovers it.
    With ``credentials`` (an ACL broker, which a plain consumer may not read), the stored count is checked."""
    rows = [f"c{batch}-{i}" for i in range(300)]
    group = f"{GROUP}-crash"
    job, options, config = _job(kit, topic, log_dir, group, batch, credentials)
    summary = _attempt(job, rows, attempt=0)
    handles = batch_handles([summary])
    dead = TransactionCoordinator(options, config)
    commit_all = dead._end_all

    def commit_some_then_die(to_commit: Any, state: TransactionState, stop_at: float) -> Any:
        # the driver's own commit path (within the window, its unanswered COMMITs listed in flight), cut short
        commit_all(to_commit[:committed], state, stop_at)
        raise DriverDied

    dead._end_all = commit_some_then_die  # type: ignore[method-assign]
    try:
        with pytest.raises(DriverDied):
            dead.commit("real", batch, [summary])
    finally:
        dead.close()  # the driver dies here: the batch is recorded, not marked
    restarted = RocketMQSink(
        namesrv_addr=kit.namesrv_addr,
        topic=topic,
        group=group,
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(log_dir),
        transaction_commit_window_ms=WINDOW_MS,
        id_namespace="real",
        **(credentials or {}),
    )
    try:
        report = restarted(spark.createDataFrame([(r,) for r in rows], "body string"), batch)
        assert report.transaction == "recovered"
        if credentials:
            wait_for(lambda: stored_count(kit, topic) >= len(rows), what=f"{len(rows)} rows stored in {topic}")
        else:
            kit.dump(topic, at_least=len(rows), timeout=90)
        time.sleep(5)  # two more check intervals: nothing may arrive twice
    finally:
        restarted.close()
    if credentials:
        assert stored_count(kit, topic) == len(rows)
    else:
        dumped = kit.dump(topic)
        assert sorted(m["uniq"] for m in dumped) == sorted(h.msg_id for h, _ in handles)
    assert TransactionLog(str(log_dir)).state("real", batch) is BatchState.COMMITTED


def test_driver_killed_after_recording_then_restarted(spark: Any, fast_kit: Any, tmp_path: Path) -> None:
    """(a) killed after recording, before committing; (b) killed while committing, before marking:
    the restarted driver commits nothing again, check-backs commit the rest, every row once."""
    for batch, committed in ((1, 0), (2, 120)):
        topic = fast_kit.topic(f"TxCrash{batch}")
        _crash_and_restart(spark, fast_kit, topic, tmp_path / "txlog", batch, committed)


def test_a_recorded_batch_is_committed_by_check_backs_under_acl(
    spark: Any, kit: Any, private_kit: Callable[..., Any], tmp_path: Path
) -> None:
    """(a) on a broker that checks ACL 1.0 signatures: the check-backs that commit the dead driver's batch
    are answered after a QUERY_MESSAGE by UNIQ_KEY, which brokers verify without its _UNIQUE_KEY_QUERY
    field (signed with it, the query was refused, and every check-back answered UNKNOWN until the broker
    dropped the half)."""
    if not kit.has_acl_broker:
        pytest.skip(f"the RocketMQ {kit.version} kit has no ACL broker")
    acl = private_kit(brokers=("acl",), props=FAST_CHECKS_AND_RECALL)
    topic = fresh_topic_name("TxAcl")
    acl.admin("updateTopic", "-b", acl.broker_addr("acl"), "-t", topic, "-r", "4", "-w", "4")
    _crash_and_restart(spark, acl, topic, tmp_path / "txlog", 1, 0, credentials=ADMIN)
    # The driver's own COMMITs, signed, commit the next batch without check-backs.
    sink = _sink(acl, topic, tmp_path / "txlog-next", **ADMIN)
    try:
        report = sink(_rows(spark, 500), 2)
    finally:
        sink.close()
    assert (report.committed_halves, report.left_to_check_back) == (500, 0)
    assert stored_count(acl, topic) == 800


def test_a_task_killed_mid_partition_and_retried(fast_kit: Any, tmp_path: Path) -> None:
    """(c) the dead attempt's halves are rolled back by check-backs; the retry's rows appear once."""
    topic = fast_kit.topic("TxRetry")
    rows = [f"t{i}" for i in range(400)]
    job, options, config = _job(fast_kit, topic, tmp_path / "txlog", f"{GROUP}-retry")
    _attempt(job, rows, attempt=0, stop_after=250)
    summary = _attempt(job, rows, attempt=1)
    coordinator = TransactionCoordinator(options, config)
    try:
        outcome = coordinator.commit("real", 4, [summary])
        # A 5.x broker refuses (ILLEGAL_OPERATION) the COMMIT of a half stored longer than its check immunity
        # before (2 s here; a loaded machine sends the 400 halves slower): that half is left to a check-back.
        assert outcome.committed + outcome.left_to_check_back == 400
        # The dead attempt's 250 halves are checked back (the coordinator's producer is the group's
        # only one now) and rolled back; only halves of the retry are answered COMMIT.
        checks = coordinator.producer().transaction_checks
        wait_for(lambda: checks().rollbacks >= 250, what="the dead attempt's halves rolled back")
        assert checks().commits <= outcome.left_to_check_back
    finally:
        coordinator.close()
    dumped = fast_kit.dump(topic, at_least=400)
    assert len(dumped) == 400 and len({m["uniq"] for m in dumped}) == 400


def test_an_aborted_batch_shows_nothing(spark: Any, kit: Any, real_topic: str, tmp_path: Path) -> None:
    """(e) one invalid row aborts the batch: no row of it is ever visible."""
    topic = kit.topic(real_topic)
    df = spark.createDataFrame([(f"a{i}",) for i in range(50)] + [("",)], "body string").repartition(2)
    sink = _sink(kit, topic, tmp_path / "txlog")
    try:
        with pytest.raises(InvalidRowError, match="column body"):
            sink(df, 0)
        assert sink.last_report is not None and sink.last_report.transaction == "aborted"
    finally:
        sink.close()
    time.sleep(6)
    assert kit.dump(topic) == []


def _batch_on_a_thread(
    spark: Any, kit: Any, topic: str, name: str, log_dir: Path, rows: int, window_ms: int = WINDOW_MS
) -> tuple[RocketMQSink, threading.Thread, dict[str, Any]]:
    """An exactly_once sink of group and id namespace ``name`` (commit window ``window_ms``), and its batch 0
    of ``rows`` rows running on a thread (started): the test breaks a broker meanwhile. The thread leaves
    "report" or "error" in the dict."""
    sink = RocketMQSink(
        namesrv_addr=kit.namesrv_addr,
        topic=topic,
        group=f"{GROUP}-{name}",
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(log_dir),
        transaction_commit_window_ms=window_ms,
        id_namespace=f"real-{name}",
    )
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["report"] = sink(_rows(spark, rows), 0)
        except BaseException as exc:  # reported by the test
            outcome["error"] = exc

    batch = threading.Thread(target=run)
    batch.start()
    return sink, batch, outcome


def _await_halves_on_b(kit: Any, offset: int) -> None:
    wait_for(lambda: (kit.max_offset("b", HALF_TOPIC) or 0) >= offset, timeout=180, every=0.05,
             what="broker-b storing halves of the batch")  # fmt: skip


def _committed_report(batch: threading.Thread, outcome: dict[str, Any]) -> Any:
    """The report of the batch _batch_on_a_thread runs, once it ended: committed, no row failed."""
    batch.join(timeout=600)
    assert not batch.is_alive() and "error" not in outcome, outcome
    report = outcome["report"]
    assert report.transaction == "committed" and report.failed_rows == 0, report
    return report


#: The killed and frozen broker tests' brokers: check-backs every 2 s as FAST_CHECKS_AND_RECALL's, a half
#: dropped after 450 checks, 15 minutes as a default broker's 15 checks 60 s apart. A 5.x broker refuses a
#: producer's COMMIT of a half older than its check immunity (ILLEGAL_OPERATION, "currentTimeMillis - bornTime
#: > checkImmunityTime"): those halves are committed by check-backs, a few hundred a second at best on a loaded
#: machine, all of a broker's asked again at every round (a check each), from the record's checks_from_ms on.
#: 60 checks of 2 s did not always last that long (5.3.3; 4.9.8 with 8000 halves left to check-backs).
FAULT_TEST_CHECKS = "transactionCheckInterval=2000\ntransactionTimeOut=2000\ntransactionCheckMax=450"
#: Test (d)'s commit window, so its halves' check immunity: the driver's COMMITs of the halves sent in the
#: window's length before the commit are accepted by a 5.x broker too (with a 1 s window, 5.3.3 refused
#: 7,719 of 8,000).
KILLED_BROKER_WINDOW_MS = 30_000


# the heaviest fault tests (minutes each) share the tier run's kits; this one on 5.x, whose check immunity
# makes it the harder case there
@getattr(pytest.mark, ONCE)(5)
@pytest.mark.timeout(600)  # a batch with a 30 s commit window, a broker restarted, check-backs of 2 s rounds
def test_a_broker_killed_mid_batch(
    spark: Any,
    kit: Any,
    make_kit: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(d) broker-b is killed while the batch's halves are being sent, and started again after the batch:
    rows whose halves b never confirmed are resent to broker-a, the halves b stored are committed by
    check-backs once it is back (the driver's END_TRANSACTION could not reach it), and a half b stored
    without answering is rolled back. Every row is visible once. (A 5.x broker refuses the driver's COMMIT
    of a half sent longer than the commit window before it: on a loaded machine, some of broker-a's halves
    are committed by check-backs too.)

    Restarted after a kill -9, b has lost up to 5 s of its check progress and checks some halves back
    twice per round: the driver's producer, the group's only member, answers both copies.

    The check-backs keep a clock margin longer than the driver's wait for END_TRANSACTION answers in
    flight after its window (5 s), as the default (30 s) does: with none, a COMMIT the driver sent just
    before its window closed and a check-back's COMMIT can both reach a busy broker (seen on 4.9.8)."""
    monkeypatch.setattr(transaction_log, "CLOCK_MARGIN_MS", 6000)
    kit = make_kit(props=FAULT_TEST_CHECKS)  # this test kills a broker: a cluster of its own
    topic = kit.topic("TxBrokerKilled")
    rows = 8000
    before = kit.max_offset("b", HALF_TOPIC) or 0
    sink, batch, outcome = _batch_on_a_thread(
        spark, kit, topic, "broker-killed", tmp_path / "txlog", rows, KILLED_BROKER_WINDOW_MS
    )
    try:
        started = time.monotonic()
        _await_halves_on_b(kit, before + 200)
        kit.kill("b")
        report = _committed_report(batch, outcome)
        ended = time.monotonic() - started
        MEASURED.append(
            f"broker killed mid-batch on RocketMQ {kit.version}: batch {ended:.0f} s, "
            f"halves phase {report.seconds - report.commit_seconds:.0f} s, "
            f"committed {report.committed_halves}, left to check-backs {report.left_to_check_back}"
        )
        kit.restart("b")
        kit.dump(topic, at_least=rows, timeout=180)  # b's halves: committed by check-backs from the log
        MEASURED.append(f"  all rows readable {time.monotonic() - started:.0f} s after the batch started")
        assert_every_half_ended(kit, topic)  # and three check intervals without a copy: nothing may arrive twice
    finally:
        if batch.is_alive():
            batch.join(timeout=600)
        sink.close()
    assert_each_body_once(kit.dump(topic), [f"row-{i}" for i in range(rows)])


@pytest.mark.parametrize(
    "moment",
    # as test_a_broker_killed_mid_batch, once per tier run: the frozen commit on 4.x (a 5.x broker refuses the
    # COMMITs it held past check immunity, all left to check-backs), the frozen halves on 5.x
    [
        pytest.param("halves", marks=getattr(pytest.mark, ONCE)(5)),
        pytest.param("commit", marks=getattr(pytest.mark, ONCE)(4)),
    ],
)
@pytest.mark.timeout(600)  # a batch, a broker frozen past the commit window, 8000 halves left to check-backs
def test_a_broker_frozen_through_the_commit(
    spark: Any, make_kit: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    """broker-b is frozen (SIGSTOP) once it stored 200 halves of the batch (``halves``: the writer resends
    the rows it does not answer to broker-a) or once every half is stored, as the driver starts to commit
    (``commit``), and thawed only after check-backs may commit (the commit window and clock margin over,
    and a check round due). Its socket holds the driver's COMMITs: thawed, it runs them while its first
    check round asks about the same halves. The driver answers those UNKNOWN until its COMMITs are
    answered, so no row is published twice; every row is visible once and no half is left open or
    dropped.

    ``commit`` has test (d)'s 30 s commit window: with a 1 s one, on a loaded machine the window was over
    once the driver had recorded the batch's 8000 halves, it sent no COMMIT at all (none held by b's
    socket), and all 8000 were left to check-backs. Its brokers are test (d)'s too: those check-backs did
    not commit every half within 60 checks of 2 s on a loaded machine (CI, 4.9.8: 1,172 halves dropped)."""
    monkeypatch.setattr(transaction_log, "CLOCK_MARGIN_MS", 6000)
    kit = make_kit(props=FAULT_TEST_CHECKS)  # this test freezes a broker: a cluster of its own
    topic = kit.topic("TxBrokerFrozen")
    rows = 8000
    if moment == "commit":
        commit = TransactionCoordinator.commit

        def freeze_then_commit(self: TransactionCoordinator, *args: Any) -> Any:
            kit.freeze("b")
            return commit(self, *args)

        monkeypatch.setattr(TransactionCoordinator, "commit", freeze_then_commit)
    before = kit.max_offset("b", HALF_TOPIC) or 0
    window_ms = KILLED_BROKER_WINDOW_MS if moment == "commit" else WINDOW_MS
    sink, batch, outcome = _batch_on_a_thread(spark, kit, topic, "broker-frozen", tmp_path / "txlog", rows, window_ms)
    try:
        if moment == "halves":
            _await_halves_on_b(kit, before + 200)
            kit.freeze("b")
        report = _committed_report(batch, outcome)
        assert report.left_to_check_back > 0, report  # b's COMMITs unanswered while it was frozen
        record = TransactionLog(str(tmp_path / "txlog")).recorded("real-broker-frozen", 0)
        assert record is not None
        wait_for(lambda: time.time() * 1000 > record.checks_from_ms + 2000 * CHECK_INTERVAL_S, timeout=60,
                 every=0.2, what="check-backs allowed to commit, and a check round due")  # fmt: skip
        kit.thaw("b")
        kit.dump(topic, at_least=rows, timeout=180)
        dropped = every_half_ended(kit, topic)  # and three check intervals without a copy: nothing may arrive twice
    finally:
        kit.thaw("b")
        if batch.is_alive():
            batch.join(timeout=600)
        sink.close()
    stored = kit.dump(topic)
    assert_each_body_once(stored, [f"row-{i}" for i in range(rows)])
    published = {m["uniq"] for m in stored}
    assert set(dropped) <= published, f"halves dropped whose row is not published: {set(dropped) - published}"
    print(f"dropped halves (copies of published rows): {len(dropped)}")
