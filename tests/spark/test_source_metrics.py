"""The streaming reader's OpenTelemetry metrics, recorded on the driver: the documented instruments at each
commit, and the offsets a micro-batch skips with failOnDataLoss=false."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.client.producer import Producer
from spark_rocketmq.protocol.message import Message
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.spark.compat import supports_datasource

from .test_sink_metrics import _collect, _meter, needs_sdk

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not supports_datasource(), reason='spark.readStream.format("rocketmq") needs PySpark 4.1+'),
    needs_sdk,
]


def _values(reader: Any, name: str) -> dict[str, float]:
    """topic -> the instrument's value."""
    _, points = _collect(reader).get(name, ("", []))
    return {str(attrs.get("topic")): value for attrs, value in points}


def _stream_reader(cluster: Any, topic: str, provider: Any, **options: str) -> Any:
    from spark_rocketmq.spark.source_metrics import SourceMetrics
    from spark_rocketmq.spark.stream_reader import RocketMQStreamReader

    reader = RocketMQStreamReader({"namesrvAddr": cluster.namesrv_addr, "topic": topic, **options})
    reader._metrics = SourceMetrics(provider)  # the driver's instruments, on a provider the test reads
    return reader


def _ranges(partitions: list[Any]) -> list[tuple[int, int]]:
    return sorted((r.start, r.end) for p in partitions for r in getattr(p, "ranges", []))


@pytest.fixture
def topic(cluster: Any) -> str:
    name = f"Metered{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, queues=1, brokers=["broker-a"])
    with Producer(ProducerConfig(namesrv_addr=cluster.namesrv_addr, group="metered")) as producer:
        for i in range(10):
            producer.send(Message(name, f"m-{i}".encode()))
    return name


def test_each_commit_records_batches_offsets_read_and_lag(cluster: Any, topic: str) -> None:
    from spark_rocketmq.spark.offsets import to_json_dict

    provider, metrics = _meter()
    reader = _stream_reader(cluster, topic, provider, startingOffsets="earliest", maxOffsetsPerTrigger="4")
    try:
        start = reader.initialOffset()
        reader.commit(start)
        end = reader.latestOffset()  # Spark 4.1's form: the reader limits itself to 4 offsets
        assert end == to_json_dict({MessageQueue(topic, "broker-a", 0): 4})
        reader.commit(end)
    finally:
        reader.stop()
    assert _values(metrics, "rocketmq_source_batches_total") == {"None": 2}
    assert _values(metrics, "rocketmq_source_offsets_total") == {topic: 4}
    assert _values(metrics, "rocketmq_source_lag") == {topic: 6}


def test_offsets_gone_by_retention_are_skipped_and_counted_with_fail_on_data_loss_false(
    cluster: Any, topic: str
) -> None:
    from spark_rocketmq.spark.offsets import to_json_dict

    mq = MessageQueue(topic, "broker-a", 0)
    cluster.broker("broker-a").delete_before(topic, 0, 6)
    provider, metrics = _meter()
    reader = _stream_reader(cluster, topic, provider, failOnDataLoss="false")
    try:
        # offsets 2 and 3 are gone: an empty range; the next micro-batch skips 4 and 5 and reads 6 to 8
        assert _ranges(reader.partitions(to_json_dict({mq: 2}), to_json_dict({mq: 4}))) == []
        assert _ranges(reader.partitions(to_json_dict({mq: 4}), to_json_dict({mq: 9}))) == [(6, 9)]
        assert _ranges(reader.partitions(to_json_dict({mq: 9}), to_json_dict({mq: 10}))) == [(9, 10)]
    finally:
        reader.stop()
    assert _values(metrics, "rocketmq_source_skipped_offsets_total") == {topic: 4}
