"""Timer rows (deliver_time, delay_ms) through both sink paths against the local brokers, in 5.3.3 mode
(held until due by the brokers' injected clock) and in the default 4.9.8 mode (refused, nothing stored)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink
from spark_rocketmq.errors import DeliveryError, InvalidRowError
from spark_rocketmq.local.timer import TimerConfig

pytestmark = pytest.mark.spark

T0 = 1_800_000_000_000
ROWS = 40


class Clock:
    now = T0

    def __call__(self) -> int:
        return self.now


def timer_rows(spark, rows: int = ROWS):
    """Even ids: due_at T0 + 2..5 s (epoch ms); odd ids: delay_ms 3 s."""
    return spark.range(0, rows, numPartitions=2).select(
        F.concat(F.lit("t-"), F.col("id").cast("string")).alias("body"),
        F.when(F.col("id") % 2 == 0, F.lit(T0 + 2000) + (F.col("id") % 4) * 1000).alias("due_at"),
        F.when(F.col("id") % 2 == 1, F.lit(3000)).alias("delay_ms"),
    )


def five(new_cluster, clock: Clock):
    cluster = new_cluster(rocketmq_version="5.3.3", clock_ms=clock, timer=TimerConfig(recall_message_enable=True))
    cluster.create_topic("Due", queues=2)
    return cluster


def deliver_at(cluster, clock: Clock, now_ms: int) -> None:
    clock.now = now_ms
    for broker in cluster.brokers.values():
        broker.timer.deliver_due()


def test_foreach_batch_rows_are_held_until_their_time(spark, new_cluster) -> None:
    clock = Clock()
    cluster = five(new_cluster, clock)
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic="Due", group="timer-rows")
    report = sink(timer_rows(spark).withColumnRenamed("due_at", "deliver_time"), 0)
    assert (report.rows, report.messages, report.timer_rows, report.failed_rows) == (ROWS, ROWS, ROWS, 0)
    assert len(report.recall_handles) == ROWS and "40 timer rows (40 recall handles)" in report.line()
    assert cluster.messages("Due") == []
    # A time on a second's boundary is floored one step (T0 + 2 s -> T0 + 1 s): ids 0, 4, ... (due T0 + 2 s)
    # and the odd ids (3 s after the broker's T0) by T0 + 2.999 s, ids 2, 6, ... (T0 + 4 s) not yet.
    deliver_at(cluster, clock, T0 + 2_999)
    first = cluster.messages("Due")
    assert sorted(m.body for m in first) == sorted(f"t-{i}".encode() for i in range(ROWS) if i % 4 != 2)
    deliver_at(cluster, clock, T0 + 10_000)
    got = cluster.messages("Due")
    assert sorted(m.body for m in got) == sorted(f"t-{i}".encode() for i in range(ROWS))
    assert {m.properties["UNIQ_KEY"] for m in got} == set(report.recall_handles)
    for m in got:
        assert int(m.properties["TIMER_OUT_MS"]) <= m.store_timestamp


def test_the_report_s_recall_handles_cancel_rows(spark, new_cluster) -> None:
    from spark_rocketmq import Producer

    clock = Clock()
    cluster = five(new_cluster, clock)
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic="Due", group="timer-rows")
    report = sink(timer_rows(spark, 6).withColumnRenamed("due_at", "deliver_time"), 0)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="canceller") as p:
        for handle in report.recall_handles.values():
            p.recall("Due", handle)
    deliver_at(cluster, clock, T0 + 10_000)
    assert cluster.messages("Due") == []


def test_format_rocketmq_timer_rows(spark, new_cluster, tmp_path) -> None:
    clock = Clock()
    cluster = five(new_cluster, clock)
    (
        timer_rows(spark)
        .withColumn("due_at", F.timestamp_millis("due_at"))  # a timestamp column works as epoch ms do
        .withColumnRenamed("due_at", "deliver_time")
        .write.format("rocketmq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", "Due")
        .option("reportDir", str(tmp_path))
        .mode("append")
        .save()
    )
    (entry,) = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert (entry["messages"], entry["timer_rows"], len(entry["recall_handles"])) == (ROWS, ROWS, ROWS)
    assert cluster.messages("Due") == []
    deliver_at(cluster, clock, T0 + 10_000)
    assert len(cluster.messages("Due")) == ROWS


def test_a_4_9_8_cluster_refuses_timer_rows_naming_row_broker_and_version(spark, new_cluster) -> None:
    cluster = new_cluster()
    cluster.create_topic("Due", queues=2)
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic="Due", group="timer-rows")
    df = timer_rows(spark).withColumnRenamed("due_at", "deliver_time")
    with pytest.raises(DeliveryError) as info:
        sink(df, 0)
    text = str(info.value)
    assert f"{ROWS} of {ROWS} rows were not delivered" in text
    assert "row " in text and "(a delivery time, column deliver_time)" in text
    assert "broker broker-" in text and "runs RocketMQ V4_9_8" in text and "not resent" in text
    assert cluster.messages("Due") == []


def test_a_row_with_a_level_and_a_time_is_invalid(spark, new_cluster) -> None:
    cluster = new_cluster(rocketmq_version="5.3.3")
    df = spark.createDataFrame([("a", 3, 1000), ("b", None, 2000)], "body string, delay_level int, delay_ms long")
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic="Due", group="timer-rows")
    with pytest.raises(InvalidRowError, match=r"row 0: column delay_level and delay_ms: more than one of"):
        sink(df, 0)


def test_a_time_beyond_the_brokers_maximum_fails_the_batch_naming_the_row(spark, new_cluster) -> None:
    clock = Clock()
    cluster = new_cluster(rocketmq_version="5.3.3", clock_ms=clock, timer=TimerConfig(timer_max_delay_sec=60))
    cluster.create_topic("Due", queues=2)
    df = spark.createDataFrame([("soon", T0 + 30_000), ("too-far", T0 + 120_000)], "body string, deliver_time long")
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic="Due", group="timer-rows")
    with pytest.raises(DeliveryError) as info:
        sink(df.coalesce(1), 0)
    text = str(info.value)
    assert "1 of 2 rows were not delivered" in text
    assert "partition 0 row 1 (a delivery time, column deliver_time)" in text
    assert "timer message illegal" in text and "not resent" in text
    deliver_at(cluster, clock, T0 + 200_000)
    assert [m.body for m in cluster.messages("Due")] == [b"soon"]
