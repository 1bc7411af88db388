"""The streaming reader's metrics through OpenTelemetry's API, recorded on the driver at each commit.

As the sink's (spark/metrics.py): optional, on the global MeterProvider when ``opentelemetry-api`` is
installed, nothing otherwise. The driver knows offsets, not the rows its tasks decoded (Spark's own
progress has them: ``numInputRows``), so:

| instrument | kind | unit | attributes | what |
| --- | --- | --- | --- | --- |
| rocketmq_source_batches_total | counter | 1 | | micro-batches committed |
| rocketmq_source_offsets_total | counter | 1 | topic | offsets read by committed micro-batches (before a tag filter) |
| rocketmq_source_lag | gauge | 1 | topic | offsets behind the max offsets seen when the micro-batch was planned |
| rocketmq_source_skipped_offsets_total | counter | 1 | topic | offsets skipped (failOnDataLoss=false) |
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from ..protocol.route import MessageQueue
from .metrics import METER_NAME, _otel_installed

log = logging.getLogger("spark_rocketmq.spark.reader")


class SourceMetrics:
    def __init__(self, meter_provider: Any = None) -> None:
        from opentelemetry import metrics

        meter = metrics.get_meter(METER_NAME, meter_provider=meter_provider)
        self.batches = meter.create_counter("rocketmq_source_batches_total", "1", "micro-batches committed")
        self.offsets = meter.create_counter(
            "rocketmq_source_offsets_total", "1", "offsets read by committed micro-batches, by topic"
        )
        self.lag = meter.create_gauge("rocketmq_source_lag", "1", "offsets behind the queues' max offsets, by topic")
        self.skipped = meter.create_counter(
            "rocketmq_source_skipped_offsets_total", "1", "offsets skipped with failOnDataLoss=false, by topic"
        )
        self._committed: dict[MessageQueue, int] = {}

    def record(self, end: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int], topics: list[str]) -> None:
        self.batches.add(1)
        read: dict[str, int] = dict.fromkeys(topics, 0)
        lag: dict[str, int] = dict.fromkeys(topics, 0)
        for mq, offset in end.items():
            before = self._committed.get(mq)
            if before is not None:
                read[mq.topic] = read.get(mq.topic, 0) + max(0, offset - before)
            lag[mq.topic] = lag.get(mq.topic, 0) + max(0, latest.get(mq, offset) - offset)
        first = not self._committed
        self._committed = dict(end)
        for topic in topics:
            if not first:
                self.offsets.add(read[topic], {"topic": topic})
            self.lag.set(lag[topic], {"topic": topic})


@functools.cache
def _global_source_metrics() -> SourceMetrics:
    return SourceMetrics()


def source_metrics(meter_provider: Any = None) -> SourceMetrics | None:
    """The instruments (default: the global provider); None without opentelemetry-api."""
    if not _otel_installed():
        return None
    return _global_source_metrics() if meter_provider is None else SourceMetrics(meter_provider)


def record_source_batch(
    metrics: SourceMetrics | None,
    end: Mapping[MessageQueue, int],
    latest: Mapping[MessageQueue, int],
    topics: list[str],
) -> None:
    """Record one committed micro-batch when metrics are on; a failure to record is logged, never raised."""
    if metrics is None:
        return
    try:
        metrics.record(end, latest, topics)
    except Exception:
        log.warning("recording the reader's metrics failed", exc_info=True)


def record_source_skipped(metrics: SourceMetrics | None, skipped: Mapping[MessageQueue, int]) -> None:
    """Count the offsets a micro-batch skips (failOnDataLoss=false), by topic; never raises."""
    if metrics is None or not skipped:
        return
    by_topic: dict[str, int] = {}
    for mq, count in skipped.items():
        by_topic[mq.topic] = by_topic.get(mq.topic, 0) + count
    try:
        for topic, count in by_topic.items():
            metrics.skipped.add(count, {"topic": topic})
    except Exception:
        log.warning("recording the reader's metrics failed", exc_info=True)
