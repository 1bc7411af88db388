"""delivery_guarantee=exactly_once against the local brokers: each row visible once whatever fails.

The local brokers keep half messages and check them back as a 4.9.8 broker does
(spark_rocketmq/local/transaction.py), here every 200 ms after 300 ms.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink
from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.errors import ConfigError, InvalidRowError
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.local.faults import Faults
from spark_rocketmq.local.proxy import LocalProxy
from spark_rocketmq.protocol.codes import RequestCode
from spark_rocketmq.protocol.transaction import HALF_TOPIC, PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, TransactionState
from spark_rocketmq.spark import proxy_commit, transaction_listener, transaction_log
from spark_rocketmq.spark.commit import TransactionCoordinator, batch_handles
from spark_rocketmq.spark.job import WriteJob
from spark_rocketmq.spark.message_ids import batch_context
from spark_rocketmq.spark.options import SinkOptions
from spark_rocketmq.spark.pool import ProducerPool
from spark_rocketmq.spark.schema import MessageColumns
from spark_rocketmq.spark.transaction_ids import PROPERTY_SPARK_TXN
from spark_rocketmq.spark.transaction_log import BatchState, TransactionLog
from spark_rocketmq.spark.writer import PartitionWriter

pytestmark = pytest.mark.spark

TX = {"transaction_check_interval_ms": 200, "transaction_timeout_ms": 300}
#: A short commit window, so that check-backs of recorded batches are answered within seconds here.
WINDOW_MS = 1000


@pytest.fixture(autouse=True)
def no_clock_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Check-backs answered as soon as the commit window is over (in this process: the driver's producer)."""
    monkeypatch.setattr(transaction_log, "CLOCK_MARGIN_MS", 0)


@pytest.fixture
def txc(new_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    c = new_cluster(**TX)
    c.create_topic("Once", queues=4)
    return c


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def unresolved(cluster: LocalCluster) -> int:
    return sum(len(b.transactions.unresolved()) for b in cluster.brokers.values())


def sink_for(cluster: LocalCluster, log_dir: Path, **kw: Any) -> RocketMQSink:
    opts = {
        "namesrv_addr": cluster.namesrv_addr,
        "topic": "Once",
        "group": "once-writer",
        "delivery_guarantee": "exactly_once",
        "transaction_log_dir": str(log_dir),
        "transaction_commit_window_ms": WINDOW_MS,
        "id_namespace": "orders",
        **kw,
    }
    return RocketMQSink(opts)


def bodies(cluster: LocalCluster, topic: str = "Once") -> list[str]:
    return sorted(m.body.decode() for m in cluster.messages(topic))


def rows_df(spark: Any, start: int, n: int, parts: int = 2) -> Any:
    return spark.range(start, start + n, numPartitions=parts).select(F.format_string("row-%d", "id").alias("body"))


def test_only_the_driver_is_asked_check_backs(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    """The executors' producers do not join the group, so every check-back goes to the driver's: a broker
    restarted by kill -9 checks some halves back twice in one round (it lost up to 5 s of its check
    progress), and two processes asked about the two copies could both answer COMMIT."""
    sink = sink_for(txc, tmp_path / "txlog")
    try:
        assert sink(rows_df(spark, 0, 100), 1).ok
        for broker in txc.brokers.values():  # one member, the driver (with none, no check-back is asked)
            members = broker._consumer_side.producer_connections("once-writer")
            assert len(members) == 1, f"{broker.name}: {len(members)} producers of the group"
    finally:
        sink.close()


def test_each_batch_visible_once_with_at_least_once_ids(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    sink = sink_for(txc, tmp_path / "txlog")
    try:
        report = sink(rows_df(spark, 0, 300), 5, id_time_ms=1_700_000_000_000)
        again = sink(rows_df(spark, 0, 300), 5, id_time_ms=1_700_000_000_000)  # a replay of batch 5
    finally:
        sink.close()
    assert report.ok and report.transaction == "committed"
    assert (report.messages, report.committed_halves, report.left_to_check_back) == (300, 300, 0)
    assert again.transaction == "skipped" and again.messages == 0
    assert bodies(txc) == sorted(f"row-{i}" for i in range(300))
    assert unresolved(txc) == 0
    # The same rows through at_least_once, same id namespace, batch and time: the same UNIQ_KEYs.
    txc.create_topic("Plain", queues=4)
    plain = RocketMQSink(namesrv_addr=txc.namesrv_addr, topic="Plain", group="plain", id_namespace="orders")
    plain(rows_df(spark, 0, 300), 5, id_time_ms=1_700_000_000_000)
    by_body = {m.body: m.uniq_key for m in txc.messages("Plain")}
    assert {m.body: m.uniq_key for m in txc.messages("Once")} == by_body
    tlog = TransactionLog(str(tmp_path / "txlog"))
    assert tlog.state("orders", 5) is BatchState.COMMITTED


def test_stream_through_foreach_batch(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for f in range(3):
        (folder / f"part-{f}.json").write_text("".join(json.dumps({"id": f * 100 + i}) + "\n" for i in range(100)))
    sink = sink_for(txc, tmp_path / "txlog", id_namespace=None)
    reports = []

    def publish(df: Any, batch_id: int) -> None:
        reports.append(sink(df, batch_id))

    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(folder))
    query = (
        stream.select(F.col("id").cast("string").alias("body"))
        .writeStream.foreachBatch(publish)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(240)
    finally:
        query.stop()
        sink.close()
    assert query.exception() is None
    assert [r.transaction for r in reports] == ["committed"] * 3
    assert bodies(txc) == sorted(str(i) for i in range(300))
    assert unresolved(txc) == 0


def test_invalid_rows_abort_the_whole_batch(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    df = spark.createDataFrame([("a",), ("",), ("c",)], "body string").repartition(1)
    sink = sink_for(txc, tmp_path / "txlog")
    try:
        with pytest.raises(InvalidRowError, match="row 1: column body"):
            sink(df, 0)
        assert sink.last_report is not None and sink.last_report.transaction == "aborted"
    finally:
        sink.close()
    assert bodies(txc) == []
    wait_for(lambda: unresolved(txc) == 0, what="every half of the aborted batch rolled back")
    assert TransactionLog(str(tmp_path / "txlog")).state("orders", 0) is BatchState.ABORTED


def test_an_aborted_batch_replayed_publishes_once(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    sink = sink_for(txc, tmp_path / "txlog", on_invalid_row="fail")
    bad = spark.createDataFrame([("x",), (None,)], "body string").repartition(1)
    try:
        with pytest.raises(InvalidRowError):
            sink(bad, 3)
        report = sink(rows_df(spark, 0, 10), 3)
    finally:
        sink.close()
    assert report.transaction == "committed"
    assert bodies(txc) == sorted(f"row-{i}" for i in range(10))
    wait_for(lambda: unresolved(txc) == 0, what="no half left")


def test_delayed_rows_are_refused_naming_the_row(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    df = spark.createDataFrame([("a", 0), ("b", 3)], "body string, delay_level int").repartition(1)
    sink = sink_for(txc, tmp_path / "txlog")
    try:
        with pytest.raises(InvalidRowError, match="row 1: column delay_level: a delayed row cannot be published"):
            sink(df, 0)
    finally:
        sink.close()
    assert bodies(txc) == []


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="transaction_log_dir is required"):
        RocketMQSink(namesrv_addr="127.0.0.1:1", delivery_guarantee="exactly_once")
    with pytest.raises(ConfigError, match="choose 'at_least_once'"):
        RocketMQSink(namesrv_addr="127.0.0.1:1", deliveryGuarantee="twice")
    sink = RocketMQSink(namesrv_addr="127.0.0.1:1", deliveryGuarantee="Exactly-Once", transactionLogDir="/tmp/x")
    assert sink.options.exactly_once


def _write_attempt(job: WriteJob, rows: list[str], attempt: int, stop_after: int | None = None) -> Any:
    """One task attempt of partition 0, its own producer pool; ``stop_after`` rows: the attempt dies."""
    pool = ProducerPool()
    try:
        writer = PartitionWriter(job, partition=0, attempt=attempt, pool=pool)
        data = rows if stop_after is None else rows[:stop_after]
        for i in range(0, len(data), 10):
            writer.write(pa.record_batch({"body": pa.array(data[i : i + 10])}))
        if stop_after is not None:
            writer.commit()  # what it sent is stored: the attempt then dies before reporting
            return None
        return writer.commit()
    finally:
        pool.reset()


def _job(cluster: LocalCluster, log_dir: Path, run: str) -> tuple[WriteJob, SinkOptions, ProducerConfig]:
    config = ProducerConfig(namesrv_addr=cluster.namesrv_addr, group="once-writer")
    options = SinkOptions(
        topic="Once",
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(log_dir),
        transaction_commit_window_ms=WINDOW_MS,
    )
    transaction_listener.serve_group("once-writer", str(log_dir))
    return WriteJob(config, options, MessageColumns(body="body"), batch_context("q", 9), run), options, config


def test_a_retried_task_attempt_leaves_no_row_twice(txc: LocalCluster, tmp_path: Path) -> None:
    rows = [f"r{i}" for i in range(40)]
    job, options, config = _job(txc, tmp_path / "txlog", "run1")
    _write_attempt(job, rows, attempt=0, stop_after=25)  # killed mid-partition: 25 halves stored
    summary = _write_attempt(job, rows, attempt=1)  # Spark's retry: all 40 again
    coordinator = TransactionCoordinator(options, config)
    try:
        outcome = coordinator.commit("q", 9, [summary])
        assert (outcome.committed, outcome.left_to_check_back) == (40, 0)
        # The dead attempt's 25 halves are checked back and rolled back (ROLLBACK from the log).
        wait_for(lambda: unresolved(txc) == 0, what="the dead attempt's halves resolved")
    finally:
        coordinator.close()
    stored = txc.messages("Once")
    assert sorted(m.body.decode() for m in stored) == sorted(rows)
    answers: dict[str, int] = {}
    for b in txc.brokers.values():
        for k, v in b.transactions.counters.check_answers.items():
            answers[k] = answers.get(k, 0) + v
    assert answers.get("ROLLBACK") == 25 and "COMMIT" not in answers


def test_a_half_whose_answer_was_lost_is_sent_again_as_another_send(
    new_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """A broker stores a half after its connection was lost (the client never gets the answer). The
    client does not retry a half itself: the writer sends the row again as another send (SPARK_TXN
    .../2), so no two stored halves carry one UNIQ_KEY and SPARK_TXN (a check-back could not tell such
    halves apart, and both would commit); the lost one is rolled back by its check-back, and the row
    shows once."""
    cluster = new_cluster(request_log=100, **TX)
    cluster.create_topic("Once", queues=4)
    config = ProducerConfig(namesrv_addr=cluster.namesrv_addr, group="once-writer")
    options = SinkOptions(
        topic="Once",
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(tmp_path / "txlog"),
        transaction_commit_window_ms=WINDOW_MS,
    )
    transaction_listener.serve_group("once-writer", str(tmp_path / "txlog"))
    job = WriteJob(config, options, MessageColumns(body="body"), batch_context("q", 9), "run1")
    for broker in cluster.brokers.values():
        broker.inject(latency_ms=1500, times=1, then=Faults())  # the first half each broker gets: slow
    written: list[Any] = []
    writer = threading.Thread(target=lambda: written.append(_write_attempt(job, ["lost-0"], attempt=0)))
    writer.start()
    sends = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
    slow = wait_for(
        lambda: next((b for b in cluster.brokers.values() if b.received(*sends)), None), what="the first half sent"
    )
    slow.drop_connections()  # its answer is lost; the broker stores the half once the delay is over
    writer.join(timeout=30)
    (summary,) = written
    wait_for(lambda: len(list(slow.store.messages(HALF_TOPIC))) >= 1, what="the lost half stored")
    halves = [m for b in cluster.brokers.values() for m in b.store.messages(HALF_TOPIC)]
    stored = Counter((m.uniq_key, m.properties.get(PROPERTY_SPARK_TXN)) for m in halves)
    assert len(halves) == 2 and max(stored.values()) == 1, stored
    coordinator = TransactionCoordinator(options, config)
    try:
        coordinator.commit("q", 9, [summary])
        wait_for(lambda: unresolved(cluster) == 0, what="the lost half resolved")
    finally:
        coordinator.close()
    assert bodies(cluster) == ["lost-0"]


def test_driver_killed_after_recording_then_restarted(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    rows = [f"k{i}" for i in range(30)]
    job, options, config = _job(txc, tmp_path / "txlog", "run1")
    summary = _write_attempt(job, rows, attempt=0)
    # The driver records the batch, commits 10 halves, and dies before the rest and before marking.
    first = TransactionCoordinator(options, config)
    handles = batch_handles([summary])
    first.log.record("q", 9, handles, int(time.time() * 1000) + WINDOW_MS)
    for h, _ in handles[:10]:
        first.producer().end_transaction(h, TransactionState.COMMIT)
    first.close()
    assert len(txc.messages("Once")) == 10
    # The restarted driver finds the batch recorded: it does not commit again (a 4.9.8 broker would
    # publish the first 10 twice); its producer answers the brokers' check-backs of the other 20.
    restarted = RocketMQSink(
        namesrv_addr=txc.namesrv_addr,
        topic="Once",
        group="once-writer",
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(tmp_path / "txlog"),
        transaction_commit_window_ms=WINDOW_MS,
        id_namespace="q",
    )
    try:
        report = restarted(rows_df(spark, 0, 30), 9)  # Spark replays batch 9
        assert report.transaction == "recovered"
    finally:
        restarted.close()  # the query stops at once: close() waits for the check-backs committing the rest
    assert unresolved(txc) == 0
    assert sorted(m.body.decode() for m in txc.messages("Once")) == sorted(rows)
    assert TransactionLog(str(tmp_path / "txlog")).state("q", 9) is BatchState.COMMITTED


def test_format_rocketmq_batch_write_and_stream(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    from spark_rocketmq.spark.compat import supports_datasource

    if not supports_datasource():
        pytest.skip("format('rocketmq') needs PySpark 4.1+")
    txc.create_topic("OnceFormat", queues=4)
    opts = {
        "namesrvAddr": txc.namesrv_addr,
        "topic": "OnceFormat",
        "producerGroup": "once-format",
        "deliveryGuarantee": "exactly_once",
        "transactionLogDir": str(tmp_path / "txlog"),
        "reportDir": str(tmp_path / "reports"),
    }
    rows_df(spark, 0, 500, parts=3).write.format("rocketmq").options(**opts).mode("append").save()
    folder = tmp_path / "in"
    folder.mkdir()
    for f in range(2):
        (folder / f"p{f}.json").write_text("".join(json.dumps({"id": 1000 + f * 10 + i}) + "\n" for i in range(10)))
    query = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .select(F.col("id").cast("string").alias("body"))
        .writeStream.format("rocketmq")
        .options(**opts)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(240)
    finally:
        query.stop()
    assert query.exception() is None
    expected = sorted([f"row-{i}" for i in range(500)] + [str(1000 + i) for i in range(20)])
    assert bodies(txc, "OnceFormat") == expected
    reports = [json.loads(x) for x in (tmp_path / "reports" / "reports.jsonl").read_text().splitlines()]
    assert [(r["transaction"], r["committed_halves"]) for r in reports] == [
        ("committed", 500),
        ("committed", 10),
        ("committed", 10),
    ]
    assert unresolved(txc) == 0


def _batch_files(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.rglob("batch-*.json"))


def test_an_abort_after_the_record_commits_the_batch(
    txc: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark aborts a write whose commit() raised: once recorded, every recorded half still publishes."""
    rows = [f"a{i}" for i in range(40)]
    job, options, config = _job(txc, tmp_path / "txlog", "run1")
    summary = _write_attempt(job, rows, attempt=0)
    coordinator = TransactionCoordinator(options, config)
    try:
        producer = coordinator.producer()
        real_end = producer.end_transactions

        def end_then_fail(batch: Any, state: TransactionState, done: Any, **kw: Any) -> None:
            real_end(list(batch)[:10], state, done, **kw)
            raise RuntimeError("the driver failed mid-commit")

        monkeypatch.setattr(producer, "end_transactions", end_then_fail)
        with pytest.raises(RuntimeError, match="mid-commit"):
            coordinator.commit("q", 9, [summary])
        monkeypatch.setattr(producer, "end_transactions", real_end)
        outcome = coordinator.abort("q", 9, [summary], "Spark aborted the write")
        assert (outcome.transaction, outcome.rolled_back) == ("committed", 0)
    finally:
        coordinator.close()  # waits for the check-backs that publish the other 30
    assert sorted(m.body.decode() for m in txc.messages("Once")) == sorted(rows)
    assert _batch_files(tmp_path / "txlog") == ["batch-9.recorded.json"]


class _Looked:
    """A producer whose look-up (is_published) was made already."""

    def __init__(self, published: bool) -> None:
        self.published = published

    def is_published(self, topic: str, uniq_key: str, broker_addr: str, indexed_through: int | None = None) -> bool:
        return self.published


def _handle(uniq: str, host: str, port: int, offset: int) -> Any:
    from spark_rocketmq.client.transaction import TransactionHandle
    from spark_rocketmq.protocol.stored import offset_msg_id

    addr = f"{host}:{port}"
    return TransactionHandle("Once", "broker-a", addr, 0, offset, 0, uniq, offset_msg_id(host, port, offset))


def test_a_half_resent_to_another_broker_is_rolled_back(tmp_path: Path) -> None:
    """A send that timed out and was retried on broker b stored two halves with one UNIQ_KEY and
    SPARK_TXN; b's is recorded. a's copy, checked back after the window, must not commit too."""
    tlog = TransactionLog(str(tmp_path / "txlog"))
    txn = "q/9/run1/0/0/0"
    recorded = _handle("UNIQ1", "127.0.0.2", 10911, 4096)
    tlog.record("q", 9, [(recorded, txn)], commit_deadline_ms=0)
    now = 10**13
    assert tlog.answer(txn, "UNIQ1", "127.0.0.1:10911", lambda: False, now_ms=now) is TransactionState.ROLLBACK
    assert tlog.answer(txn, "UNIQ1", "127.0.0.2:10911", lambda: False, now_ms=now) is TransactionState.COMMIT


def test_a_half_retried_on_another_queue_of_its_broker_is_rolled_back(tmp_path: Path) -> None:
    """A send whose answer was lost and that was retried on another queue of the same broker stored two
    halves with one UNIQ_KEY and SPARK_TXN on that broker (seen against a real 4.9.8: both REAL_QID
    kept by every copy the broker checks back); only the recorded one commits."""
    tlog = TransactionLog(str(tmp_path / "txlog"))
    txn = "q/9/run1/0/0/0"
    tlog.record("q", 9, [(_handle("UNIQ1", "127.0.0.1", 10911, 4096), txn)], commit_deadline_ms=0)  # queue 0
    now = 10**13
    other = tlog.answer(txn, "UNIQ1", "127.0.0.1:10911", lambda: False, now_ms=now, queue_id=1)
    assert other is TransactionState.ROLLBACK
    assert (
        tlog.answer(txn, "UNIQ1", "127.0.0.1:10911", lambda: False, now_ms=now, queue_id=0) is TransactionState.COMMIT
    )


def test_two_halves_of_one_row_on_one_broker_checked_by_two_processes_publish_it_once(
    txc: LocalCluster, tmp_path: Path
) -> None:
    """The same half (one UNIQ_KEY and SPARK_TXN) stored twice by broker-a, on two queues (a retried send),
    the recorded one left to check-backs (the commit window was over). The broker checks both in one
    pass, each on another producer of the group (round robin over their connections); here each is the
    producer of another process (its own TransactionLog), and both look the row up before either answers.
    The row is published once."""
    from spark_rocketmq import Message, Producer
    from spark_rocketmq.client.transaction import TransactionCheck, TransactionHandle
    from spark_rocketmq.protocol.route import MessageQueue

    log_dir = str(tmp_path / "txlog")
    txn = "q/9/run1/0/0/1"
    both_looked = threading.Barrier(2, timeout=10)
    answered: list[str] = []

    def process_listener(producer: list[Any]) -> Callable[[TransactionCheck], TransactionState]:
        tlog = TransactionLog(log_dir)  # this process's log: its own records and memory of COMMITs

        def listener(check: TransactionCheck) -> TransactionState:
            looked = producer[0].is_published("Once", check.message.uniq_key, check.broker_addr)
            try:
                both_looked.wait()
            except threading.BrokenBarrierError:  # both halves went to one producer: asked again
                both_looked.reset()
                return TransactionState.UNKNOWN
            state = tlog.answer_check(check, _Looked(looked))
            answered.append(state.name)
            return state

        return listener

    first: list[Any] = []
    second: list[Any] = []
    config = {"namesrv_addr": txc.namesrv_addr, "group": "once-writer"}
    with (
        Producer(**config, transaction_listener=process_listener(first)) as p1,
        Producer(**config, transaction_listener=process_listener(second)) as p2,
    ):
        first.append(p1)
        second.append(p2)
        p2.fetch_publish_queues("Once")  # both producers known to the brokers before the halves are due
        row = Message("Once", b"row-1", properties={"SPARK_TXN": txn}, uniq_key="7F0000010000000000000000000000A1")
        halves: list[TransactionHandle] = [
            p1.send_half(row, queue=MessageQueue("Once", "broker-a", q), check_immunity_s=1) for q in (0, 1)
        ]
        assert {h.msg_id for h in halves} == {row.uniq_key}
        TransactionLog(log_dir).record("q", 9, [(halves[0], txn)], int(time.time() * 1000) - 1)
        wait_for(lambda: unresolved(txc) == 0, what="both halves resolved by check-backs")
    assert bodies(txc) == ["row-1"]
    # one COMMIT; every other decided answer ROLLBACK: the other half, and on a loaded machine copies of the
    # committed half checked again before its COMMIT took (2 more seen under a load average near 20)
    decided = [a for a in answered if a != "UNKNOWN"]
    assert decided.count("COMMIT") == 1 and set(decided) == {"COMMIT", "ROLLBACK"}, decided


def test_every_process_answers_by_the_drivers_clock_margin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's CLOCK_MARGIN_MS goes into the record: an executor's process, whose own margin differs,
    commits the batch's halves from the same moment. (A real 4.9.8 broker checking every 2 s drops a half
    after 15 checks, 30 s: an executor waiting for a margin of its own 30 s longer than the driver's let
    the broker drop halves the driver meant to be committed.)"""
    txn = "q/9/run1/0/0/0"
    deadline = 10**13
    monkeypatch.setattr(transaction_log, "CLOCK_MARGIN_MS", 2000)  # the driver's
    TransactionLog(str(tmp_path / "txlog")).record("q", 9, [(_handle("U1", "127.0.0.1", 10911, 4096), txn)], deadline)
    monkeypatch.setattr(transaction_log, "CLOCK_MARGIN_MS", 30_000)  # an executor's, another process
    executor = TransactionLog(str(tmp_path / "txlog"))

    def answer(now: int) -> TransactionState:
        return executor.answer(txn, "U1", "127.0.0.1:10911", lambda: False, now_ms=now, queue_id=0)

    assert answer(deadline + 1999) is TransactionState.UNKNOWN
    assert answer(deadline + 2000) is TransactionState.COMMIT


def test_copies_of_a_half_checked_back_to_back_commit_once(tmp_path: Path) -> None:
    """A 4.9.8 broker checks copies of one half; the second may come before the first COMMIT shows."""
    tlog = TransactionLog(str(tmp_path / "txlog"))
    txn = "q/9/run1/0/0/0"
    tlog.record("q", 9, [(_handle("UNIQ1", "127.0.0.1", 10911, 4096), txn)], commit_deadline_ms=0)
    now = 10**13

    def answer(published: bool) -> TransactionState:
        return tlog.answer(txn, "UNIQ1", "127.0.0.1:10911", lambda: published, now_ms=now)

    assert answer(False) is TransactionState.COMMIT
    assert answer(False) is TransactionState.UNKNOWN  # not published yet: asked again later
    assert answer(True) is TransactionState.ROLLBACK


def test_a_look_up_behind_the_brokers_index_is_answered_unknown(tmp_path: Path) -> None:
    """A loaded broker indexes the row a dead driver's COMMIT published a while after storing it: while its
    index has not reached the copy asked about, "not found" is no answer, and COMMIT would publish the row
    twice. UNKNOWN then (asked again later); COMMIT once the index has passed the copy and still has no row."""
    from spark_rocketmq.errors import IndexBehindError

    tlog = TransactionLog(str(tmp_path / "txlog"))
    txn = "q/9/run1/0/0/0"
    tlog.record("q", 9, [(_handle("UNIQ1", "127.0.0.1", 10911, 4096), txn)], commit_deadline_ms=0)

    def behind() -> bool:
        raise IndexBehindError("the broker's index reached commit-log offset 4096, not yet 9000")

    assert tlog.answer(txn, "UNIQ1", "127.0.0.1:10911", behind, now_ms=10**13) is TransactionState.UNKNOWN
    assert tlog.answer(txn, "UNIQ1", "127.0.0.1:10911", lambda: True, now_ms=10**13) is TransactionState.ROLLBACK


def test_a_copy_of_a_half_whose_commit_was_confirmed_is_rolled_back_without_a_look_up(tmp_path: Path) -> None:
    """A 4.9.8 broker copies every half still open when a check round finds it within its immunity and
    checks the copy back a round later, after the driver's COMMIT published the row. A half whose COMMIT
    its broker answered SUCCESS (the mark does not name it unconfirmed) is answered ROLLBACK from the
    log, without QUERY_MESSAGE; an unconfirmed one, or one of a batch marked without the list (recovered),
    by the look-up."""
    tlog = TransactionLog(str(tmp_path / "txlog"))
    confirmed, unconfirmed = _handle("UNIQ1", "127.0.0.1", 10911, 4096), _handle("UNIQ2", "127.0.0.1", 10911, 8192)
    txn1, txn2 = "q/9/run1/0/0/1", "q/9/run1/0/0/2"
    tlog.record("q", 9, [(confirmed, txn1), (unconfirmed, txn2)], commit_deadline_ms=0)
    now = 10**13

    def never() -> bool:
        raise AssertionError("looked up a row the log knows is published")

    # Not marked yet: the look-up decides.
    assert tlog.answer(txn1, "UNIQ1", "127.0.0.1:10911", lambda: True, now_ms=now) is TransactionState.ROLLBACK
    tlog.mark_committed("q", 9, {"halves": 2}, unconfirmed=[unconfirmed.offset_msg_id])
    assert tlog.answer(txn1, "UNIQ1", "127.0.0.1:10911", never, now_ms=now) is TransactionState.ROLLBACK
    assert tlog.answer(txn2, "UNIQ2", "127.0.0.1:10911", lambda: False, now_ms=now) is TransactionState.COMMIT
    # Another process reads the mark from the log.
    other = TransactionLog(str(tmp_path / "txlog"))
    assert other.answer(txn1, "UNIQ1", "127.0.0.1:10911", never, now_ms=now) is TransactionState.ROLLBACK
    # A recovered batch's mark does not say which were confirmed.
    tlog.record("q", 10, [(confirmed, "q/10/run1/0/0/1")], commit_deadline_ms=0)
    tlog.mark_committed("q", 10, {"recovered": True, "halves": 1})
    assert tlog.answer("q/10/run1/0/0/1", "UNIQ1", "127.0.0.1:10911", lambda: False, now_ms=now) is (
        TransactionState.COMMIT
    )


def test_a_commit_held_by_a_frozen_broker_is_not_committed_again_by_its_check_backs(tmp_path: Path) -> None:
    """The driver's COMMIT of a half is unanswered (its broker frozen, the request in its socket): until its
    answer comes the half's check-backs are answered UNKNOWN, even once check-backs may commit; answered
    SUCCESS late, ROLLBACK without a look-up; failed, the usual rule (the look-up) decides."""
    tlog = TransactionLog(str(tmp_path / "txlog"))
    held, lost = _handle("UNIQ1", "127.0.0.1", 10911, 4096), _handle("UNIQ2", "127.0.0.1", 10911, 8192)
    txn1, txn2 = "q/9/run1/0/0/1", "q/9/run1/0/0/2"
    tlog.record("q", 9, [(held, txn1), (lost, txn2)], commit_deadline_ms=0)
    tlog.mark_committed("q", 9, {"halves": 2}, unconfirmed=[held.offset_msg_id, lost.offset_msg_id])
    tlog.commits_in_flight([held.offset_msg_id, lost.offset_msg_id])
    now = 10**13

    def never() -> bool:
        raise AssertionError("looked up a row whose COMMIT is still on its way")

    assert tlog.answer(txn1, "UNIQ1", "127.0.0.1:10911", never, now_ms=now) is TransactionState.UNKNOWN
    assert tlog.answer(txn2, "UNIQ2", "127.0.0.1:10911", never, now_ms=now) is TransactionState.UNKNOWN
    tlog.commit_answered(held.offset_msg_id, None)
    tlog.commit_answered(lost.offset_msg_id, ConnectionError("closed"))
    assert tlog.answer(txn1, "UNIQ1", "127.0.0.1:10911", never, now_ms=now) is TransactionState.ROLLBACK
    assert tlog.answer(txn2, "UNIQ2", "127.0.0.1:10911", lambda: False, now_ms=now) is TransactionState.COMMIT


def test_a_broker_frozen_through_the_commit_publishes_each_row_once(
    new_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """broker-b freezes (as by SIGSTOP) after storing its halves and before the driver's COMMITs: the
    commit phase ends at its window with b's COMMITs unanswered, still held in b's socket, and b thaws
    only once check-backs may commit. b runs the held COMMITs; its check-backs of those halves are never
    answered COMMIT (that would publish the rows twice); every row shows once."""
    cluster = new_cluster(brokers=2, **TX)
    cluster.create_topic("Once", queues=4)
    rows = [f"f{i}" for i in range(200)]
    job, options, config = _job(cluster, tmp_path / "txlog", "run1")
    summary = _write_attempt(job, rows, attempt=0)
    frozen = cluster.broker("broker-b")
    on_b = sum(1 for h, _ in batch_handles([summary]) if h.broker_name == "broker-b")
    assert 0 < on_b < len(rows)
    coordinator = TransactionCoordinator(options, config)
    try:
        frozen.hang()
        outcome = coordinator.commit("q", 9, [summary])
        assert (outcome.committed, outcome.left_to_check_back) == (len(rows) - on_b, on_b)
        record = coordinator.log.recorded("q", 9)
        assert record is not None
        wait_for(lambda: time.time() * 1000 > record.checks_from_ms + 500, what="check-backs allowed to commit")
        frozen.resume()
        wait_for(lambda: len(cluster.messages("Once")) >= len(rows), what="b's held COMMITs run")
        wait_for(lambda: unresolved(cluster) == 0, what="every half resolved")
    finally:
        if frozen.hung:
            frozen.resume()
        coordinator.close()
    assert bodies(cluster) == sorted(rows)
    assert "COMMIT" not in frozen.transactions.counters.check_answers


def test_a_batch_that_cannot_be_recorded_is_aborted(
    txc: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [f"n{i}" for i in range(20)]
    job, options, config = _job(txc, tmp_path / "txlog", "run1")
    summary = _write_attempt(job, rows, attempt=0)
    coordinator = TransactionCoordinator(options, config)
    try:

        def broken(*args: Any) -> None:
            raise OSError("the log's file system is full")

        monkeypatch.setattr(coordinator.log, "record", broken)
        with pytest.raises(OSError, match="file system is full"):
            coordinator.commit("q", 9, [summary])
        assert coordinator.state("q", 9) is BatchState.ABORTED
        assert unresolved(txc) == 0  # rolled back at once, not left to checks that would answer UNKNOWN
    finally:
        coordinator.close()
    assert bodies(txc) == []


def test_the_log_keeps_few_records_in_memory(tmp_path: Path) -> None:
    tlog = TransactionLog(str(tmp_path / "txlog"))
    for batch in range(3 * transaction_log.MAX_CACHED_RECORDS):
        tlog.record("q", batch, [(_handle(f"U{batch}", "127.0.0.1", 10911, 100 + batch), "q/0/r/0/0/0")], 0)
    assert len(tlog._recorded) == transaction_log.MAX_CACHED_RECORDS
    first = tlog.recorded("q", 0)  # read back from its file
    assert first is not None and [h.msg_id for h, _ in first.handles] == ["U0"]


def test_settle_left_stops_at_its_deadline_between_look_ups(tmp_path: Path) -> None:
    """Each is_published may take the send timeout: the deadline is checked before every look-up."""
    config = ProducerConfig(namesrv_addr="127.0.0.1:1", group="once-settle")
    options = SinkOptions(topic="Once", delivery_guarantee="exactly_once", transaction_log_dir=str(tmp_path / "txlog"))
    coordinator = TransactionCoordinator(options, config)
    asked: list[str] = []

    class SlowBroker:
        closed = False

        def master_addr(self, handle: Any) -> str:
            return str(handle.broker_addr)

        def is_published(self, topic: str, uniq_key: str, broker_addr: str) -> bool:
            asked.append(uniq_key)
            time.sleep(0.3)  # a broker that answers slowly
            return False

        def close(self) -> None:
            self.closed = True

    coordinator._producer = SlowBroker()
    coordinator._left = [_handle(f"U{i}", "127.0.0.1", 10911, 100 + i) for i in range(5)]
    coordinator._left_until = time.monotonic()
    assert coordinator.settle_left(timeout_s=0.1) == 5
    assert asked == ["U0"]
    coordinator._left = []
    coordinator.close()


def test_one_group_one_log_per_driver_and_a_driver_answers_from_the_log_that_knows(
    txc: LocalCluster, tmp_path: Path
) -> None:
    config = ProducerConfig(namesrv_addr=txc.namesrv_addr, group="once-two-logs")

    def options(folder: str) -> SinkOptions:
        return SinkOptions(topic="Once", delivery_guarantee="exactly_once", transaction_log_dir=str(tmp_path / folder))

    first = TransactionCoordinator(options("one"), config)
    try:
        with pytest.raises(ConfigError, match=r"'once-two-logs' already commits .* needs a producer group of its own"):
            TransactionCoordinator(options("two"), config)
        TransactionCoordinator(options("one"), config).close()  # the same directory: fine
    finally:
        first.close()
    TransactionCoordinator(options("two"), config).close()  # the first is closed: fine
    # A driver that ran both sinks in turn answers a half from the log that recorded its batch.
    one = transaction_listener.serve_group("once-two-logs", str(tmp_path / "one"))
    transaction_listener.serve_group("once-two-logs", str(tmp_path / "two"))
    one.record("q", 4, [(_handle("UNIQ4", "127.0.0.1", 10911, 4096), "q/4/r/0/0/0")], commit_deadline_ms=0)
    assert transaction_listener._log_answering("once-two-logs", "q/4/r/0/0/0") is one


def test_halves_are_not_checked_back_within_the_commit_window(spark: Any, txc: LocalCluster, tmp_path: Path) -> None:
    """Until the commit window is over the log answers UNKNOWN: a check-back then would cost a broker a copy of
    the half and the producer an answer for nothing, so each half asks for none before (CHECK_IMMUNITY)."""
    sink = sink_for(txc, tmp_path / "txlog", transaction_commit_window_ms=7_500)
    try:
        report = sink(rows_df(spark, 0, 40), 1)
    finally:
        sink.close()
    assert report.ok and report.committed_halves == 40
    halves = txc.messages(HALF_TOPIC)
    assert len(halves) == 40
    assert {m.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS) for m in halves} == {"8"}
    assert bodies(txc) == sorted(f"row-{i}" for i in range(40))


def test_commits_follow_a_new_master_of_the_halves_broker_name(
    new_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """The master that stored the halves dies and a replica takes over under its brokerName (an election):
    the driver's COMMITs that could not be written to the dead one go to the new master, which holds the
    halves at the same offsets, within the commit window; none is left to check-backs, every row once."""
    cluster = new_cluster(brokers=1, **TX)
    cluster.create_topic("Once", queues=4)
    rows = [f"e{i}" for i in range(40)]
    job, options, config = _job(cluster, tmp_path / "txlog", "run1")
    summary = _write_attempt(job, rows, attempt=0)
    coordinator = TransactionCoordinator(options, config)
    try:
        coordinator.producer().fetch_publish_queues("Once")  # the driver knows the master that stored them
        old = cluster.broker("broker-a").addr
        assert cluster.fail_over("broker-a").addr != old
        outcome = coordinator.commit("q", 9, [summary])
        assert (outcome.committed, outcome.left_to_check_back) == (40, 0)
    finally:
        coordinator.close()
    assert sorted(m.body.decode() for m in cluster.messages("Once")) == sorted(rows)


def test_queue_id_sends_each_half_to_its_queue_in_row_order(txc: LocalCluster, tmp_path: Path) -> None:
    job, options, config = _job(txc, tmp_path / "txlog", "run1")
    job = dataclasses.replace(job, columns=MessageColumns(body="body", queue_id="queue_id"))
    pool = ProducerPool()
    try:
        writer = PartitionWriter(job, partition=0, pool=pool)
        for start in (0, 20):
            ids = range(start, start + 20)
            writer.write(pa.record_batch({"body": pa.array([f"q{i}" for i in ids]), "queue_id": [i % 8 for i in ids]}))
        summary = writer.commit()
    finally:
        pool.reset()
    coordinator = TransactionCoordinator(options, config)
    try:
        assert coordinator.commit("q", 9, [summary]).committed == 40
    finally:
        coordinator.close()
    stored = txc.messages("Once")
    queues = sorted({(m.broker_name, m.queue_id) for m in stored})
    assert len(stored) == 40 and len(queues) == 8  # 2 brokers x 4 queues
    for m in stored:
        assert queues.index((m.broker_name, m.queue_id)) == int(m.body[1:]) % 8
    for q in queues:
        in_queue = [
            int(m.body[1:]) for m in sorted(stored, key=lambda m: m.queue_offset) if (m.broker_name, m.queue_id) == q
        ]
        assert in_queue == sorted(in_queue)


def test_through_a_proxy_each_row_is_published_once_by_its_check_backs(
    spark: Any, txc: LocalCluster, tmp_path: Path, make_proxy: Callable[[LocalCluster], LocalProxy]
) -> None:
    """A 5.x Proxy drops END_TRANSACTION and refuses QUERY_MESSAGE (local/proxy.py models it;
    tests/real/test_proxy.py meets a real one): the driver records each batch and sends no COMMIT; the brokers'
    check-backs, relayed by the Proxy to the driver's producer, are answered COMMIT from the log, a copy
    checked again once its row is in its queue ROLLBACK (read with pulls through the Proxy). An aborted
    batch's halves are rolled back the same way. close() returns once every row is visible."""
    proxy = make_proxy(txc)
    proxy.set_message_type("Once", "TRANSACTION")
    sink = sink_for(txc, tmp_path / "txlog", namesrv_addr=proxy.addr, topic=None)
    bad = spark.createDataFrame([("x", "Once"), (None, "Once")], "body string, topic string").repartition(1)
    try:
        first = sink(rows_df(spark, 0, 200).withColumn("topic", F.lit("Once")), 1)
        replay = sink(rows_df(spark, 0, 200).withColumn("topic", F.lit("Once")), 1)
        with pytest.raises(InvalidRowError):
            sink(bad, 2)
        aborted = sink.last_report
        second = sink(rows_df(spark, 200, 100).withColumn("topic", F.lit("Once")), 3)
    finally:
        sink.close()
    # visible once sink.close() returned, each row once, nothing of the aborted batch
    assert bodies(txc) == sorted(f"row-{i}" for i in range(300))
    assert (first.transaction, first.committed_halves, first.left_to_check_back) == ("committed", 0, 200)
    assert first.through_proxy == proxy.addr and f"through the RocketMQ Proxy at {proxy.addr}" in first.line()
    assert replay.transaction == "skipped" and second.left_to_check_back == 100
    assert aborted is not None and (aborted.transaction, aborted.rolled_back_halves) == ("aborted", 0)
    wait_for(lambda: unresolved(txc) == 0, what="every half resolved, the aborted batch's rolled back")
    assert bodies(txc) == sorted(f"row-{i}" for i in range(300))


def test_through_a_proxy_started_again_before_the_check_backs_every_row_is_published(
    spark: Any,
    txc: LocalCluster,
    tmp_path: Path,
    make_proxy: Callable[[LocalCluster], LocalProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Proxy learns a producer group from the transactional halves sent through it: one started again after a
    batch's halves knows none, and no broker checks them back, until the driver announces its group again
    (a half of its own, rolled back by its check-back)."""
    monkeypatch.setattr(proxy_commit, "ANNOUNCE_EVERY_S", 0.5)
    proxy = make_proxy(txc)
    proxy.set_message_type("Once", "TRANSACTION")
    port = int(proxy.addr.rsplit(":", 1)[1])
    # the halves are checked back 3 s after they were sent: after the Proxy is started again
    sink = sink_for(txc, tmp_path / "txlog", namesrv_addr=proxy.addr, transaction_commit_window_ms=3000)
    again = None
    try:
        report = sink(rows_df(spark, 0, 100), 1)
        proxy.stop()
        again = LocalProxy(txc.namesrv_addr, port=port).start()
        again.set_message_type("Once", "TRANSACTION")
        assert sink._transactions().settle_left(timeout_s=60) == 0
    finally:
        sink.close()
        if again is not None:
            again.stop()
    assert (report.committed_halves, report.left_to_check_back) == (0, 100)
    assert bodies(txc) == sorted(f"row-{i}" for i in range(100))
    wait_for(lambda: unresolved(txc) == 0, what="every half resolved, the announcing ones rolled back")
    assert bodies(txc) == sorted(f"row-{i}" for i in range(100))
