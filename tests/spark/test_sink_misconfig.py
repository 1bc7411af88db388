"""A misconfigured cluster fails the first batch in seconds, with an error naming each address, what it
said and the fix, on both sink paths; nothing is resent and every row is counted as not delivered."""

from __future__ import annotations

import json
import time

import pytest
from conftest import closed_port
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink
from spark_rocketmq.errors import ClusterConfigDeliveryError, ClusterConfigError, DeliveryError

pytestmark = pytest.mark.spark

#: What "in seconds" means here for a task, from its first send to its error: far below delivery_timeout_ms
#: (120 s by default). The driver's whole call adds Spark's scheduling, seconds more on a loaded machine.
FAST_S = 10.0


@pytest.fixture(autouse=True)
def _warm(spark) -> None:
    """Start Spark's Python workers first: a fresh session's first Python job alone takes seconds."""
    spark.range(0, 2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").collect()


def _rows(spark, n: int = 1000, partitions: int = 2):
    return spark.range(0, n, numPartitions=partitions).select(F.col("id").cast("string").alias("body"))


def test_nothing_on_the_namesrv_port_fails_the_first_batch_in_seconds(spark) -> None:
    dead = f"127.0.0.1:{closed_port()}"
    sink = RocketMQSink(namesrv_addr=dead, topic="T", group="misconfig")  # default delivery_timeout_ms
    started = time.monotonic()
    with pytest.raises(ClusterConfigDeliveryError) as info:
        sink(_rows(spark), 0)
    took = time.monotonic() - started
    assert info.value.report.slowest_task_seconds < FAST_S and took < 60, took  # far from delivery_timeout_ms
    text = str(info.value)
    assert text.startswith("batch 0: 1000 of 1000 rows were not delivered: no NameServer of namesrv_addr=")
    assert f"{dead}: [Errno 111] Connection refused" in text
    assert isinstance(info.value, DeliveryError) and isinstance(info.value, ClusterConfigError)
    report = info.value.report
    assert (report.failed_rows, report.messages, report.resends) == (1000, 0, 0)
    assert report.failed_topics == {"T": 1000}


def test_brokers_advertised_where_nothing_listens_fail_the_first_batch_in_seconds(spark, advertise_dead_broker) -> None:
    cluster, dead = advertise_dead_broker("Ghost")
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic="Ghost", group="misconfig")
    started = time.monotonic()
    with pytest.raises(ClusterConfigDeliveryError) as info:
        sink(_rows(spark), 0)
    assert info.value.report.slowest_task_seconds < FAST_S and time.monotonic() - started < 60
    text = str(info.value)
    assert f"broker-x at {dead} (the address the NameServer advertises): [Errno 111] Connection refused" in text
    assert "brokerIP1" in text
    assert (info.value.report.failed_rows, info.value.report.resends) == (1000, 0)


def test_format_rocketmq_fails_a_first_batch_to_a_dead_namesrv_in_seconds(spark, tmp_path) -> None:
    dead = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        (
            _rows(spark)
            .write.format("rocketmq")
            .option("namesrvAddr", dead)
            .option("topic", "T")
            .option("reportDir", str(tmp_path))
            .mode("append")
            .save()
        )
    assert time.monotonic() - started < 60  # far from delivery_timeout_ms (Spark's scheduling included)
    assert "ClusterConfigDeliveryError" in str(info.value)
    assert f"{dead}: [Errno 111] Connection refused" in str(info.value)
    entries = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert [e["state"] for e in entries] == ["failed", "aborted"]  # commit raised, then Spark aborted the write
    entry = entries[0]
    assert (entry["failed_rows"], entry["resends"]) == (1000, 0)
    assert entry["slowest_task_seconds"] < FAST_S
