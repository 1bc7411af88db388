"""queue_id and dead letters through both sink paths against the local cluster (2 brokers)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink
from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.spark.job import WriteJob
from spark_rocketmq.spark.message_ids import batch_context
from spark_rocketmq.spark.options import split_options
from spark_rocketmq.spark.schema import MessageColumns
from spark_rocketmq.spark.writer import PartitionWriter, write_partition

pytestmark = pytest.mark.spark


def _orders(spark, n: int, partitions: int):
    """Rows 0..n-1: every seventh has an empty body (invalid), the rest the JSON of the row."""
    return spark.range(0, n, numPartitions=partitions).select(
        F.when(F.col("id") % 7 == 0, F.lit("")).otherwise(F.to_json(F.struct("id"))).alias("body"),
        F.col("id").alias("order_id"),
        (F.col("id") % 4).cast("int").alias("queue_id"),
    )


def _invalid_ids(n: int) -> list[int]:
    return [i for i in range(n) if i % 7 == 0]


def _letter_ids(folder: Path) -> list[int]:
    return sorted(pq.read_table(folder)["order_id"].to_pylist())


def test_dead_letters_once_and_valid_rows_published_through_a_replay(spark, cluster, tmp_path) -> None:
    topic = "DeadLetters"
    cluster.create_topic(topic, queues=2)  # 2 brokers x 2 queues: queue_id 0..3
    letters = tmp_path / "letters"
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic=topic,
        group="test-dead-letters",
        on_invalid_row="dead_letter",
        dead_letter_path=str(letters),
        id_namespace="orders-query",
    )
    n = 700
    valid = sorted(i for i in range(n) if i not in _invalid_ids(n))
    first = sink(_orders(spark, n, 3), 11)
    assert first.ok and (first.invalid_rows, first.dead_letter_rows, first.messages) == (100, 100, 600)
    folder = letters / "orders-query" / "batch-11"
    assert first.dead_letter_files == [str(folder / f"part-{p:05d}.parquet") for p in range(3)]
    stored = cluster.messages(topic)
    assert sorted(json.loads(m.body)["id"] for m in stored) == valid  # every valid row once
    queues = sorted({(m.broker_name, m.queue_id) for m in stored})
    for m in stored:  # queue_id i: the i-th writable queue (broker by broker, queue ids ascending)
        assert queues.index((m.broker_name, m.queue_id)) == json.loads(m.body)["id"] % 4
    letters_first = pq.read_table(folder).to_pylist()
    assert sorted(r["order_id"] for r in letters_first) == _invalid_ids(n)
    assert {r["dead_letter_reason"] for r in letters_first} == {"body is empty; RocketMQ refuses empty bodies"}
    assert {r["dead_letter_batch_id"] for r in letters_first} == {11}

    # The batch replayed (as after a restart), partitioned otherwise: the letters of the replay only.
    replay = sink(_orders(spark, n, 2), 11)
    assert replay.dead_letter_files == [str(folder / f"part-{p:05d}.parquet") for p in range(2)]
    assert _letter_ids(folder) == _invalid_ids(n)
    again = cluster.messages(topic)  # at least once: a replay publishes the valid rows again
    assert sorted(json.loads(m.body)["id"] for m in again) == sorted(valid * 2)


def test_a_retried_task_keeps_one_copy_of_its_letters(cluster, tmp_path) -> None:
    topic = "DeadLettersRetry"
    cluster.create_topic(topic, queues=2)
    options, producer = split_options(
        {
            "namesrvAddr": cluster.namesrv_addr,
            "group": "test-dead-letters-retry",
            "topic": topic,
            "onInvalidRow": "dead_letter",
            "deadLetterPath": str(tmp_path),
        }
    )
    job = WriteJob(ProducerConfig.from_mapping(producer), options, MessageColumns(body="body"), batch_context("q", 2))
    ids = list(range(50))
    rows = [
        pa.RecordBatch.from_pydict({"body": [b"" if i % 5 == 0 else f"{i}".encode() for i in ids[a : a + 10]]})
        for a in range(0, 50, 10)
    ]
    # Attempt 0 fails after its first record batches (Spark aborts it); attempts 1 and 2 both end well.
    writer = PartitionWriter(job, partition=0, attempt=0)
    for rb in rows[:3]:
        writer.write(rb)
    writer.abort()
    summaries = [write_partition(rows, job, partition=0, attempt=a) for a in (1, 2)]
    assert [s.dead_letter_files for s in summaries] == [[str(tmp_path / "q" / "batch-2" / "part-00000.parquet")]] * 2
    table = pq.read_table(tmp_path / "q" / "batch-2")
    assert sorted(table["dead_letter_row"].to_pylist()) == [i for i in ids if i % 5 == 0]
    stored = cluster.messages(topic)
    assert sorted({int(m.body) for m in stored}) == [i for i in ids if i % 5]
    assert len({m.uniq_key for m in stored}) == 40  # republished rows keep their ids


def test_format_rocketmq_writes_dead_letters_and_honours_queue_id(spark, cluster, tmp_path) -> None:
    topic = "FormatDeadLetters"
    cluster.create_topic(topic, queues=2)
    letters = tmp_path / "letters"
    (
        _orders(spark, 140, 2)
        .write.format("rocketmq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", topic)
        .option("producerGroup", "test-format-dead-letters")
        .option("onInvalidRow", "dead_letter")
        .option("deadLetterPath", str(letters))
        .option("reportDir", str(tmp_path / "reports"))
        .mode("append")
        .save()
    )
    (entry,) = [json.loads(x) for x in (tmp_path / "reports" / "reports.jsonl").read_text().splitlines()]
    assert (entry["state"], entry["messages"], entry["dead_letter_rows"]) == ("committed", 120, 20)
    (run_folder,) = [p for ns in letters.iterdir() for p in ns.iterdir()]
    assert run_folder.name.startswith("write-")  # a df.write is a run of its own, not batch 0
    assert entry["dead_letter_files"] == [str(run_folder / f"part-{p:05d}.parquet") for p in range(2)]
    assert _letter_ids(run_folder) == _invalid_ids(140)
    stored = cluster.messages(topic)
    queues = sorted({(m.broker_name, m.queue_id) for m in stored})
    assert len(queues) == 4
    assert all(queues.index((m.broker_name, m.queue_id)) == json.loads(m.body)["id"] % 4 for m in stored)


def test_format_rocketmq_streaming_writes_each_batch_letters_under_the_query_id(spark, cluster, tmp_path) -> None:
    topic = "StreamDeadLetters"
    cluster.create_topic(topic, queues=2)
    source = tmp_path / "in"
    source.mkdir()
    for f in range(2):
        rows = [{"id": f * 30 + i, "name": "" if i % 10 == 0 else f"n{f * 30 + i}"} for i in range(30)]
        (source / f"part-{f}.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    stream = (
        spark.readStream.schema("id long, name string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .select(F.col("name").alias("body"), F.col("id").alias("order_id"))
    )
    letters = tmp_path / "letters"
    query = (
        stream.writeStream.format("rocketmq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", topic)
        .option("onInvalidRow", "dead_letter")
        .option("deadLetterPath", str(letters))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(240)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(m.body.decode() for m in cluster.messages(topic)) == sorted(f"n{i}" for i in range(60) if i % 30 % 10)
    per_batch = [_letter_ids(letters / query.id / f"batch-{batch}") for batch in (0, 1)]
    # One file a batch (the stream takes the two files in either order: same modification time).
    assert sorted(per_batch) == [[0, 10, 20], [30, 40, 50]]
