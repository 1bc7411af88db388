"""Both sink paths and the ready jobs against a real RocketMQ, each topic read back by the kit's Java consumer.

foreachBatch (a batch DataFrame and a streaming query), format("rocketmq") (batch write and streaming
query), jobs/publish_batch.py and jobs/publish_stream.py run as a user runs them (each against one kit of a tier
run: each starts a Spark of its own, and what they add to the sink paths does not depend on the broker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink

from .conftest import ONCE
from .kit import Kit
from .readback import assert_each_body_once, sha256

GROUP = "spark_rocketmq_real_sink"
ROWS = 5000
JOBS = Path(__file__).resolve().parents[2] / "jobs"


def frame(spark, path: str, rows: int = ROWS):
    return spark.range(0, rows, numPartitions=4).select(
        F.concat(F.lit(f"real-{path}-"), F.col("id").cast("string")).alias("body"),
        F.lit(path).alias("tags"),
        F.concat(F.lit("k-"), F.col("id").cast("string")).alias("keys"),
        F.create_map(F.lit("row"), F.col("id").cast("string")).alias("properties"),
    )


def expected_bodies(path: str, rows: int = ROWS) -> list[str]:
    return [f"real-{path}-{i}" for i in range(rows)]


def assert_rows_stored(stored: list[dict], path: str, rows: int = ROWS) -> None:
    """Every row once, with its tags, keys and its own property; every row its own UNIQ_KEY."""
    assert_each_body_once(stored, expected_bodies(path, rows))
    row_of = {sha256(b): i for i, b in enumerate(expected_bodies(path, rows))}
    for m in stored:
        i = row_of[m["bodySha256"]]
        assert (m["tags"], m["keys"], m["props"]["row"]) == (path, f"k-{i}", str(i)), m
    assert len({m["uniq"] for m in stored}) == rows


def write_json_files(folder: Path, files: int, rows_per_file: int) -> list[str]:
    """Input files of {"id", "name"} rows; returns the names (the bodies the tests publish)."""
    folder.mkdir(parents=True)
    names = []
    for f in range(files):
        part = [{"id": f * rows_per_file + i, "name": f"file-row-{f}-{i}"} for i in range(rows_per_file)]
        (folder / f"part-{f:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in part))
        names += [r["name"] for r in part]
    return names


def file_stream(spark, folder: Path):
    return (
        spark.readStream.schema("id long, name string")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .select(F.col("name").alias("body"), F.col("name").alias("keys"))
    )


def finish(query) -> None:
    try:
        assert query.awaitTermination(240), "the streaming query did not finish in 240 s"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()


def stream_through(spark: Any, tmp_path: Path, publish: Callable[[Any, int], None], sink: RocketMQSink) -> None:
    """Run the files under tmp_path/in through ``publish`` as a foreachBatch stream, a file a micro-batch,
    until every file is read; the sink is closed whatever happened."""
    query = (
        file_stream(spark, tmp_path / "in")
        .writeStream.foreachBatch(publish)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finish(query)
    finally:
        sink.close()


def test_foreach_batch_delivers_every_row(spark, kit: Kit, real_addr: str, real_topic: str) -> None:
    sink = RocketMQSink(namesrv_addr=real_addr, topic=real_topic, group=GROUP)
    report = sink(frame(spark, "foreachbatch"), 0)
    assert (report.rows, report.messages, report.failed_rows, report.invalid_rows) == (ROWS, ROWS, 0, 0)
    assert report.topics == {real_topic: ROWS}
    assert_rows_stored(kit.dump(real_topic, at_least=ROWS), "foreachbatch")


def test_a_replayed_batch_keeps_its_message_ids(spark, kit: Kit, real_addr: str, real_topic: str) -> None:
    """At least once: a batch called again is stored again, its ids the same but for the time field.

    Outside a streaming query the time field (characters 20-27) is the driver's clock when the batch
    starts (spark_rocketmq/spark/message_ids.py); a query's replay keeps it from the offset log.
    """
    sink = RocketMQSink(namesrv_addr=real_addr, topic=real_topic, group=GROUP)
    df = frame(spark, "replay", rows=1000)
    sink(df, 7)
    sink(df, 7)
    stored = kit.dump(real_topic, at_least=2000)
    assert len(stored) == 2000
    ids: dict[str, set[str]] = {}
    for m in stored:
        ids.setdefault(m["bodySha256"], set()).add(m["uniq"][:20] + m["uniq"][28:])
    assert len(ids) == 1000 and all(len(u) == 1 for u in ids.values())


def test_format_rocketmq_batch_write(spark, kit: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    (
        frame(spark, "format")
        .write.format("rocketmq")
        .option("namesrvAddr", real_addr)
        .option("topic", real_topic)
        .option("producerGroup", GROUP)
        .option("reportDir", str(tmp_path))
        .mode("append")
        .save()
    )
    (entry,) = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert (entry["messages"], entry["state"]) == (ROWS, "committed")
    assert_rows_stored(kit.dump(real_topic, at_least=ROWS), "format")


def test_foreach_batch_streaming_query(spark, kit: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    names = write_json_files(tmp_path / "in", files=3, rows_per_file=500)
    sink = RocketMQSink(namesrv_addr=real_addr, topic=real_topic, group=GROUP)
    stream_through(spark, tmp_path, sink, sink)
    stored = kit.dump(real_topic, at_least=len(names))
    assert_each_body_once(stored, names)
    assert all(m["keys"] for m in stored) and sink.totals["rows"] == len(names)


def test_format_rocketmq_streaming_query(spark, kit: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    names = write_json_files(tmp_path / "in", files=2, rows_per_file=500)
    query = (
        file_stream(spark, tmp_path / "in")
        .writeStream.format("rocketmq")
        .option("namesrvAddr", real_addr)
        .option("topic", real_topic)
        .option("reportDir", str(tmp_path / "reports"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    assert_each_body_once(kit.dump(real_topic, at_least=len(names)), names)
    reports = [json.loads(x) for x in (tmp_path / "reports" / "reports.jsonl").read_text().splitlines()]
    assert [(r["batch_id"], r["messages"]) for r in reports] == [(0, 500), (1, 500)]


def run_job(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    proc = subprocess.run(
        [sys.executable, str(JOBS / script), "--master", "local[2]", *args],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


@getattr(pytest.mark, ONCE)(4)  # both jobs against the 4.9.8 kit of a tier run: the 5.x kit's pytest is the longer
def test_publish_batch_job(kit: Kit, real_addr: str, real_topic: str, tmp_path) -> None:
    names = write_json_files(tmp_path / "in", files=2, rows_per_file=300)
    args = ("--namesrv-addr", real_addr, "--topic", real_topic, "--input", str(tmp_path / "in"))
    run_job("publish_batch.py", *args)
    stored = kit.dump(
        real_topic, at_least=len(names)
    )  # the job's bodies are its rows as JSON: counted, not hashed here
    assert len(stored) == len(names) == len({m["bodySha256"] for m in stored}) == len({m["uniq"] for m in stored})


@getattr(pytest.mark, ONCE)(4)
def test_publish_stream_job(kit: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    names = write_json_files(tmp_path / "in", files=2, rows_per_file=150)
    proc = run_job(
        "publish_stream.py",
        "--namesrv-addr", real_addr, "--topic", real_topic, "--input", str(tmp_path / "in"),
        "--checkpoint", str(tmp_path / "ck"), "--available-now",
    )  # fmt: skip
    assert "300 rows, 300 messages published" in proc.stdout
    stored = kit.dump(real_topic, at_least=len(names))
    assert len(stored) == len(names) and len({m["uniq"] for m in stored}) == len(names)
