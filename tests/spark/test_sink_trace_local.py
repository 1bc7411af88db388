"""Message trace of the sink's rows against the local cluster: one Pub record per row, under its own id."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink
from spark_rocketmq.protocol.trace import RMQ_SYS_TRACE_TOPIC, PubTrace, decode_trace_records

pytestmark = pytest.mark.spark


def test_every_row_of_a_traced_sink_has_its_pub_record(spark, cluster) -> None:
    topic = "SinkTraced"
    cluster.create_topic(topic, queues=4)
    rows = spark.range(0, 300, numPartitions=3).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).alias("body"),
        F.concat(F.lit("k-"), F.col("id").cast("string")).alias("keys"),
    )
    # producerIdleTimeoutMs=0: each task's producer is closed at its end, which writes its traces first
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic=topic,
        group="sink-traced",
        enableMsgTrace="true",
        producerIdleTimeoutMs=0,
    )
    report = sink(rows, 0)
    assert report.messages == 300
    stored = {m.uniq_key: m for m in cluster.messages(topic)}
    records = [
        r
        for m in cluster.messages(RMQ_SYS_TRACE_TOPIC)
        for r in decode_trace_records(m.decompressed_body().decode())
        if isinstance(r, PubTrace)
    ]
    by_id = {r.msg_id: r for r in records}
    assert len(records) == len(by_id) == 300 and set(by_id) == set(stored)
    for msg_id, m in stored.items():
        r = by_id[msg_id]
        assert (r.group, r.topic, r.keys, r.body_length, r.success) == (
            "sink-traced",
            topic,
            m.keys[0],
            len(m.body),
            True,
        )
        assert r.store_host == cluster.broker(m.broker_name).addr
