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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

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

from ..errors import ConfigError
from .message_ids import batch_context
from .report import DeliveryReport, PartitionSummary
from .schema import resolve_columns
from .sink import build_config, resolve_context
from .writer import WriteJob, write_partition

#: Options Spark itself puts into a data source's options; not the producer's.
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
        # Streaming: Spark calls streamWriter() once per micro-batch, so this is the batch's start.
        self.ctx = batch_context(self.sink_options.id_namespace or "", -1 if streaming else 0)
        self.started = time.time()

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> RocketMQCommitMessage:
        from pyspark import TaskContext

        tc = TaskContext.get()
        job = WriteJob(self.producer_config, self.sink_options, self.columns, resolve_context(self.ctx, tc))
        summary = write_partition(
            iterator, job, partition=tc.partitionId() if tc else 0, attempt=tc.attemptNumber() if tc else 0
        )
        return RocketMQCommitMessage(summary.__dict__.copy())

    def _report(self, messages: list[Any], batch_id: int | None) -> DeliveryReport:
        summaries = [PartitionSummary(**m.summary) for m in messages if isinstance(m, RocketMQCommitMessage)]
        return DeliveryReport.from_summaries(
            summaries,
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

    def _commit(self, messages: list[Any], batch_id: int | None) -> None:
        report = self._report(messages, batch_id)
        self._publish_report(report, "committed" if report.ok else "failed")
        report.raise_for_failures()

    def _abort(self, messages: list[Any], batch_id: int | None) -> None:
        self._publish_report(self._report(messages, batch_id), "aborted")


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


class RocketMQDataSource(DataSource):
    """The "rocketmq" format: register with ``spark.dataSource.register(RocketMQDataSource)``."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def writer(self, schema: StructType, overwrite: bool) -> RocketMQBatchWriter:
        if overwrite:
            raise ConfigError(
                "format('rocketmq') cannot overwrite a topic: messages are only ever appended; use mode('append')"
            )
        return RocketMQBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RocketMQStreamWriter:
        # overwrite is True in complete output mode: each micro-batch republishes the whole result.
        return RocketMQStreamWriter(dict(self.options), schema)
