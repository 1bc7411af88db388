"""RocketMQ 5 timer messages and recall against the real brokers of the kit under test.

On 5.3.3: a timer message is stored in its topic only once due (the broker's precision is 1 s: it
may come up to 1 s before the time asked, never earlier), from the producer and from both sink paths,
and recall cancels one. On 4.9.8: the same sends are refused before anything is written, naming the
broker and its version, and nothing is stored. What is stored is read back with the Java consumer
(kit.dump).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import Message, Producer, RocketMQSink
from spark_rocketmq.errors import BrokerError, BrokerVersionError, ClusterConfigError, DeliveryError

from .conftest import FAST_CHECKS_AND_RECALL, REFUSING
from .readback import assert_each_body_once

pytestmark = pytest.mark.realcluster

#: The broker's timer precision (timerPrecisionMs): it floors a delivery time to it.
PRECISION_MS = 1000
#: How far ahead the sink tests' rows are due: beyond the time Spark takes to send them on a busy machine (a
#: row sent after its time is stored at once, which check_arrival allows).
SINK_LEAD_S = 10


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ids(messages: list[dict]) -> set[str]:
    return {m["uniq"] for m in messages}


@pytest.fixture
def producer(real_addr: str) -> Iterator[Producer]:
    with Producer(namesrv_addr=real_addr, group="timer_test") as p:
        yield p


def test_producer_timer_messages_arrive_when_due(kit, producer: Producer, real_topic: str) -> None:
    kit.topic(real_topic)  # on both brokers before the first message: dumps of it work at once
    start = now_ms()
    sends = [
        (Message(real_topic, b"at", deliver_time_ms=start + 10_000), start + 10_000),
        (Message(real_topic, b"sec", delay_time_sec=10), start + 10_000),
        (Message(real_topic, b"ms", delay_time_ms=11_000), start + 11_000),
    ]
    if kit.major < 5:
        for msg, _ in sends:
            with pytest.raises(BrokerVersionError, match=r"broker broker-[ab] at .* runs RocketMQ V4_9_8"):
                producer.send(msg)
        with pytest.raises(BrokerVersionError, match="V4_9_8"):
            producer.send_async(sends[0][0]).result()
        with pytest.raises(BrokerVersionError, match="V4_9_8"):
            producer.send_batch([Message(real_topic, b"plain"), sends[1][0]])
        assert [m["bodyLen"] for m in kit.dump(real_topic, at_least=1)] == [5]  # only the plain batch row
        return
    due: dict[str, int] = {}
    for msg, due_ms in sends:
        r = producer.send(msg)
        assert r.recall_handle and r.broker_version == 479
        due[r.msg_id] = due_ms
    # held in the timer wheel, not in the topic's queues yet (their max offsets: a JVM start may take seconds)
    assert kit.stored_count(real_topic) == 0
    got = kit.dump(real_topic, at_least=3, timeout=60)
    assert ids(got) == set(due)
    assert_each_body_once(got, [b"at", b"sec", b"ms"])
    for m in got:
        assert m["storeTimestamp"] >= due[m["uniq"]] - PRECISION_MS, m
        assert m["props"]["REAL_TOPIC"] == real_topic


def test_a_time_in_the_past_is_delivered_at_once_and_beyond_the_maximum_is_refused(
    kit, producer: Producer, real_topic: str
) -> None:
    if kit.major < 5:
        pytest.skip("4.x: every timer send is refused (test_producer_timer_messages_arrive_when_due)")
    kit.topic(real_topic)  # on both brokers before the first message: dumps of it work at once
    r = producer.send(Message(real_topic, b"late", deliver_time_ms=now_ms() - 60_000))
    assert r.recall_handle is None  # nothing held: nothing to recall
    assert ids(kit.dump(real_topic, at_least=1, timeout=20)) == {r.msg_id}
    with pytest.raises(BrokerError, match="timer message illegal") as info:
        producer.send(Message(real_topic, b"far", delay_time_sec=4 * 24 * 3600))
    assert info.value.code == 13  # MESSAGE_ILLEGAL: not retried


def test_recall_cancels_a_scheduled_message(kit, private_kit) -> None:
    if kit.major < 5:
        pytest.skip("recall is RocketMQ 5.3.2+")
    private = private_kit(props=FAST_CHECKS_AND_RECALL)
    topic = private.topic("TimerRecall", brokers=("a",))  # one broker, one timer wheel
    with Producer(namesrv_addr=private.namesrv_addr, group="timer_test") as p:
        recalled = p.send(Message(topic, b"recalled", delay_time_sec=6))
        kept = p.send(Message(topic, b"kept", delay_time_sec=8))
        assert p.recall(topic, recalled.recall_handle) == recalled.msg_id
    # The wheel delivers in time order: once the later one is stored, the recalled one would be too.
    got = private.dump(topic, at_least=1, timeout=60)
    assert ids(got) == {kept.msg_id}
    assert_each_body_once(got, [b"kept"])


def test_recall_refused_names_the_cause(kit, producer: Producer, real_topic: str) -> None:
    if kit.major < 5:
        pytest.skip("recall is RocketMQ 5.3.2+")
    kit.topic(real_topic)  # on both brokers before the first message: dumps of it work at once
    r = producer.send(Message(real_topic, b"x", delay_time_sec=5))
    with pytest.raises(ClusterConfigError) as refused:  # the shared kit runs recallMessageEnable=false
        producer.recall(real_topic, r.recall_handle)
    assert "(recall failed, operation is forbidden)" in str(refused.value)
    assert "Set recallMessageEnable=true in its broker.conf" in str(refused.value)


def timer_frame(spark, rows: int, lead_s: int, spread_s: int):
    """Rows with a due_at lead_s .. lead_s + spread_s seconds ahead, and every third one a delay_ms."""
    return spark.range(0, rows, numPartitions=2).select(
        F.concat(F.lit("timer-"), F.col("id").cast("string")).alias("body"),
        F.when(
            F.col("id") % 3 != 0,
            (F.unix_millis(F.current_timestamp()) + F.lit(lead_s * 1000) + (F.col("id") % spread_s) * 1000),
        ).alias("due_at"),
        F.when(F.col("id") % 3 == 0, F.lit(lead_s * 1000) + (F.col("id") % spread_s) * 1000).alias("delay_ms"),
    )


def check_arrival(got: list[dict], rows: int, sent_at: int) -> None:
    """Every row once, none before its time (a delay counts from when the sink started, at the earliest)."""
    assert len(got) == rows and len({m["uniq"] for m in got}) == rows
    for m in got:
        props = m["props"]
        delay = sent_at + int(props.get("TIMER_DELAY_MS", 0))
        due = int(props["TIMER_DELIVER_MS"]) if "TIMER_DELIVER_MS" in props else delay
        assert m["storeTimestamp"] >= due - PRECISION_MS, m


def test_foreach_batch_sink_publishes_rows_at_their_time(kit, spark, real_addr: str, real_topic: str) -> None:
    kit.topic(real_topic)  # on both brokers before the first message: dumps of it work at once
    rows = 60
    df = timer_frame(spark, rows, SINK_LEAD_S, 5).withColumnRenamed("due_at", "deliver_time")
    sink = RocketMQSink(namesrv_addr=real_addr, topic=real_topic, group="timer_sink_test")
    if kit.major < 5:
        with pytest.raises(DeliveryError, match=r"row \d+ \(a delivery time.*runs RocketMQ V4_9_8"):
            sink(df, 0)
        assert kit.dump(real_topic) == []
        return
    sent_at = now_ms()
    report = sink(df, 0)
    assert (report.rows, report.messages, report.timer_rows, report.failed_rows) == (rows, rows, rows, 0)
    got = kit.dump(real_topic, at_least=rows, timeout=90)
    assert_each_body_once(got, [f"timer-{i}" for i in range(rows)])
    check_arrival(got, rows, sent_at)
    # Held rows have recall handles; a row whose time passed before it was sent (a slow machine) is stored at
    # once and has none. A delay_ms row is always held: its delay counts from when the broker stores it.
    assert set(report.recall_handles) <= ids(got)
    assert {m["uniq"] for m in got if "TIMER_DELAY_MS" in m["props"]} <= set(report.recall_handles)
    assert min(m["storeTimestamp"] for m in got) >= sent_at + SINK_LEAD_S * 1000 - PRECISION_MS


def test_format_rocketmq_publishes_rows_at_their_time(kit, spark, real_addr: str, real_topic: str, tmp_path) -> None:
    kit.topic(real_topic)  # on both brokers before the first message: dumps of it work at once
    rows = 40
    df = timer_frame(spark, rows, SINK_LEAD_S, 4).withColumnRenamed("due_at", "deliver_time")
    sent_at = now_ms()
    writer = (
        df.write.format("rocketmq")
        .option("namesrvAddr", real_addr)
        .option("topic", real_topic)
        .option("producerGroup", "timer_sink_test")
        .option("reportDir", str(tmp_path))
        .mode("append")
    )
    if kit.major < 5:
        with pytest.raises(Exception, match="V4_9_8"):
            writer.save()
        assert kit.dump(real_topic) == []
        return
    writer.save()
    (entry,) = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert (entry["messages"], entry["timer_rows"], entry["state"]) == (rows, rows, "committed")
    got = kit.dump(real_topic, at_least=rows, timeout=90)
    assert_each_body_once(got, [f"timer-{i}" for i in range(rows)])
    check_arrival(got, rows, sent_at)


def test_a_broker_with_its_timer_wheel_off_refuses_naming_itself(kit, private_kit) -> None:
    if kit.major < 5:
        pytest.skip("the timer wheel is RocketMQ 5.x")
    private = private_kit(brokers=("a",), props=REFUSING)  # its timer wheel off
    topic = private.topic("TimerWheelOff")
    config = private.admin("getBrokerConfig", "-b", private.broker_addr("a"))
    assert re.search(r"timerWheelEnable\s+=\s+false", config), "the private broker's wheel is not off"
    with Producer(namesrv_addr=private.namesrv_addr, group="timer_test", retry_times_when_send_failed=2) as p:
        with pytest.raises(BrokerVersionError, match="accurate timer message is not enabled") as info:
            p.send(Message(topic, b"x", delay_time_sec=30))
        assert "broker broker-a at" in str(info.value) and "runs RocketMQ V5_3_3 with its timer wheel off" in str(
            info.value
        )
        assert p.stats().requests == 1  # not retried on another broker, not resent
    assert private.dump(topic) == []
