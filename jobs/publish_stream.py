"""Streaming job: a file directory (JSON, CSV, Parquet) or the rate source -> RocketMQ, via foreachBatch.

    python jobs/publish_stream.py --conf conf/local.toml --input data/in --format json --available-now
    spark-submit jobs/publish_stream.py --conf conf/cluster.example.toml

Rows become messages as the sink's column table says: a `body` column is used as it is; without
one, the whole row is sent as JSON (to_json(struct(*))). Settings come from the conf file's [job]
table and flags (flags win). The query keeps its progress in the checkpoint location, so a restart
resumes where it stopped and a failed micro-batch is replayed (at-least-once, same message ids).

Task sizing: a file micro-batch is read, and published, by tasks of at most ``--bytes-per-task`` of
input (default 64m; it sets spark.sql.files.maxPartitionBytes): small files are packed together, so
a small micro-batch is a few tasks, and a large one spreads over one task per 64m.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobconf import (
    DEFAULT_BYTES_PER_TASK,
    add_common_flags,
    add_sizing_flag,
    merged,
    parse_size,
    publish_until_done,
    spark_session,
)

JOB_KEYS = [
    "input",
    "format",
    "schema",
    "checkpoint",
    "rate",
    "rows_per_batch",
    "available_now",
    "max_batches",
    "trigger_seconds",
    "timeout_seconds",
    "bytes_per_task",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_flags(parser)
    parser.add_argument("--input", help="directory to watch for new files; omit to use the rate source")
    parser.add_argument("--format", choices=["json", "csv", "parquet"], help="input file format (default json)")
    parser.add_argument("--schema", help="DDL schema of the input files (default: inferred from present files)")
    parser.add_argument("--checkpoint", help="checkpoint location (default var/checkpoints/publish_stream)")
    parser.add_argument("--rate", type=int, help="rate source: rows per second")
    parser.add_argument("--rows-per-batch", dest="rows_per_batch", type=int, help="file source: maxFilesPerTrigger")
    parser.add_argument(
        "--available-now",
        dest="available_now",
        action="store_const",
        const=True,
        help="process what is there now, then stop (bounded run)",
    )
    parser.add_argument("--max-batches", dest="max_batches", type=int, help="stop after this many micro-batches")
    parser.add_argument("--trigger-seconds", dest="trigger_seconds", type=float, help="micro-batch interval")
    parser.add_argument("--timeout-seconds", dest="timeout_seconds", type=float, help="stop after this long")
    add_sizing_flag(parser, "a file micro-batch's largest task (spark.sql.files.maxPartitionBytes)")
    return parser.parse_args(argv)


def source_frame(spark: Any, job: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    if job.get("input"):
        per_task = parse_size(job.get("bytes_per_task") or DEFAULT_BYTES_PER_TASK)
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(per_task))
        fmt = str(job.get("format", "json"))
        reader = spark.readStream.format(fmt)
        if fmt == "csv":
            reader = reader.option("header", "true")
        if job.get("rows_per_batch"):
            reader = reader.option("maxFilesPerTrigger", int(job["rows_per_batch"]))
        schema = job.get("schema")
        if not schema:
            schema = spark.read.format(fmt).option("header", "true").load(str(job["input"])).schema
        df = reader.schema(schema).load(str(job["input"]))
    else:
        df = spark.readStream.format("rate").option("rowsPerSecond", int(job.get("rate", 1000))).load()
    if "body" not in df.columns:
        keep = [c for c in ("topic", "tags", "keys", "sharding_key") if c in df.columns]
        df = df.select(F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("body"), *keep)
    return df


def run(rocketmq: dict[str, Any], job: dict[str, Any], spark: Any | None = None) -> list[Any]:
    """Run the query to its end (bounded) and return the DeliveryReport of every micro-batch."""
    from spark_rocketmq import RocketMQSink

    spark = spark or spark_session("publish_stream", job)
    df = source_frame(spark, job)
    return publish_until_done(df, RocketMQSink(rocketmq), job, "publish_stream", "var/checkpoints/publish_stream")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_rocketmq").setLevel(logging.INFO)
    args = parse_args(argv)
    rocketmq, job = merged(args, JOB_KEYS)
    if not job.get("input") and not (job.get("max_batches") or job.get("timeout_seconds")):
        sys.exit("the rate source never ends: give --max-batches or --timeout-seconds for a bounded run")
    reports = run(rocketmq, job)
    rows = sum(r.rows for r in reports)
    messages = sum(r.messages for r in reports)
    print(f"publish_stream: {len(reports)} micro-batches, {rows} rows, {messages} messages published")
    return 0


if __name__ == "__main__":
    sys.exit(main())
