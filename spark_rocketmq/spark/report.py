"""What one batch did: per-partition summaries (executors) and the DeliveryReport (driver)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, get_type_hints

import pyarrow as pa

from ..errors import ClusterConfigDeliveryError, DeliveryError, InvalidRowError

log = logging.getLogger("spark_rocketmq.spark")


@dataclass
class DeliveryCounts:
    """What a partition (PartitionSummary) or a whole batch (DeliveryReport) did with its rows."""

    rows: int = 0
    messages: int = 0
    bytes: int = 0
    #: Requests that were stored (each counted once, however many sends it took).
    requests: int = 0
    #: Extra attempts the client made within its own retries.
    retries: int = 0
    #: Requests the writer sent again after the client's retries failed (delivery_timeout_ms).
    resends: int = 0
    #: Rows not delivered within delivery_timeout_ms (or not sent: behind an undelivered row of their queue).
    failed_rows: int = 0
    #: Rows not delivered, per topic.
    failed_topics: dict[str, int] = field(default_factory=dict)
    #: Rows that are not valid messages (not sent with on_invalid_row="skip" or "dead_letter").
    invalid_rows: int = 0
    #: on_invalid_row="dead_letter": the invalid rows written to dead_letter_path, and the Parquet files
    #: that hold them (one per partition that refused rows; spark/dead_letters.py).
    dead_letter_rows: int = 0
    dead_letter_files: list[str] = field(default_factory=list)
    stopped_on_invalid: bool = False
    #: Messages per topic, and their body bytes (records included).
    topics: dict[str, int] = field(default_factory=dict)
    topic_bytes: dict[str, int] = field(default_factory=dict)
    #: Requests resent per topic.
    topic_resends: dict[str, int] = field(default_factory=dict)
    #: A bounded list: "partition P row R: column C: reason".
    invalid_samples: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Distinct ClusterConfigErrors of failed sends (the cluster as configured cannot take them).
    config_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Messages delivered with a delivery time (deliver_time / delay_ms columns), each its own request.
    timer_rows: int = 0
    #: UNIQ_KEY -> recall handle of each delivered timer row a 5.3.2+ broker holds until its time
    #: (Producer.recall(topic, handle) cancels it).
    recall_handles: dict[str, str] = field(default_factory=dict)
    #: Messages stored on their topic's master whose broker answered a status other than SEND_OK, by status:
    #: FLUSH_DISK_TIMEOUT (SYNC_FLUSH: not on disk within syncFlushTimeout), FLUSH_SLAVE_TIMEOUT (SYNC_MASTER:
    #: the slave did not confirm within its timeout) or SLAVE_NOT_AVAILABLE (SYNC_MASTER without its slave).
    #: They are delivered, on the master only for now; with retry_another_broker_when_not_store_ok they are
    #: sent again instead, until a broker answers SEND_OK (the first copy stays: a duplicate, same UNIQ_KEY).
    not_replicated: dict[str, int] = field(default_factory=dict)
    #: Rows sent whose properties map held names RocketMQ reserves, left out (e.g. a row read with
    #: format("rocketmq"): UNIQ_KEY, WAIT, CLUSTER, MIN_OFFSET, REAL_TOPIC...; the message has its own),
    #: and rows per name left out. A delay or delivery time (DELAY, TIMER_*) is left out only from a row
    #: delivered after it already (REAL_TOPIC or TIMER_OUT_MS beside it): published again at once; other
    #: rows with one are invalid. A __SHARDINGKEY is the row's key, unless a sharding_key column is given.
    reserved_left_out_rows: int = 0
    reserved_left_out: dict[str, int] = field(default_factory=dict)

    def add_reserved_left_out(self, rows: int, names: Mapping[str, int]) -> None:
        self.reserved_left_out_rows += rows
        for name, n in names.items():
            self.reserved_left_out[name] = self.reserved_left_out.get(name, 0) + n

    def add(self, other: DeliveryCounts) -> None:
        """Add another's counts (not its seconds: partitions run side by side)."""
        for name in (
            "rows", "messages", "bytes", "requests", "retries", "resends", "failed_rows", "invalid_rows", "timer_rows",
            "dead_letter_rows", "reserved_left_out_rows",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.stopped_on_invalid |= other.stopped_on_invalid
        for mine, theirs in (
            (self.topics, other.topics),
            (self.failed_topics, other.failed_topics),
            (self.topic_bytes, other.topic_bytes),
            (self.topic_resends, other.topic_resends),
            (self.not_replicated, other.not_replicated),
            (self.reserved_left_out, other.reserved_left_out),
        ):
            for topic, n in theirs.items():
                mine[topic] = mine.get(topic, 0) + n
        self.invalid_samples.extend(other.invalid_samples)
        self.dead_letter_files.extend(other.dead_letter_files)
        self.errors.extend(other.errors)
        self.recall_handles.update(other.recall_handles)
        self.config_errors.extend(e for e in other.config_errors if e not in self.config_errors)


@dataclass
class PartitionSummary(DeliveryCounts):
    """What one task did with its partition; one row of the executors' mapInArrow output."""

    partition: int = 0
    attempt: int = 0
    #: The executor Python worker's process id.
    pid: int = 0
    #: ProducerConfig.fingerprint() of the producer the task used.
    config_fingerprint: str = ""
    #: Producers that worker's pool has created for this configuration.
    producers_created: int = 0
    #: exactly_once: the stored half messages, TransactionHandle.to_row() plus the SPARK_TXN property each.
    handles: list[list[Any]] = field(default_factory=list)
    #: on_invalid_row="dead_letter": the batch's folder under dead_letter_path (spark/dead_letters.py).
    dead_letter_folder: str = ""

    def to_record_batch(self) -> pa.RecordBatch:
        row = {name: getattr(self, name) for name in _FIELD_NAMES}  # asdict() would deep-copy every handle
        for name in _JSON_FIELDS:
            row[name] = json.dumps(row[name])
        return pa.RecordBatch.from_pylist([row], schema=SUMMARY_SCHEMA)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> PartitionSummary:
        data = dict(row)
        for name in _JSON_FIELDS:
            if isinstance(data.get(name), str):
                data[name] = json.loads(data[name])
        return cls(**{k: v for k, v in data.items() if k in _FIELD_NAMES})


#: Python type of a summary field -> (Arrow type, Spark DDL type); dicts and lists travel as JSON text.
_COLUMN_TYPES: dict[Any, tuple[pa.DataType, str]] = {
    int: (pa.int64(), "long"),
    float: (pa.float64(), "double"),
    bool: (pa.bool_(), "boolean"),
    str: (pa.string(), "string"),
}


def _column_type(tp: Any) -> tuple[pa.DataType, str]:
    return _COLUMN_TYPES.get(tp) or _COLUMN_TYPES[str]  # dict[...] / list[...]: JSON text


_HINTS = get_type_hints(PartitionSummary)
_FIELD_NAMES = tuple(f.name for f in fields(PartitionSummary))
_JSON_FIELDS = tuple(n for n in _FIELD_NAMES if _HINTS[n] not in _COLUMN_TYPES)
#: One row per partition, returned by the executors' writer (mapInArrow output schema).
SUMMARY_SCHEMA = pa.schema([(n, _column_type(_HINTS[n])[0]) for n in _FIELD_NAMES])
SUMMARY_DDL = ", ".join(f"{n} {_column_type(_HINTS[n])[1]}" for n in _FIELD_NAMES)


@dataclass
class DeliveryReport(DeliveryCounts):
    """One batch's outcome, gathered on the driver from every partition's summary."""

    batch_id: int | None = None
    partitions: int = 0
    #: Python worker pid -> producers that process created (for this configuration).
    producers: dict[int, int] = field(default_factory=dict)
    on_invalid_row: str = "fail"
    #: exactly_once: "committed", "skipped" (committed before: not published again), "recovered"
    #: (recorded before a crash: its commit finished by the brokers' check-backs) or "aborted".
    transaction: str | None = None
    #: exactly_once: half messages the driver committed, those left to check-backs, and rolled back.
    committed_halves: int = 0
    left_to_check_back: int = 0
    rolled_back_halves: int = 0
    #: exactly_once: seconds of the commit phase (record, END_TRANSACTION, mark).
    commit_seconds: float = 0.0
    #: exactly_once through a RocketMQ Proxy: its address (the halves are committed by check-backs alone).
    through_proxy: str | None = None
    #: The longest a task took, from taking its rows to its summary (seconds is the driver's whole call).
    slowest_task_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failed_rows == 0 and not (self.on_invalid_row == "fail" and self.invalid_rows)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @classmethod
    def from_summaries(
        cls,
        summaries: list[PartitionSummary],
        *,
        batch_id: int | None,
        seconds: float,
        on_invalid_row: str,
        max_samples: int = 20,
    ) -> DeliveryReport:
        report = cls(batch_id=batch_id, seconds=seconds, on_invalid_row=on_invalid_row)
        for s in sorted(summaries, key=lambda s: s.partition):
            report.add(s)
            report.partitions += 1
            report.producers[s.pid] = max(report.producers.get(s.pid, 0), s.producers_created)
            report.slowest_task_seconds = max(report.slowest_task_seconds, s.seconds)
        report.topics = dict(sorted(report.topics.items()))
        report.dead_letter_files.sort()
        report.failed_topics = dict(sorted(report.failed_topics.items()))
        report.reserved_left_out = dict(sorted(report.reserved_left_out.items()))
        del report.invalid_samples[max_samples:]
        del report.errors[max_samples:]
        return report

    def line(self) -> str:
        """The one log line per batch."""
        topics = ", ".join(f"{t}={n}" for t, n in self.topics.items()) or "-"
        text = (
            f"RocketMQ batch {self.batch_id if self.batch_id is not None else '-'}: {self.rows} rows -> "
            f"{self.messages} messages, {self.bytes} bytes in {self.requests} requests "
            f"({self.retries} retries, {self.resends} resends) "
            f"over {self.partitions} partitions in {self.seconds:.2f} s ({self.rows_per_second:,.0f} rows/s); "
            f"topics: {topics}"
        )
        if self.timer_rows:
            text += f"; {self.timer_rows} timer rows ({len(self.recall_handles)} recall handles)"
        if self.not_replicated:
            statuses = ", ".join(f"{status}={n}" for status, n in sorted(self.not_replicated.items()))
            text += f"; stored, not yet replicated or flushed: {statuses}"
        if self.reserved_left_out_rows:
            names = ", ".join(f"{name}={n}" for name, n in self.reserved_left_out.items())
            text += f"; {self.reserved_left_out_rows} rows' reserved properties left out ({names})"
        if self.invalid_rows:
            what = {
                "skip": "skipped",
                "dead_letter": f"{self.dead_letter_rows} dead letters in {len(self.dead_letter_files)} files",
            }
            text += f"; {self.invalid_rows} invalid rows ({what.get(self.on_invalid_row, 'failed')})"
        if self.failed_rows:
            per_topic = ", ".join(f"{t}={n}" for t, n in self.failed_topics.items())
            text += f"; {self.failed_rows} rows NOT delivered" + (f" ({per_topic})" if per_topic else "")
        if self.transaction == "skipped":
            text += "; exactly_once: batch committed before, NOT published again"
        elif self.transaction == "recovered":
            text += "; exactly_once: batch recorded before a restart; its commit is finished by check-backs"
        elif self.transaction is not None:
            text += (
                f"; exactly_once {self.transaction}: {self.committed_halves} committed, "
                f"{self.left_to_check_back} left to check-backs, {self.rolled_back_halves} rolled back "
                f"in {self.commit_seconds:.2f} s"
            )
            if self.through_proxy is not None and self.transaction == "committed":
                text += (
                    f" (through the RocketMQ Proxy at {self.through_proxy}: the rows become visible as their "
                    "brokers check the halves back, from transaction_commit_window_ms after each was sent, at "
                    "their next check round; keep the driver up until then, sink.close() waits for them)"
                )
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def raise_for_failures(self) -> None:
        """InvalidRowError (on_invalid_row="fail") or DeliveryError when the batch must not count as done."""
        if self.on_invalid_row == "fail" and self.invalid_rows:
            err: Exception = InvalidRowError(
                f"batch {self.batch_id}: {self.invalid_rows} rows are not valid messages, e.g. "
                + "; ".join(self.invalid_samples[:5])
                + ". Fix the data, or set on_invalid_row='skip' to count and report such rows instead of failing "
                "(on_invalid_row='dead_letter' with dead_letter_path also keeps them as Parquet files)"
            )
        elif self.failed_rows and self.config_errors:
            err = ClusterConfigDeliveryError(
                f"batch {self.batch_id}: {self.failed_rows} of {self.rows} rows were not delivered: "
                + "; ".join(self.config_errors[:3])
                + ". Not resent, as no retry cures this: fix the configuration or the cluster and run the batch again"
            )
        elif self.failed_rows:
            per_topic = ", ".join(f"topic {t}: {n} rows" for t, n in self.failed_topics.items())
            err = DeliveryError(
                f"batch {self.batch_id}: {self.failed_rows} of {self.rows} rows were not delivered"
                + (f" ({per_topic})" if per_topic else "")
                + f": {'; '.join(self.errors[:3]) or 'no detail'}. The batch fails so that Spark replays it "
                "(at least once: delivered rows may repeat, with identical UNIQ_KEY); if brokers need longer "
                "to recover, raise delivery_timeout_ms"
            )
        else:
            return
        err.report = self  # type: ignore[attr-defined]
        raise err


def log_report(report: DeliveryReport) -> None:
    if report.ok:
        log.info("%s", report.line())
    else:
        log.error("%s", report.line())
