"""spark.read / spark.readStream .format("rocketmq") in local mode against the local cluster (2 brokers)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.client.producer import Producer
from spark_rocketmq.protocol.message import Message
from spark_rocketmq.spark.compat import supports_datasource

#: Reads need PySpark's Python data source readers (4.1+): on 3.5 and 4.0 none of this can run.
pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not supports_datasource(), reason='spark.read.format("rocketmq") needs PySpark 4.1+'),
]


def _topic(cluster: Any, queues: int = 4, brokers: list[str] | None = None) -> str:
    topic = f"Read{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, queues=queues, brokers=brokers)
    return topic


def _publish(cluster: Any, topic: str, n: int, *, start: int = 0, tags: list[str] | None = None) -> list[str]:
    """n messages with bodies m-<i>, keys k-<i> and k2, a user property; their UNIQ_KEYs in order."""
    config = ProducerConfig(namesrv_addr=cluster.namesrv_addr, group="reader-tests")
    ids = []
    with Producer(config) as producer:
        for i in range(start, start + n):
            message = Message(
                topic,
                f"m-{i}".encode(),
                tags=(tags[i % len(tags)] if tags else "T"),
                keys=[f"k-{i}", "k2"],
                properties={"seq": str(i)},
            )
            ids.append(producer.send(message).msg_id)
    return ids


def _read(spark: Any, cluster: Any, topic: str, **options: Any) -> Any:
    reader = spark.read.format("rocketmq").option("namesrvAddr", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_batch_read_returns_every_message_with_its_fields(spark, cluster) -> None:
    topic = _topic(cluster)
    ids = _publish(cluster, topic, 40)
    rows = _read(spark, cluster, topic).collect()
    assert len(rows) == 40
    by_body = {r.body.decode(): r for r in rows}
    assert sorted(by_body) == sorted(f"m-{i}" for i in range(40))
    stored = {m.uniq_key: m for m in cluster.messages(topic)}
    for i, msg_id in enumerate(ids):
        row = by_body[f"m-{i}"]
        m = stored[msg_id]
        assert row.msg_id == msg_id
        assert row.topic == topic
        assert (row.broker_name, row.queue_id, row.queue_offset) == (m.broker_name, m.queue_id, m.queue_offset)
        assert row.keys == [f"k-{i}", "k2"]
        assert row.tags == "T"
        assert row.properties["seq"] == str(i)
        assert row.properties["UNIQ_KEY"] == msg_id
        assert len(row.offset_msg_id) == 32
        assert row.store_timestamp.year >= 2024 and row.born_timestamp.year >= 2024
        assert row.store_host.startswith("127.0.0.1:")


def test_offsets_json_and_timestamps_bound_a_batch_read(spark, cluster) -> None:
    topic = _topic(cluster, queues=1, brokers=["broker-a"])
    _publish(cluster, topic, 10)
    broker = cluster.messages(topic)[0].broker_name
    middle = json.dumps({topic: {broker: {"0": 3}}})
    end = json.dumps({topic: {broker: {"0": 7}}})
    rows = _read(spark, cluster, topic, startingOffsets=middle, endingOffsets=end).collect()
    assert sorted(r.queue_offset for r in rows) == [3, 4, 5, 6]
    stored = sorted(cluster.messages(topic), key=lambda m: m.queue_offset)
    since = stored[5].store_timestamp
    read = {r.queue_offset for r in _read(spark, cluster, topic, startingTimestamp=str(since)).collect()}
    # every message stored at or after the time, and none before it, however many share its millisecond
    assert read == {m.queue_offset for m in stored if m.store_timestamp >= since}


def test_a_tag_expression_keeps_the_tags_it_names(spark, cluster) -> None:
    topic = _topic(cluster)
    _publish(cluster, topic, 30, tags=["TagA", "TagB", "TagC"])
    rows = _read(spark, cluster, topic, subExpression="TagA || TagC").collect()
    assert sorted(r.tags for r in rows) == ["TagA"] * 10 + ["TagC"] * 10


def test_min_partitions_splits_queue_ranges(spark, cluster) -> None:
    topic = _topic(cluster, queues=1, brokers=["broker-a"])
    _publish(cluster, topic, 64)
    one = _read(spark, cluster, topic)
    assert one.rdd.getNumPartitions() == 1
    split = _read(spark, cluster, topic, minPartitions="4")
    assert split.rdd.getNumPartitions() == 4
    assert sorted(r.queue_offset for r in split.collect()) == list(range(64))


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"topic": "NoSuchTopicHere"}, "NoSuchTopicHere"),
        ({"startingOffsets": "newest"}, "startingOffsets"),
        ({"deliveryGuarantee": "exactly_once"}, "an option of writing"),
        ({"colour": "blue"}, "unknown option 'colour'"),
        ({"expressionType": "SQL92", "subExpression": "a > 1"}, "enablePropertyFilter"),
    ],
)
def test_bad_options_are_refused_by_name(spark, cluster, options: dict[str, str], words: str) -> None:
    topic = _topic(cluster)
    _publish(cluster, topic, 1)
    reader = spark.read.format("rocketmq").option("namesrvAddr", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=words):
        reader.load().collect()


def _stream(spark: Any, cluster: Any, topic: str, checkpoint: Path, **options: Any) -> list[list[Any]]:
    """Run a streaming read with Trigger.AvailableNow to its end; the rows of each micro-batch."""
    batches: list[list[Any]] = []
    reader = spark.readStream.format("rocketmq").option("namesrvAddr", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(lambda df, _batch_id: batches.append(df.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    return batches


def test_a_stream_resumes_from_its_checkpoint_without_loss_or_duplicates(spark, cluster, tmp_path) -> None:
    topic = _topic(cluster)
    _publish(cluster, topic, 20)
    checkpoint = tmp_path / "checkpoint"
    first = _stream(spark, cluster, topic, checkpoint, startingOffsets="earliest")
    _publish(cluster, topic, 15, start=20)
    second = _stream(spark, cluster, topic, checkpoint, startingOffsets="earliest")
    bodies = [r.body.decode() for batch in first + second for r in batch]
    assert sorted(bodies) == sorted(f"m-{i}" for i in range(35))
    assert {r.body.decode() for batch in second for r in batch} == {f"m-{i}" for i in range(20, 35)}


def test_max_offsets_per_trigger_bounds_each_micro_batch(spark, cluster, tmp_path) -> None:
    topic = _topic(cluster)
    _publish(cluster, topic, 50)
    batches = _stream(
        spark, cluster, topic, tmp_path / "checkpoint", startingOffsets="earliest", maxOffsetsPerTrigger="12"
    )
    sizes = [len(b) for b in batches if b]
    assert sum(sizes) == 50
    assert max(sizes) <= 12 and len(sizes) >= 5


def test_a_new_stream_starts_at_latest_by_default(spark, cluster, tmp_path) -> None:
    topic = _topic(cluster)
    _publish(cluster, topic, 10)
    batches = _stream(spark, cluster, topic, tmp_path / "checkpoint")
    assert sum(len(b) for b in batches) == 0


def test_committed_micro_batches_write_the_group_offsets(spark, cluster, tmp_path) -> None:
    from spark_rocketmq.client.consumer_config import ConsumerConfig
    from spark_rocketmq.client.pull_consumer import PullConsumer

    topic = _topic(cluster)
    _publish(cluster, topic, 24)
    group = f"g{uuid.uuid4().hex[:6]}"
    options = {"startingOffsets": "earliest", "consumerGroup": group, "maxOffsetsPerTrigger": "8"}
    batches = _stream(spark, cluster, topic, tmp_path / "checkpoint", **options)
    sizes = [len(b) for b in batches if b]
    assert sizes == [8, 8, 8]
    with PullConsumer(ConsumerConfig(namesrv_addr=cluster.namesrv_addr)) as consumer:
        queues = consumer.fetch_subscribe_queues(topic)
        committed = {mq: consumer.query_consumer_offset(group, mq) or 0 for mq in queues}
        assert all(committed[mq] <= consumer.max_offset(mq) for mq in queues)
        # the group's retry topic has a route: mqadmin consumerProgress -g GROUP finds the group through it
        assert consumer.fetch_subscribe_queues(f"%RETRY%{group}")
    # Spark tells a source that a micro-batch is done when it plans the next one: the group trails the
    # query by its last micro-batch, here the third.
    assert sum(committed.values()) == 16
    # startingOffsets=group: a new query starts where the group is, and reads the rest once
    again = _stream(spark, cluster, topic, tmp_path / "checkpoint2", startingOffsets="group", consumerGroup=group)
    assert sum(len(b) for b in again) == 8


def test_a_read_through_a_proxy_is_the_direct_read(spark, cluster, make_proxy) -> None:
    """With only a 5.x Proxy's address (local/proxy.py): pulls and offsets by brokerName, the same rows."""
    topic = _topic(cluster)
    _publish(cluster, topic, 30)
    proxy = make_proxy(cluster)
    columns = ["topic", "broker_name", "queue_id", "queue_offset", "msg_id", "body", "properties"]
    direct = sorted(tuple(r) for r in _read(spark, cluster, topic).select(*columns).collect())
    reader = spark.read.format("rocketmq").option("namesrvAddr", proxy.addr).option("topic", topic)
    through = sorted(tuple(r) for r in reader.load().select(*columns).collect())
    assert len(direct) == 30 and through == direct
