"""What a read returns of each kind of stored message, offsets the broker no longer has, and the round trip
of read rows through the sink, against the local brokers."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.client.producer import Producer
from spark_rocketmq.protocol.codes import SysFlag
from spark_rocketmq.protocol.message import Message
from spark_rocketmq.protocol.transaction import TransactionState
from spark_rocketmq.spark.compat import supports_datasource

#: Reads need PySpark's Python data source readers (4.1+): on 3.5 and 4.0 none of this can run.
pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not supports_datasource(), reason='spark.read.format("rocketmq") needs PySpark 4.1+'),
]


def _topic(cluster: Any, queues: int = 2, brokers: list[str] | None = None, name: str | None = None) -> str:
    topic = name or f"Kind{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, queues=queues, brokers=brokers)
    return topic


def _producer(cluster: Any) -> Producer:
    return Producer(ProducerConfig(namesrv_addr=cluster.namesrv_addr, group=f"kinds-{uuid.uuid4().hex[:6]}"))


def _read(spark: Any, cluster: Any, topic: str, **options: Any) -> list[Any]:
    reader = spark.read.format("rocketmq").option("namesrvAddr", cluster.namesrv_addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().collect()


def test_compressed_bodies_are_read_decompressed(spark, cluster) -> None:
    topic = _topic(cluster)
    big = bytes(range(256)) * 64  # 16 KiB: the producer compresses bodies over 4 KiB
    with _producer(cluster) as producer:
        producer.send(Message(topic, big, tags="big"))
        producer.send(Message(topic, b"small", tags="small"))
    stored = {m.tags: m for m in cluster.messages(topic)}
    assert stored["big"].sys_flag & SysFlag.COMPRESSED  # stored compressed
    rows = {r.tags: r for r in _read(spark, cluster, topic)}
    assert rows["big"].body == big and rows["small"].body == b"small"


def test_transactional_messages_are_read_once_committed_and_never_when_rolled_back(spark, cluster) -> None:
    topic = _topic(cluster)
    with _producer(cluster) as producer:
        committed = producer.send_half(Message(topic, b"committed"))
        rolled_back = producer.send_half(Message(topic, b"rolled back"))
        assert _read(spark, cluster, topic) == []  # halves are not in the topic
        producer.end_transaction(committed, TransactionState.COMMIT)
        producer.end_transaction(rolled_back, TransactionState.ROLLBACK)
    assert [r.body for r in _read(spark, cluster, topic)] == [b"committed"]


def test_a_delayed_message_is_read_once_due(spark, make_cluster) -> None:
    cluster = make_cluster(message_delay_level="1s 3600s")
    topic = _topic(cluster)
    with _producer(cluster) as producer:
        producer.send(Message(topic, b"now"))
        producer.send(Message(topic, b"in an hour", delay_level=2))
        producer.send(Message(topic, b"in a second", delay_level=1))
    assert [r.body for r in _read(spark, cluster, topic)] == [b"now"]
    deadline = time.monotonic() + 20
    while len(cluster.messages(topic)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # the broker's schedule delivers it: wait for that, bounded
    assert sorted(r.body for r in _read(spark, cluster, topic)) == [b"in a second", b"now"]


def test_a_retry_topic_is_read_when_named(spark, cluster) -> None:
    topic = _topic(cluster, name=f"%RETRY%g{uuid.uuid4().hex[:6]}")
    with _producer(cluster) as producer:
        producer.send(Message(topic, b"again"))
    rows = _read(spark, cluster, topic)
    assert [(r.topic, r.body) for r in rows] == [(topic, b"again")]


def test_offsets_deleted_by_retention_fail_the_read_or_are_skipped(spark, cluster) -> None:
    topic = _topic(cluster, queues=1, brokers=["broker-a"])
    with _producer(cluster) as producer:
        for i in range(10):
            producer.send(Message(topic, f"m-{i}".encode()))
    cluster.broker("broker-a").delete_before(topic, 0, 6)
    start = json.dumps({topic: {"broker-a": {"0": 2}}})
    with pytest.raises(Exception, match=r"offset 2 is below the queue's min offset 6") as info:
        _read(spark, cluster, topic, startingOffsets=start)
    assert "failOnDataLoss=false" in str(info.value)
    rows = _read(spark, cluster, topic, startingOffsets=start, failOnDataLoss="false")
    assert sorted(r.queue_offset for r in rows) == [6, 7, 8, 9]
    assert sorted(r.queue_offset for r in _read(spark, cluster, topic)) == [6, 7, 8, 9]  # earliest: min offset


def test_a_stream_whose_checkpoint_is_past_retention_fails_naming_the_queue(spark, cluster, tmp_path: Path) -> None:
    topic = _topic(cluster, queues=1, brokers=["broker-a"])
    with _producer(cluster) as producer:
        producer.send(Message(topic, b"first"))

        def run(**options: str) -> Any:
            reader = spark.readStream.format("rocketmq").option("namesrvAddr", cluster.namesrv_addr)
            reader = reader.option("topic", topic).option("startingOffsets", "earliest")
            for key, value in options.items():
                reader = reader.option(key, value)
            rows: list[Any] = []
            query = (
                reader.load()
                .writeStream.foreachBatch(lambda df, _id: rows.extend(df.collect()))
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            with contextlib.suppress(Exception):  # a failed query raises here; its exception() says why
                query.awaitTermination(120)
            return query, rows

        query, rows = run()
        assert [r.body for r in rows] == [b"first"]
        for i in range(6):
            producer.send(Message(topic, f"later-{i}".encode()))
    cluster.broker("broker-a").delete_before(topic, 0, 4)  # offsets 1-3 are gone before the stream read them
    query, rows = run()
    assert query.exception() is not None
    assert "offsets 1 to 3 are no longer on the broker" in str(query.exception())
    query, rows = run(failOnDataLoss="false")
    assert query.exception() is None
    assert sorted(r.queue_offset for r in rows) == [4, 5, 6]


def test_read_rows_written_back_republish_bodies_keys_tags_and_user_properties(spark, cluster) -> None:
    source, copy = _topic(cluster), _topic(cluster)
    with _producer(cluster) as producer:
        for i in range(12):
            producer.send(
                Message(source, f"b-{i}".encode(), tags=f"t{i % 3}", keys=[f"k-{i}", "x"], properties={"n": str(i)})
            )
    df = spark.read.format("rocketmq").option("namesrvAddr", cluster.namesrv_addr).option("topic", source).load()
    df.write.format("rocketmq").option("namesrvAddr", cluster.namesrv_addr).option("topic", copy).mode("append").save()

    def view(topic: str) -> list[tuple[Any, ...]]:
        return sorted((m.body, m.tags, tuple(m.keys), m.properties.get("n")) for m in cluster.messages(topic))

    assert view(copy) == view(source)
    originals = {m.uniq_key for m in cluster.messages(source)}
    assert not originals & {m.uniq_key for m in cluster.messages(copy)}  # republished: new message ids
