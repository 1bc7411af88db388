"""The queue_id column: each row to that queue of its topic, in row order, through resends; out of range: invalid."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.errors import InvalidRowError, SchemaError
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.spark.job import WriteJob
from spark_rocketmq.spark.message_ids import batch_context
from spark_rocketmq.spark.options import SinkOptions
from spark_rocketmq.spark.report import DeliveryReport
from spark_rocketmq.spark.schema import MessageColumns, resolve_columns
from tests.spark.test_writer import QUEUES, StandInProducer, busy, run


def _job(*, sharded: bool = False, **options) -> WriteJob:
    config = ProducerConfig(namesrv_addr="127.0.0.1:1", group="queue-id-tests")
    cols = MessageColumns(body="body", queue_id="queue_id", sharding_key="sharding_key" if sharded else None)
    return WriteJob(config, SinkOptions(topic="T", **options), cols, batch_context("q", 1))


def _rows(ids: list[int | None], keys: list[str] | None = None) -> pa.RecordBatch:
    cols = {"body": pa.array([f"row-{i:04d}".encode() for i in range(len(ids))]), "queue_id": pa.array(ids, pa.int32())}
    if keys is not None:
        cols["sharding_key"] = pa.array(keys)
    return pa.RecordBatch.from_pydict(cols)


def _per_queue(producer: StandInProducer) -> dict[MessageQueue | None, list[bytes]]:
    out: dict[MessageQueue | None, list[bytes]] = {}
    for s in producer.delivered():
        out.setdefault(s.queue, []).extend(s.bodies)
    return out


def test_schema_takes_an_integral_queue_id_and_names_the_fix_for_another_type() -> None:
    schema = StructType([StructField("body", StringType()), StructField("Queue_Id", IntegerType())])
    assert resolve_columns(schema, "T").queue_id == "Queue_Id"
    bad = StructType([StructField("body", StringType()), StructField("queue_id", StringType())])
    with pytest.raises(SchemaError, match=r"column 'queue_id' has type string.*tinyint, smallint, int or bigint"):
        resolve_columns(bad, "T")


def test_rows_go_to_their_queue_in_row_order() -> None:
    ids = [i % 4 for i in range(400)]
    producer = StandInProducer()
    summary = run(producer, [_rows(ids[:200]), _rows(ids[200:])], _job(max_request_bytes=300))
    assert (summary.messages, summary.failed_rows, summary.invalid_rows) == (400, 0, 0)
    per_queue = _per_queue(producer)
    assert set(per_queue) == set(QUEUES)  # queue_id i is the i-th writable queue: broker-a 0, 1, broker-b 0, 1
    for qid, queue in enumerate(QUEUES):
        wanted = [f"row-{i:04d}".encode() for i in range(200) if ids[i] == qid]
        wanted += [f"row-{i:04d}".encode() for i in range(200) if ids[200 + i] == qid]
        assert per_queue[queue] == wanted
    assert producer.overtaking == []  # one request of a queue in flight at a time: the order holds


def test_a_resent_request_keeps_its_queue_and_the_order() -> None:
    producer = StandInProducer(fail=lambda s: busy() if s.n in (0, 3) else None)
    ids = [3] * 100 + [1] * 100
    summary = run(producer, [_rows(ids)], _job(max_request_bytes=300))
    assert (summary.messages, summary.failed_rows) == (200, 0)
    assert summary.resends == 2
    assert all(s.queue in (QUEUES[3], QUEUES[1]) for s in producer.sent)
    per_queue = _per_queue(producer)
    assert per_queue[QUEUES[3]] == [f"row-{i:04d}".encode() for i in range(100)]
    assert per_queue[QUEUES[1]] == [f"row-{i:04d}".encode() for i in range(100, 200)]


def test_a_null_queue_id_lets_the_producer_choose_and_queue_id_wins_over_a_sharding_key() -> None:
    producer = StandInProducer()
    summary = run(producer, [_rows([None, 2, None, 2], keys=["k", "k", "k", "k"])], _job(sharded=True))
    assert summary.messages == 4
    per_queue = _per_queue(producer)
    assert per_queue[QUEUES[2]] == [b"row-0001", b"row-0003"]
    keyed = [q for q in per_queue if q != QUEUES[2]]
    assert len(keyed) == 1 and per_queue[keyed[0]] == [b"row-0000", b"row-0002"]  # the key's own queue


def test_an_id_out_of_range_is_an_invalid_row_naming_topic_row_and_queue_count() -> None:
    producer = StandInProducer()
    summary = run(producer, [_rows([0, 4, -1, 3])], _job(on_invalid_row="skip"), partition=5)
    assert (summary.messages, summary.invalid_rows) == (2, 2)
    assert sorted(b for bodies in _per_queue(producer).values() for b in bodies) == [b"row-0000", b"row-0003"]
    assert summary.invalid_samples[0] == (
        "partition 5 row 1: column queue_id: queue_id 4 is not a writable queue of topic T, which has 4 "
        "(queue_id 0..3); use an id in that range, or null to let the sink choose"
    )
    assert summary.invalid_samples[1].startswith("partition 5 row 2: column queue_id: queue_id -1 is not")
    failing = run(StandInProducer(), [_rows([0, 7])], _job())
    report = DeliveryReport.from_summaries([failing], batch_id=3, seconds=0.1, on_invalid_row="fail")
    with pytest.raises(InvalidRowError, match=r"row 1: column queue_id: queue_id 7 .* topic T, which has 4"):
        report.raise_for_failures()
