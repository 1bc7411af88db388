"""A task's pulls of one queue range, against a stub consumer: what of each answer becomes rows."""

from __future__ import annotations

from typing import Any

from spark_rocketmq.client.consumer_config import ConsumerConfig
from spark_rocketmq.client.pull_consumer import PullResult
from spark_rocketmq.protocol.message import encode_batch_body, encode_properties
from spark_rocketmq.protocol.pull import PullStatus
from spark_rocketmq.protocol.stored import encode_stored_records
from spark_rocketmq.spark.decoder import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG
from spark_rocketmq.spark.read_options import ReadOptions
from spark_rocketmq.spark.read_plan import QueueRange
from spark_rocketmq.spark.read_task import RangeReader


def _inner_batch(first_offset: int, bodies: list[bytes]) -> bytes:
    """One stored record of a 5.x BatchCQ topic: a MessageBatch body holding ``bodies``."""
    inner = [(0, body, encode_properties({"TAGS": "t"}).encode()) for body in bodies]
    props = {"UNIQ_KEY": "0A" * 16, "INNER_NUM": str(len(bodies)), "INNER_BASE": str(first_offset)}
    data, _ = encode_stored_records(
        [(0, encode_batch_body(inner), encode_properties(props).encode())],
        topic="T",
        queue_id=0,
        first_queue_offset=first_offset,
        commit_log_offset=0,
        sys_flag=INNER_BATCH_FLAG | NEED_UNWRAP_FLAG,
        born_timestamp=1,
        born_host=("10.0.0.1", 1),
        store_timestamp=2,
        store_host=("10.0.0.2", 10911),
    )
    return data


class StubConsumer:
    """Answers every pull with the same record: an inner batch at offsets 10-13 (a broker pulled at 12 of a
    BatchCQ queue answers the whole batch, its base offset 10)."""

    config = ConsumerConfig(namesrv_addr="127.0.0.1:9876")

    def __init__(self) -> None:
        self.pulled: list[int] = []

    def pull_async(self, mq: Any, offset: int, count: int, done: Any, **_kw: Any) -> None:
        self.pulled.append(offset)
        body = _inner_batch(10, [b"m10", b"m11", b"m12", b"m13"])
        done(PullResult(PullStatus.FOUND, 14, 0, 14, 0, body, "127.0.0.1:1"), None)


def test_messages_of_an_inner_batch_outside_the_range_are_not_read() -> None:
    consumer = StubConsumer()
    reader = RangeReader(consumer, ReadOptions(topic="T"), None)  # type: ignore[arg-type]
    rows = [row for batch in reader.batches(QueueRange("T", "broker-a", 0, 12, 14)) for row in batch.to_pylist()]
    assert [(r["queue_offset"], r["body"]) for r in rows] == [(12, b"m12"), (13, b"m13")]
    assert consumer.pulled == [12]
