"""``format("rocketmq")``: a Python data source with Arrow writers, batch and streaming.

    spark.dataSource.register(RocketMQDataSource)
    df.write.format("rocketmq").option("namesrvAddr", "127.0.0.1:9876").option("topic", "Orders") \\
        .mode("append").save()
    df.writeStream.format("rocketmq").option("namesrvAddr", ...).option("checkpointLocation", ...).start()

Same columns, options (camelCase or snake_case) and semantics as RocketMQSink. Spark runs
``writer()``/``streamWriter()`` and ``commit()`` in Python processes of its own on the driver host,
not in the user's Python program: commit logs the batch's DeliveryReport on stderr and, with the
``reportDir`` option, appends it as a JSON line to ``<reportDir>/reports.jsonl``.

Message ids: the id namespace is the ``idNamespace`` option, else the streaming query id, else the
application id; the batch id is Spark's micro-batch id (the task's ``streaming.sql.batchId`` local
property), 0 for a batch write. The id time field is fixed when Spark plans the batch
(``streamWriter()`` runs once per micro-batch), so task retries republish identical ids.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import StructType

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )
except ImportError as exc:  # PySpark 3.5: no Python Data Source API (or no Arrow writers in it)
    from .compat import datasource_unavailable

    raise ImportError(datasource_unavailable()) from exc

from ..client.collector import fewer_collections
from ..errors import ConfigError
from .commit import TransactionCoordinator, batch_handles
from .dead_letters import check_columns
from .job import WriteJob
from .message_ids import batch_context
from .metrics import record_batch, sink_metrics
from .report import DeliveryReport, PartitionSummary
from .schema import resolve_columns
from .sink import build_config, resolve_context, settle_dead_letters
from .transaction_ids import parse_transaction_id
from .transaction_log import BatchState
from .writer import write_partition

#: Options Spark itself puts into a data source's options; not the producer's.
if TYPE_CHECKING:
    from .reader import RocketMQBatchReader
    from .stream_reader import RocketMQStreamReader

_SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}


@dataclass
class RocketMQCommitMessage(WriterCommitMessage):
    """One partition's outcome, carried from the executor's write() to the driver's commit()."""

    summary: dict[str, Any] = field(default_factory=dict)


class _Writer:
    def __init__(self, options: dict[str, str], schema: StructType, streaming: bool) -> None:
        opts = {k: v for k, v in options.items() if k.lower() not in _SPARK_OPTIONS}
        self.sink_options, self.producer_config = build_config(opts, {})
        self.columns = resolve_columns(schema, self.sink_options.topic)
        if self.sink_options.on_invalid_row == "dead_letter":
            check_columns(schema.names)
        # Streaming: Spark calls streamWriter() once per micro-batch, so this is the batch's start.
        self.ctx = batch_context(self.sink_options.id_namespace or "", -1 if streaming else 0)
        self.started = time.time()
        # exactly_once: a df.write is a transaction of its own in the log ("write-<run>", batch 0); a
        # stream's batches are the query's (its id namespace, read back from the handles at commit).
        self.txn_run = uuid.uuid4().hex[:12]
        self.txn_namespace = None if streaming else f"write-{self.txn_run}"
        # Metrics of the batches this writer commits, on this process's global MeterProvider (if any).
        self.metrics = sink_metrics()

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> RocketMQCommitMessage:
        from pyspark import TaskContext

        tc = TaskContext.get()
        job = WriteJob(
            self.producer_config,
            self.sink_options,
            self.columns,
            resolve_context(self.ctx, tc),
            self.txn_run,
            self.txn_namespace,
            dead_letter_run=self.txn_namespace and self.txn_run,
        )
        summary = write_partition(
            iterator, job, partition=tc.partitionId() if tc else 0, attempt=tc.attemptNumber() if tc else 0
        )
        return RocketMQCommitMessage(summary.__dict__.copy())

    @staticmethod
    def _summaries(messages: list[Any]) -> list[PartitionSummary]:
        return [PartitionSummary(**m.summary) for m in messages if isinstance(m, RocketMQCommitMessage)]

    def _report(self, messages: list[Any], batch_id: int | None) -> DeliveryReport:
        return DeliveryReport.from_summaries(
            self._summaries(messages),
            batch_id=batch_id,
            seconds=time.time() - self.started,
            on_invalid_row=self.sink_options.on_invalid_row,
            max_samples=self.sink_options.max_invalid_samples,
        )

    def _publish_report(self, report: DeliveryReport, state: str) -> None:
        print(f"{report.line()} [{state}]", file=sys.stderr, flush=True)
        if self.sink_options.report_dir:
            os.makedirs(self.sink_options.report_dir, exist_ok=True)
            entry = dict(report.to_dict(), state=state, time=time.time())
            with open(os.path.join(self.sink_options.report_dir, "reports.jsonl"), "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")

    @fewer_collections()
    def _commit(self, messages: list[Any], batch_id: int | None) -> None:
        report = self._report(messages, batch_id)
        settle_dead_letters(self.sink_options, self._summaries(messages), report)
        if self.sink_options.exactly_once:
            self._end_transactions(report, messages, batch_id, abort_reason=None if report.ok else report.line())
        self._publish_report(report, "committed" if report.ok else "failed")
        record_batch(self.metrics, report)
        report.raise_for_failures()

    @fewer_collections()
    def _abort(self, messages: list[Any], batch_id: int | None) -> None:
        report = self._report(messages, batch_id)
        if self.sink_options.exactly_once:
            self._end_transactions(report, messages, batch_id, abort_reason="Spark aborted the write")
        # A batch recorded before Spark aborted (its commit() raised afterwards) still commits.
        self._publish_report(report, "committed" if report.transaction == "committed" else "aborted")
        record_batch(self.metrics, report, failed=report.transaction != "committed")

    def _end_transactions(
        self, report: DeliveryReport, messages: list[Any], batch_id: int | None, abort_reason: str | None
    ) -> None:
        """exactly_once: the driver's commit (or abort) of the batch's halves (spark/commit.py)."""
        summaries = self._summaries(messages)
        handles = batch_handles(summaries)
        namespace = self.txn_namespace
        if namespace is None:  # a stream: the query's id namespace, as the tasks resolved it
            parsed = parse_transaction_id(handles[0][1]) if handles else None
            if parsed is None:  # no row: nothing to commit or roll back
                report.transaction = "committed" if abort_reason is None else "aborted"
                return
            namespace = parsed[0]
        batch = 0 if batch_id is None else batch_id
        coordinator = TransactionCoordinator(self.sink_options, self.producer_config)
        try:
            state = coordinator.state(namespace, batch)
            if abort_reason is None and state in (BatchState.COMMITTED, BatchState.RECORDED):
                # A replayed micro-batch the log knows: these new halves are not needed.
                outcome = coordinator.roll_back(handles)
                if state is BatchState.RECORDED:
                    coordinator.recover(namespace, batch)
                report.transaction = "recovered" if state is BatchState.RECORDED else "skipped"
                report.rolled_back_halves = outcome.rolled_back
                report.messages = 0
                report.topics = {}
                return
            if abort_reason is None and state is BatchState.ABORTED:
                coordinator.reopen(namespace, batch)
            coordinator.finish(report, namespace, batch, summaries, abort_reason)
        finally:
            coordinator.close()


class RocketMQBatchWriter(_Writer, DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema, streaming=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RocketMQCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[Any]) -> None:
        self._commit(messages, None)

    def abort(self, messages: list[Any]) -> None:
        self._abort(messages, None)


class RocketMQStreamWriter(_Writer, DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema, streaming=True)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RocketMQCommitMessage:
        return self._write(iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        self._commit(messages, batchId)

    def abort(self, messages: list[Any], batchId: int) -> None:
        self._abort(messages, batchId)


def check_read_schema(schema: StructType) -> None:
    """A schema given with ``.schema(...)`` must be the read schema: the columns are fixed."""
    from .read_schema import read_struct_type

    expected = read_struct_type()
    if schema is not None and schema != expected:
        raise ConfigError(
            "format('rocketmq') reads a fixed schema: leave .schema(...) out (the columns are "
            f"{', '.join(expected.names)}; select or cast them after load())"
        )


class RocketMQDataSource(DataSource):
    """The "rocketmq" format: register with ``spark.dataSource.register(RocketMQDataSource)``.

    Writes publish rows (``df.write`` / ``writeStream``); reads return one row per message in the read
    schema (``spark.read`` / ``readStream``: spark/reader.py, spark/stream_reader.py)."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    # The read side is imported when a read is planned: writing needs none of it.
    def schema(self) -> StructType:
        from .read_schema import read_struct_type

        return read_struct_type()

    def reader(self, schema: StructType) -> RocketMQBatchReader:
        from .reader import RocketMQBatchReader

        check_read_schema(schema)
        return RocketMQBatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> RocketMQStreamReader:
        from .stream_reader import RocketMQStreamReader

        check_read_schema(schema)
        return RocketMQStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> RocketMQBatchWriter:
        if overwrite:
            raise ConfigError(
                "format('rocketmq') cannot overwrite a topic: messages are only ever appended; use mode('append')"
            )
        return RocketMQBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RocketMQStreamWriter:
        # overwrite is True in complete output mode: each micro-batch republishes the whole result.
        return RocketMQStreamWriter(dict(self.options), schema)
