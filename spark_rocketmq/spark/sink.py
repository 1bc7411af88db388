"""RocketMQSink: the callable for ``df.writeStream.foreachBatch(sink)`` (and ``sink(df, 0)`` for batch jobs)."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from ..client.collector import fewer_collections
from ..errors import ConfigError, InvalidMessageError
from ..protocol.message import validate_topic
from .commit import TransactionCoordinator
from .dead_letters import check_columns, keep_run_files
from .directories import open_directory
from .job import WriteJob
from .message_ids import BatchContext, batch_context
from .metrics import SinkMetrics, record_batch, sink_metrics
from .options import SinkOptions, load_options, split_options
from .report import SUMMARY_DDL, DeliveryReport, PartitionSummary, log_report
from .schema import MessageColumns, resolve_columns
from .transaction_log import BatchState
from .writer import write_partition

log = logging.getLogger("spark_rocketmq.spark")


def build_config(
    source: Mapping[str, Any] | str | os.PathLike[str] | None, overrides: Mapping[str, Any]
) -> tuple[SinkOptions, Any]:
    """(sink options, ProducerConfig) from a dict or TOML path plus keyword overrides; ConfigError if unusable."""
    from ..client.config import ProducerConfig

    merged = load_options(source, overrides)
    options, producer_options = split_options(merged)
    if options.topic is not None:
        try:
            validate_topic(options.topic)
        except InvalidMessageError as exc:
            raise ConfigError(f"option topic: {exc}") from None
    if options.dead_letter_path:
        open_directory(options.dead_letter_path, "dead_letter_path")  # ConfigError now, not in every task
    config = ProducerConfig.from_mapping(producer_options)
    config.namesrv_addrs  # noqa: B018 - ConfigError on the driver when no NameServer is given
    return options, config


def resolve_context(ctx: BatchContext, task_context: Any) -> BatchContext:
    """Fill what only the task knows: the streaming query id (or the application id) and the batch id."""
    id_namespace = ctx.id_namespace
    batch_id = ctx.batch_id
    if task_context is not None:
        if not id_namespace:
            id_namespace = (
                task_context.getLocalProperty("sql.streaming.queryId")
                or task_context.getLocalProperty("spark.app.id")
                or ""
            )
        if batch_id < 0:
            prop = task_context.getLocalProperty("streaming.sql.batchId")
            batch_id = int(prop) if prop is not None else 0
    return replace(ctx, id_namespace=id_namespace, batch_id=max(batch_id, 0))


def streaming_batch_timestamp(df: Any, batch_id: int) -> int | None:
    """The micro-batch's batchTimestampMs from the query's offset log (checkpointed), or None.

    Inside foreachBatch this is the time Spark planned the batch, and it stays the same when the
    batch is replayed after a restart: message ids of a replayed batch are then identical, time
    field included. Outside a streaming query (or where the JVM is not reachable) it is None.
    """
    try:
        from pyspark.sql import SparkSession

        query_id = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        if not query_id:
            return None
        for session in (df.sparkSession, SparkSession.getActiveSession(), SparkSession.builder.getOrCreate()):
            query = session.streams.get(query_id) if session is not None else None
            if query is not None:
                entry = query._jsq.streamingQuery().offsetLog().get(int(batch_id))
                if entry.isDefined():
                    seq = entry.get()
                    try:
                        meta = seq.metadataOpt()  # Spark 4
                    except Exception:  # Spark 3.5: OffsetSeq.metadata (py4j answers hasattr for any name)
                        meta = seq.metadata()
                    if meta.isDefined():
                        return int(meta.get().batchTimestampMs())
    except Exception:  # Spark Connect, another Spark version: fall back to the driver's clock
        log.debug("no batch timestamp from the offset log", exc_info=True)
    return None


def _driver_namespace(df: Any) -> str:
    """The id namespace tasks would take (the query id, else the application id), read on the driver."""
    sc = df.sparkSession.sparkContext
    return sc.getLocalProperty("sql.streaming.queryId") or sc.applicationId or ""


def settle_dead_letters(options: SinkOptions, summaries: list[PartitionSummary], report: DeliveryReport) -> None:
    """Driver, once every task of the batch ended: the batch's dead-letter folder keeps this run's files
    only (a replay's earlier files go; spark/dead_letters.py). A failure to clean up fails the batch."""
    if options.on_invalid_row != "dead_letter" or not options.dead_letter_path:
        return
    folders = [s.dead_letter_folder for s in summaries if s.dead_letter_folder]
    try:
        removed = keep_run_files(options.dead_letter_path, folders, report.dead_letter_files)
    except Exception as exc:
        report.failed_rows += report.dead_letter_rows
        report.errors.insert(0, f"dead letters of an earlier run of the batch not removed: {type(exc).__name__}: {exc}")
        return
    if removed:
        log.info(
            "RocketMQ sink: batch %s: removed %d dead-letter files of an earlier run", report.batch_id, len(removed)
        )


@dataclass(frozen=True)
class _TaskPlan:
    columns: MessageColumns
    ctx: BatchContext
    txn_run: str = ""
    dead_letter_run: str | None = None


def _partition_function(shared: Any, plan: _TaskPlan, broadcast: bool):
    def publish(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        tc = TaskContext.get()
        config, options = shared.value if broadcast else shared
        ctx = resolve_context(plan.ctx, tc)
        job = WriteJob(config, options, plan.columns, ctx, plan.txn_run, dead_letter_run=plan.dead_letter_run)
        summary = write_partition(
            batches,
            job,
            partition=tc.partitionId() if tc else 0,
            attempt=tc.attemptNumber() if tc else 0,
        )
        yield summary.to_record_batch()

    return publish


class RocketMQSink:
    """Publishes each micro-batch it is given; returns and logs a DeliveryReport per batch.

    ``RocketMQSink(namesrv_addr="127.0.0.1:9876", topic="Orders")``,
    ``RocketMQSink({"namesrvAddr": ..., "topic": ...})`` or ``RocketMQSink("conf/local.toml", topic="X")``:
    producer options (ProducerConfig) and sink options (SinkOptions), snake_case or camelCase; keyword
    arguments win over the dict or file.

    ``sink(df, batch_id)`` checks the columns on the driver (SchemaError before any task runs), then
    each partition publishes its rows from its executor's pooled producer (spark_rocketmq.spark.pool)
    through a PartitionWriter, which resends failed requests until delivery_timeout_ms. It raises
    InvalidRowError when rows are not valid messages and on_invalid_row is "fail", and DeliveryError
    when any row was not delivered by then: the micro-batch fails and Spark replays it (at least
    once; replayed rows carry the same UNIQ_KEY, see spark_rocketmq.spark.message_ids).

    Counts for long jobs: ``last_report`` and ``totals`` (rows, messages, batches so far). Metrics:
    each batch's report is recorded through OpenTelemetry when opentelemetry-api is installed
    (spark/metrics.py), on ``meter_provider`` or else the global MeterProvider.
    """

    def __init__(
        self,
        options: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        /,
        *,
        meter_provider: Any = None,
        **kwargs: Any,
    ) -> None:
        self.options, self.producer_config = build_config(options, kwargs)
        self._metrics: SinkMetrics | None = sink_metrics(meter_provider)
        self.last_report: DeliveryReport | None = None
        self.totals: dict[str, int] = {"batches": 0, "rows": 0, "messages": 0, "invalid_rows": 0, "failed_rows": 0}
        self._broadcast: Any = None
        self._logged_ignored: set[tuple[str, ...]] = set()
        self._lock = threading.Lock()
        self._coordinator: TransactionCoordinator | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Spark Connect pickles a foreachBatch function (this sink) to run it in the server's Python
        worker: the lock and the driver-side broadcast stay behind, the options and counts go along."""
        state = self.__dict__.copy()
        state.pop("_lock", None)
        state["_broadcast"] = None
        state["_coordinator"] = None
        state["_metrics"] = None  # the server's Python worker records on its global MeterProvider, if any
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._metrics = sink_metrics()

    def _shared(self, spark: Any) -> tuple[Any, bool]:
        if self._broadcast is None:
            try:
                self._broadcast = spark.sparkContext.broadcast((self.producer_config, self.options))
            except Exception:  # Spark Connect: no broadcast variables; ship with the function
                return (self.producer_config, self.options), False
        return self._broadcast, True

    @fewer_collections()  # the driver reads and commits a handle a row in exactly_once (client/collector.py)
    def __call__(self, df: Any, batch_id: int | None = None, *, id_time_ms: int | None = None) -> DeliveryReport:
        """Publish ``df``; ``id_time_ms`` (epoch ms, not later than now) fixes the message ids' time
        field, as a batch job that reruns with the same ids needs; by default a streaming batch's
        planned time, else the driver's clock."""
        started = time.monotonic()
        schema = df.schema
        columns = resolve_columns(schema, self.options.topic, log_ignored=False)
        dead_letters = self.options.on_invalid_row == "dead_letter"
        if dead_letters:
            check_columns(schema.names)
        ignored = tuple(f.name for f in schema.fields if f.name not in columns.selected())
        if ignored and ignored not in self._logged_ignored and not dead_letters:
            self._logged_ignored.add(ignored)
            log.info("RocketMQ sink ignores columns %s (not message fields)", list(ignored))
        namespace = self.options.id_namespace or ""
        coordinator = None
        if self.options.exactly_once:
            if batch_id is None:
                raise ConfigError(
                    "delivery_guarantee=exactly_once: call sink(df, batch_id) with the batch id (foreachBatch "
                    "gives it): a replayed batch is recognised by it"
                )
            namespace = namespace or _driver_namespace(df)
            coordinator = self._transactions()
            state = coordinator.state(namespace, batch_id)
            if state in (BatchState.COMMITTED, BatchState.RECORDED):
                return self._replayed(coordinator, namespace, batch_id, state, started)
            if state is BatchState.ABORTED:
                coordinator.reopen(namespace, batch_id)
        ctx = batch_context(
            namespace,
            -1 if batch_id is None else batch_id,
            now_ms=id_time_ms
            if id_time_ms is not None
            else (None if batch_id is None else streaming_batch_timestamp(df, batch_id)),
        )
        shared, broadcast = self._shared(df.sparkSession)
        plan = _TaskPlan(
            columns,
            ctx,
            uuid.uuid4().hex[:12] if coordinator is not None else "",
            uuid.uuid4().hex[:12] if dead_letters and batch_id is None else None,
        )
        publish = _partition_function(shared, plan, broadcast)
        selected = columns.selected()
        # Project only when there are columns to leave out (a dead letter keeps every column of its row).
        if [f.name for f in schema.fields] != selected and not dead_letters:
            df = df.select(*[f"`{c}`" for c in selected])
        try:
            rows = df.mapInArrow(publish, SUMMARY_DDL).collect()
        except BaseException as exc:
            if coordinator is not None:
                assert batch_id is not None
                coordinator.abort(namespace, batch_id, [], f"the Spark job failed: {type(exc).__name__}: {exc}")
            raise
        summaries = [PartitionSummary.from_row(r.asDict()) for r in rows]
        report = DeliveryReport.from_summaries(
            summaries,
            batch_id=batch_id,
            seconds=time.monotonic() - started,
            on_invalid_row=self.options.on_invalid_row,
            max_samples=self.options.max_invalid_samples,
        )
        settle_dead_letters(self.options, summaries, report)
        if coordinator is not None:
            assert batch_id is not None
            coordinator.finish(report, namespace, batch_id, summaries, None if report.ok else report.line())
            report.seconds = time.monotonic() - started
        self._account(report)
        log_report(report)
        record_batch(self._metrics, report)
        report.raise_for_failures()
        return report

    def _account(self, report: DeliveryReport) -> None:
        with self._lock:
            self.last_report = report
            self.totals["batches"] += 1
            for name in ("rows", "messages", "invalid_rows", "failed_rows"):
                self.totals[name] += getattr(report, name)

    def _transactions(self) -> TransactionCoordinator:
        if self._coordinator is None:
            self._coordinator = TransactionCoordinator(self.options, self.producer_config)
        return self._coordinator

    def _replayed(
        self, coordinator: TransactionCoordinator, namespace: str, batch_id: int, state: BatchState, started: float
    ) -> DeliveryReport:
        """A batch the log knows: committed (skipped) or recorded before a restart (recovered)."""
        report = DeliveryReport(batch_id=batch_id, on_invalid_row=self.options.on_invalid_row)
        if state is BatchState.RECORDED:
            report.left_to_check_back = coordinator.recover(namespace, batch_id)
            report.transaction = "recovered"
        else:
            report.transaction = "skipped"
        report.seconds = time.monotonic() - started
        self._account(report)
        log_report(report)
        record_batch(self._metrics, report)
        return report

    def close(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None
        if self._broadcast is not None:
            try:
                self._broadcast.destroy()
            except Exception:
                log.debug("destroying the configuration broadcast failed", exc_info=True)
            self._broadcast = None
