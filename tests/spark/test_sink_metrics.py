"""The sink's OpenTelemetry metrics: the documented instruments and attributes, once per batch, off without the API."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink
from spark_rocketmq.spark import metrics as sink_metrics_module
from spark_rocketmq.spark.report import DeliveryReport

try:
    from opentelemetry.sdk import metrics as sdk_metrics
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
except ImportError:  # the dev extra brings opentelemetry-sdk; without it only the no-metrics test runs
    sdk_metrics = None

needs_sdk = pytest.mark.skipif(sdk_metrics is None, reason="opentelemetry-sdk is not installed")

DOCUMENTED = {
    "rocketmq_sink_batches_total": ("1", {"invocation_status"}),
    "rocketmq_sink_batch_latency": ("ms", {"invocation_status"}),
    "rocketmq_sink_rows_total": ("1", set()),
    "rocketmq_sink_messages_total": ("1", {"topic"}),
    "rocketmq_sink_throughput_total": ("By", {"topic"}),
    "rocketmq_sink_retries_total": ("1", set()),
    "rocketmq_sink_resends_total": ("1", {"topic"}),
    "rocketmq_sink_invalid_rows_total": ("1", set()),
    "rocketmq_sink_dead_letter_rows_total": ("1", set()),
    "rocketmq_sink_undelivered_rows_total": ("1", {"topic"}),
}


def _collect(reader: Any) -> dict[str, tuple[str, list[tuple[dict, float]]]]:
    """instrument -> (unit, [(attributes, value; for a histogram (sum, count))])."""
    out: dict[str, tuple[str, list[tuple[dict, float]]]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points = [
                    (dict(p.attributes or {}), p.value if hasattr(p, "value") else (p.sum, p.count))
                    for p in m.data.data_points
                ]
                out[m.name] = (m.unit, points)
    return out


def _meter() -> tuple[Any, Any]:
    reader = InMemoryMetricReader()
    return sdk_metrics.MeterProvider(metric_readers=[reader]), reader


@needs_sdk
def test_a_report_is_recorded_with_the_documented_instruments_and_attributes() -> None:
    provider, reader = _meter()
    report = DeliveryReport(
        batch_id=3, rows=10, messages=7, bytes=700, retries=2, resends=1, invalid_rows=1, failed_rows=2,
        dead_letter_rows=1, seconds=1.5, on_invalid_row="dead_letter",
        topics={"A": 4, "B": 3}, topic_bytes={"A": 400, "B": 300}, topic_resends={"A": 1}, failed_topics={"B": 2},
    )  # fmt: skip
    metrics = sink_metrics_module.sink_metrics(provider)
    assert metrics is not None
    metrics.record(report)
    seen = _collect(reader)
    assert {name: (unit, {k for a, _ in pts for k in a}) for name, (unit, pts) in seen.items()} == DOCUMENTED
    assert seen["rocketmq_sink_batches_total"][1] == [({"invocation_status": "failure"}, 1)]  # 2 rows undelivered
    assert seen["rocketmq_sink_batch_latency"][1] == [({"invocation_status": "failure"}, (1500.0, 1))]
    assert sorted((a["topic"], v) for a, v in seen["rocketmq_sink_messages_total"][1]) == [("A", 4), ("B", 3)]
    assert sorted((a["topic"], v) for a, v in seen["rocketmq_sink_throughput_total"][1]) == [("A", 400), ("B", 300)]
    assert seen["rocketmq_sink_undelivered_rows_total"][1] == [({"topic": "B"}, 2)]
    assert seen["rocketmq_sink_resends_total"][1] == [({"topic": "A"}, 1)]
    assert [v for _, v in seen["rocketmq_sink_rows_total"][1]] == [10]


def test_no_opentelemetry_no_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    sink_metrics_module._otel_installed.cache_clear()
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry... raises ImportError
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)
    try:
        assert sink_metrics_module.sink_metrics() is None
        sink_metrics_module.record_batch(None, DeliveryReport(rows=1))  # a no-op
    finally:
        sink_metrics_module._otel_installed.cache_clear()


@needs_sdk
@pytest.mark.spark
def test_the_sink_records_each_batch_once_on_the_driver(spark, cluster) -> None:
    cluster.create_topic("Metered", queues=2)
    provider, reader = _meter()
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr, topic="Metered", group="test-metrics", on_invalid_row="skip",
        meter_provider=provider,
    )  # fmt: skip
    df = spark.range(0, 50, numPartitions=2).select(
        F.when(F.col("id") < 5, F.lit("")).otherwise(F.col("id").cast("string")).alias("body")
    )
    sink(df, 0)
    sink(df, 1)
    seen = _collect(reader)
    assert seen["rocketmq_sink_batches_total"][1] == [({"invocation_status": "success"}, 2)]
    assert seen["rocketmq_sink_rows_total"][1] == [({}, 100)]
    assert seen["rocketmq_sink_messages_total"][1] == [({"topic": "Metered"}, 90)]
    assert seen["rocketmq_sink_invalid_rows_total"][1] == [({}, 10)]
    assert seen["rocketmq_sink_dead_letter_rows_total"][1] == [({}, 0)]
    ((status, (total_ms, batches)),) = seen["rocketmq_sink_batch_latency"][1]
    assert status == {"invocation_status": "success"} and batches == 2 and total_ms > 0
