"""Batch job: read files (JSON, CSV, Parquet), publish every row to RocketMQ, print the delivery report.

    python jobs/publish_batch.py --conf conf/local.toml --input data/orders --format json
    spark-submit jobs/publish_batch.py --conf conf/cluster.example.toml --input s3a://bucket/orders

Rows become messages as the sink's column table says: a `body` column is used as it is; without
one, the whole row is sent as JSON (to_json(struct(*))). The job exits non-zero when any row could
not be delivered.

Running it again over the same input republishes the same rows with the same message ids
(UNIQ_KEY), so a consumer can drop the repeats of a failed or doubled run:

- the id namespace is derived from what identifies the run: the input as given, its format, every
  input file's path, size and modification time, the topic option and the number of partitions;
  ``--id-namespace`` replaces it with a name of your own (you then answer for giving another name
  to other data);
- the ids' time field is the newest input file's modification time (never later than now);
- rows are hash-partitioned and sorted by their message columns before publishing, so each row
  gets the same (partition, row index) on every run, whatever the file splits or the cluster size.
  That costs one shuffle of the input.

Task sizing: the rows are published from one task per ``--bytes-per-task`` of input files (default
64m, by the files' sizes as listed, so a rerun over the same files gets the same count): 20,000 rows
of JSON are one task, 10 GB of files 160. ``--partitions N`` sets the number of tasks instead.

Changing an input file (its size or modification time) gives the run a new namespace, and so new
ids, rather than ids that other rows had before.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobconf import (
    DEFAULT_BYTES_PER_TASK,
    add_common_flags,
    add_sizing_flag,
    merged,
    parse_size,
    spark_session,
    tasks_for,
)

JOB_KEYS = ["input", "format", "partitions", "bytes_per_task"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_flags(parser)
    parser.add_argument("--input", help="file or directory to read")
    parser.add_argument("--format", choices=["json", "csv", "parquet"], help="input file format (default json)")
    parser.add_argument(
        "--partitions", type=int, help="publish from this many tasks (default: one per --bytes-per-task of input)"
    )
    add_sizing_flag(parser, "the number of tasks is the input files' total size over it")
    parser.add_argument(
        "--id-namespace", dest="id_namespace", help="name the run's message ids (default: derived from the input)"
    )
    return parser.parse_args(argv)


#: Columns the sink reads: they decide a row's message, and so its place in the publishing order.
MESSAGE_COLUMNS = ("body", "topic", "tags", "keys", "properties", "delay_level", "sharding_key")


def input_files(spark: Any, path: str) -> list[tuple[str, int, int]]:
    """(path, size, modification epoch ms) of every file a reader of ``path`` reads, sorted."""
    from pyspark.sql import functions as F

    listing = (
        spark.read.format("binaryFile")
        .load(path)
        .select("path", "length", F.expr("unix_millis(modificationTime)").alias("mtime"))
        .collect()
    )
    return sorted((str(r["path"]), int(r["length"]), int(r["mtime"])) for r in listing)


def run_identity(
    job: dict[str, Any], rocketmq: dict[str, Any], files: Iterable[tuple[str, int, int]], partitions: int
) -> str:
    """The id namespace of a run: equal for reruns over the same input and settings, different otherwise."""
    what = {
        "input": str(job["input"]),
        "format": str(job.get("format", "json")),
        "topic": rocketmq.get("topic"),
        "partitions": partitions,
        "files": [list(f) for f in files],
    }
    digest = hashlib.blake2b(json.dumps(what, sort_keys=True).encode(), digest_size=16).hexdigest()
    return f"publish_batch:{digest}"


def id_time_ms(files: Iterable[tuple[str, int, int]], now_ms: int | None = None) -> int:
    """The ids' time field: the newest input file's modification time, never later than now."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return min(max((mtime for _p, _s, mtime in files), default=now), now)


def stable_order(df: Any, partitions: int) -> Any:
    """Each row at the same (partition, row index) on every run: hash-partition and sort by content."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    keys = []
    for field in df.schema.fields:
        if field.name in MESSAGE_COLUMNS:
            col = F.col(f"`{field.name}`")
            keys.append(F.to_json(col) if isinstance(field.dataType, MapType) else col)  # maps are not orderable
    return df.repartition(partitions, *keys).sortWithinPartitions(*keys)


def publishing_tasks(job: dict[str, Any], files: Iterable[tuple[str, int, int]]) -> int:
    """--partitions when given, else one task per bytes_per_task of input (by the listed file sizes)."""
    if job.get("partitions"):
        if int(job["partitions"]) < 1:
            sys.exit(f"--partitions {job['partitions']}: expected 1 or more")
        return int(job["partitions"])
    per_task = parse_size(job.get("bytes_per_task") or DEFAULT_BYTES_PER_TASK)
    return tasks_for(sum(size for _path, size, _mtime in files), per_task)


def run(rocketmq: dict[str, Any], job: dict[str, Any], spark: Any | None = None) -> Any:
    """Publish the input once; return the DeliveryReport."""
    from pyspark.sql import functions as F

    from spark_rocketmq import RocketMQSink

    if not job.get("input"):
        sys.exit("give --input (or input in the conf file's [job] table)")
    spark = spark or spark_session("publish_batch", job)
    fmt = str(job.get("format", "json"))
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    df = reader.load(str(job["input"]))
    if "body" not in df.columns:
        keep = [c for c in ("topic", "tags", "keys", "sharding_key") if c in df.columns]
        df = df.select(F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("body"), *keep)
    files = input_files(spark, str(job["input"]))
    partitions = publishing_tasks(job, files)
    options = dict(rocketmq)
    if not any(k.replace("_", "").lower() == "idnamespace" for k in options):  # else the user's own name
        options["id_namespace"] = run_identity(job, rocketmq, files, partitions)
    sink = RocketMQSink(options)
    try:
        return sink(stable_order(df, partitions), 0, id_time_ms=id_time_ms(files))
    finally:
        # exactly_once: halves whose COMMIT was not confirmed in the commit window are settled by their
        # brokers' check-backs, which only a live producer of the group answers: close() waits for them.
        sink.close()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_rocketmq").setLevel(logging.INFO)
    args = parse_args(argv)
    rocketmq, job = merged(args, JOB_KEYS)
    if args.id_namespace:
        rocketmq["id_namespace"] = args.id_namespace
    report = run(rocketmq, job)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
