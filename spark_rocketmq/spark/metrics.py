"""The sink's metrics through OpenTelemetry's API, recorded once per batch on the driver from its DeliveryReport.

Optional: with ``opentelemetry-api`` installed (``pip install 'spark-rocketmq[otel]'``) the instruments
below are recorded through the global MeterProvider (or the one given to RocketMQSink); without it
nothing is imported or recorded. Executors record nothing: every figure comes from the report the
driver gathers, so no Python worker needs an exporter. Names follow RocketMQ 5's metrics (lowercase
``rocketmq_`` names, counters ending in ``_total``, latencies in ms, attributes ``topic`` and
``invocation_status``):

| instrument | kind | unit | attributes | what |
| --- | --- | --- | --- | --- |
| rocketmq_sink_batches_total | counter | 1 | invocation_status | batches: success (report.ok) or failure |
| rocketmq_sink_batch_latency | histogram | ms | invocation_status | a batch's duration on the driver |
| rocketmq_sink_rows_total | counter | 1 | | rows read |
| rocketmq_sink_messages_total | counter | 1 | topic | messages stored by a broker |
| rocketmq_sink_throughput_total | counter | By | topic | bytes of the stored requests (bodies and batch records) |
| rocketmq_sink_retries_total | counter | 1 | | the client's own retries of a send |
| rocketmq_sink_resends_total | counter | 1 | topic | requests the sink sent again after the client's retries failed |
| rocketmq_sink_invalid_rows_total | counter | 1 | | rows that are not valid messages |
| rocketmq_sink_dead_letter_rows_total | counter | 1 | | invalid rows written to dead_letter_path |
| rocketmq_sink_undelivered_rows_total | counter | 1 | topic | rows not delivered within delivery_timeout_ms |
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from .report import DeliveryReport

log = logging.getLogger("spark_rocketmq.spark")

__all__ = ["METER_NAME", "SinkMetrics", "record_batch", "sink_metrics"]

METER_NAME = "spark_rocketmq.spark"
#: Bucket bounds of rocketmq_sink_batch_latency (ms): micro-batches take from tens of ms to minutes.
LATENCY_BUCKETS_MS = (10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 10_000.0, 30_000.0, 60_000.0, 120_000.0, 300_000.0)

_COUNTERS = {
    # attribute name -> (instrument, unit, description)
    "batches": ("rocketmq_sink_batches_total", "1", "batches the sink published, by invocation_status"),
    "rows": ("rocketmq_sink_rows_total", "1", "rows the sink read"),
    "messages": ("rocketmq_sink_messages_total", "1", "messages a broker stored, by topic"),
    "bytes": ("rocketmq_sink_throughput_total", "By", "bytes of the stored requests, by topic"),
    "retries": ("rocketmq_sink_retries_total", "1", "retries of a send within the client"),
    "resends": ("rocketmq_sink_resends_total", "1", "requests the sink sent again, by topic"),
    "invalid_rows": ("rocketmq_sink_invalid_rows_total", "1", "rows that are not valid messages"),
    "dead_letter_rows": ("rocketmq_sink_dead_letter_rows_total", "1", "invalid rows written to dead_letter_path"),
    "failed_rows": ("rocketmq_sink_undelivered_rows_total", "1", "rows not delivered, by topic"),
}


class SinkMetrics:
    """The sink's instruments on one meter; ``record(report)`` once per batch."""

    def __init__(self, meter_provider: Any = None) -> None:
        from opentelemetry import metrics

        meter = metrics.get_meter(METER_NAME, meter_provider=meter_provider)
        self._counters = {key: meter.create_counter(name, unit, text) for key, (name, unit, text) in _COUNTERS.items()}
        self._latency = meter.create_histogram(
            "rocketmq_sink_batch_latency",
            "ms",
            "a batch's duration on the driver, by invocation_status",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
        )

    def record(self, report: DeliveryReport, *, failed: bool = False) -> None:
        """Record one batch; ``failed``: a failure whatever the report says (Spark aborted the write)."""
        c = self._counters
        status = {"invocation_status": "success" if report.ok and not failed else "failure"}
        c["batches"].add(1, status)
        self._latency.record(report.seconds * 1000.0, status)
        for key in ("rows", "retries", "invalid_rows", "dead_letter_rows"):
            c[key].add(getattr(report, key))
        for key, per_topic in (
            ("messages", report.topics),
            ("bytes", report.topic_bytes),
            ("resends", report.topic_resends),
            ("failed_rows", report.failed_topics),
        ):
            for topic, n in per_topic.items():
                c[key].add(n, {"topic": topic})


@functools.cache
def _otel_installed() -> bool:
    try:
        import opentelemetry.metrics  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _global_metrics() -> SinkMetrics:
    return SinkMetrics()


def sink_metrics(meter_provider: Any = None) -> SinkMetrics | None:
    """The instruments on ``meter_provider``'s meter (default: the global provider, which may be set
    later: OpenTelemetry's API forwards to it); None without opentelemetry-api."""
    if not _otel_installed():
        return None
    return _global_metrics() if meter_provider is None else SinkMetrics(meter_provider)


def record_batch(metrics: SinkMetrics | None, report: DeliveryReport, *, failed: bool = False) -> None:
    """Record ``report`` (one batch) when metrics are on; a failure to record is logged, never raised."""
    if metrics is None:
        return
    try:
        metrics.record(report, failed=failed)
    except Exception:
        log.warning("recording the sink's metrics failed", exc_info=True)
