"""The sink against a real Apache RocketMQ cluster, when one is named.

    ROCKETMQ_NAMESRV_ADDR=127.0.0.1:9876 [ROCKETMQ_TEST_TOPIC=SparkRocketMQSinkTest] \\
        .venv/bin/pytest tests/spark/test_sink_real_cluster.py

The topic must exist, or the brokers must have autoCreateTopicEnable=true. What arrived is checked
through the delivery reports (every row SEND_OK); a consumer of the cluster can compare bodies
("real-<path>-<n>") and ids.
"""

from __future__ import annotations

import json
import os

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink

ADDR = os.environ.get("ROCKETMQ_NAMESRV_ADDR")
TOPIC = os.environ.get("ROCKETMQ_TEST_TOPIC", "SparkRocketMQSinkTest")
ROWS = 5000

pytestmark = pytest.mark.skipif(
    not ADDR, reason="set ROCKETMQ_NAMESRV_ADDR=host:port to run the sink against a real RocketMQ cluster"
)


def frame(spark, path: str):
    return spark.range(0, ROWS, numPartitions=4).select(
        F.concat(F.lit(f"real-{path}-"), F.col("id").cast("string")).alias("body"),
        F.lit(path).alias("tags"),
        F.concat(F.lit("k-"), F.col("id").cast("string")).alias("keys"),
        F.create_map(F.lit("row"), F.col("id").cast("string")).alias("properties"),
    )


def test_foreach_batch_sink_delivers_every_row(spark) -> None:
    sink = RocketMQSink(namesrv_addr=ADDR, topic=TOPIC, group="spark_rocketmq_sink_test")
    report = sink(frame(spark, "foreachbatch"), 0)
    assert (report.rows, report.messages, report.failed_rows, report.invalid_rows) == (ROWS, ROWS, 0, 0)
    assert report.topics == {TOPIC: ROWS}


def test_format_rocketmq_delivers_every_row(spark, tmp_path) -> None:
    (
        frame(spark, "format")
        .write.format("rocketmq")
        .option("namesrvAddr", ADDR)
        .option("topic", TOPIC)
        .option("producerGroup", "spark_rocketmq_sink_test")
        .option("reportDir", str(tmp_path))
        .mode("append")
        .save()
    )
    (entry,) = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert (entry["messages"], entry["state"]) == (ROWS, "committed")
