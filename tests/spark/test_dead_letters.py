"""on_invalid_row="dead_letter": refused rows in Parquet files, once per batch through task retries and replays."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.errors import ConfigError, DeliveryError, SchemaError
from spark_rocketmq.spark.dead_letters import DEAD_LETTER_COLUMNS, check_columns
from spark_rocketmq.spark.job import WriteJob
from spark_rocketmq.spark.message_ids import batch_context
from spark_rocketmq.spark.options import split_options
from spark_rocketmq.spark.pool import ProducerPool
from spark_rocketmq.spark.report import DeliveryReport, PartitionSummary
from spark_rocketmq.spark.schema import MessageColumns
from spark_rocketmq.spark.sink import settle_dead_letters
from spark_rocketmq.spark.writer import PartitionWriter
from tests.spark.test_writer import StandInProducer, run


def _job(path: Path | str, batch_id: int = 4, run_id: str | None = None) -> WriteJob:
    options, _ = split_options({"topic": "T", "onInvalidRow": "dead_letter", "deadLetterPath": str(path)})
    config = ProducerConfig(namesrv_addr="127.0.0.1:1", group="dead-letter-tests")
    cols = MessageColumns(body="body", tags="tags")
    return WriteJob(config, options, cols, batch_context("query-1", batch_id), dead_letter_run=run_id)


def _batch(first: int, n: int) -> pa.RecordBatch:
    """Rows ``first``..: every third has an empty body (invalid), every fifth a tag with \\x01 (invalid)."""
    ids = list(range(first, first + n))
    return pa.RecordBatch.from_pydict(
        {
            "body": [b"" if i % 3 == 0 else f"row-{i}".encode() for i in ids],
            "tags": ["bad\x01tag" if i % 5 == 0 else "ok" for i in ids],
            "order_id": ids,  # not a message field: kept in the dead letter
        }
    )


def _invalid(first: int, n: int) -> list[int]:
    return [i for i in range(first, first + n) if i % 3 == 0 or i % 5 == 0]


def _letters(path: Path) -> pa.Table:
    return pq.read_table(path)  # every part file under the folder (names starting with _ are skipped)


def _report(summaries: list[PartitionSummary], path: Path, batch_id: int = 4) -> DeliveryReport:
    options, _ = split_options({"onInvalidRow": "dead_letter", "deadLetterPath": str(path)})
    report = DeliveryReport.from_summaries(summaries, batch_id=batch_id, seconds=0.1, on_invalid_row="dead_letter")
    settle_dead_letters(options, summaries, report)
    return report


def test_options_need_both_and_name_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"on_invalid_row='dead_letter' needs option dead_letter_path"):
        split_options({"on_invalid_row": "dead_letter"})
    with pytest.raises(ConfigError, match=r"dead_letter_path is set but on_invalid_row='skip'"):
        split_options({"on_invalid_row": "skip", "dead_letter_path": str(tmp_path)})
    monkeypatch.chdir(tmp_path)
    options, _ = split_options({"onInvalidRow": "dead-letter", "deadLetterPath": "letters"})
    assert options.dead_letter_path == os.path.join(str(tmp_path), "letters")  # executors have other cwds
    with pytest.raises(SchemaError, match=r"\['dead_letter_reason'\] are added to each dead letter"):
        check_columns(["body", "Dead_Letter_Reason"])


def test_refused_rows_are_written_with_their_columns_and_reason_and_the_rest_is_sent(tmp_path: Path) -> None:
    producer = StandInProducer()
    summary = run(producer, [_batch(0, 40), _batch(40, 40)], _job(tmp_path), partition=3)
    invalid = _invalid(0, 80)
    assert (summary.rows, summary.invalid_rows, summary.dead_letter_rows) == (80, len(invalid), len(invalid))
    assert summary.messages == 80 - len(invalid) and summary.failed_rows == 0
    sent = sorted(b for s in producer.delivered() for b in s.bodies)
    assert sent == sorted(f"row-{i}".encode() for i in range(80) if i not in invalid)
    part = tmp_path / "query-1" / "batch-4" / "part-00003.parquet"
    assert summary.dead_letter_files == [str(part)]
    table = pq.read_table(part)
    assert table.column_names == ["body", "tags", "order_id", *DEAD_LETTER_COLUMNS]
    rows = table.to_pylist()
    assert [r["order_id"] for r in rows] == invalid
    assert all(r["dead_letter_row"] == r["order_id"] for r in rows)  # the partition's row index
    assert {(r["dead_letter_batch_id"], r["dead_letter_partition"]) for r in rows} == {(4, 3)}
    by_id = {r["order_id"]: r for r in rows}
    assert by_id[3]["body"] == b"" and by_id[3]["dead_letter_column"] == "body"
    assert by_id[3]["dead_letter_reason"] == "body is empty; RocketMQ refuses empty bodies"
    assert by_id[10]["tags"] == "bad\x01tag" and by_id[10]["dead_letter_column"] == "tags"
    assert os.listdir(part.parent) == ["part-00003.parquet"]  # no temporary file left


def test_a_retried_task_leaves_one_copy_and_an_aborted_one_none(tmp_path: Path) -> None:
    job = _job(tmp_path)
    first = run(StandInProducer(), [_batch(0, 30)], job, partition=0)
    pool = ProducerPool(lambda config: StandInProducer())
    aborted = PartitionWriter(job, partition=0, attempt=1, pool=pool)
    aborted.write(_batch(0, 30))
    assert aborted.abort().dead_letter_files == []
    again = run(StandInProducer(), [_batch(0, 30)], job, partition=0)
    assert first.dead_letter_files == again.dead_letter_files
    report = _report([again], tmp_path)
    assert report.ok and report.dead_letter_files == again.dead_letter_files
    assert report.line().endswith(
        f"; {len(_invalid(0, 30))} invalid rows ({len(_invalid(0, 30))} dead letters in 1 files)"
    )
    assert sorted(_letters(tmp_path)["order_id"].to_pylist()) == _invalid(0, 30)


def test_a_replayed_batch_keeps_the_letters_of_its_last_run_only(tmp_path: Path) -> None:
    job = _job(tmp_path)
    # The first run: two partitions, each with invalid rows.
    _report([run(StandInProducer(), [_batch(0, 30)], job, partition=p) for p in (0, 1)], tmp_path)
    other = _job(tmp_path, batch_id=5)
    _report([run(StandInProducer(), [_batch(100, 30)], other, partition=0)], tmp_path, batch_id=5)
    # The replay of batch 4: the same rows in one partition, 2.
    replay = run(StandInProducer(), [_batch(0, 30), _batch(0, 30)], job, partition=2)
    report = _report([replay], tmp_path)
    assert os.listdir(tmp_path / "query-1" / "batch-4") == ["part-00002.parquet"]
    assert report.dead_letter_files == [str(tmp_path / "query-1" / "batch-4" / "part-00002.parquet")]
    assert sorted(_letters(tmp_path / "query-1" / "batch-4")["order_id"].to_pylist()) == sorted(_invalid(0, 30) * 2)
    assert sorted(_letters(tmp_path / "query-1" / "batch-5")["order_id"].to_pylist()) == _invalid(100, 30)


def test_a_write_with_no_batch_id_has_a_folder_of_its_own(tmp_path: Path) -> None:
    summary = run(StandInProducer(), [_batch(0, 10)], _job(tmp_path, run_id="abc123"))
    assert summary.dead_letter_files == [str(tmp_path / "query-1" / "write-abc123" / "part-00000.parquet")]


def test_rows_that_cannot_be_written_fail_the_batch_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    summary = run(StandInProducer(), [_batch(0, 30)], _job(blocker))
    invalid = len(_invalid(0, 30))
    assert (summary.failed_rows, summary.dead_letter_rows, summary.dead_letter_files) == (invalid, 0, [])
    report = DeliveryReport.from_summaries([summary], batch_id=4, seconds=0.1, on_invalid_row="dead_letter")
    with pytest.raises(DeliveryError, match=rf"{invalid} invalid rows not written to dead_letter_path='{blocker}'"):
        report.raise_for_failures()
