"""Settings shared by the jobs: a TOML file (conf/*.toml) overlaid by command-line flags.

A conf file has two tables: [rocketmq] holds the sink's options (producer options in snake_case,
plus topic and on_invalid_row) and [job] holds the job's own settings (input, format, checkpoint,
master, ...). Flags given on the command line win over the file.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

ROCKETMQ_FLAGS = {
    "namesrv_addr": "NameServer address list, host:port[;host:port]",
    "topic": "topic for every row (overrides a topic column)",
    "group": "producer group",
    "on_invalid_row": "fail (default) or skip",
    "max_message_size": "largest message or batch request in bytes (4 MiB default); caps max_request_bytes",
    "transaction_log_dir": "with --exactly-once: the transaction log's directory (local path, hdfs://, s3://)",
}


#: Input bytes one publishing task reads when the job sizes its tasks itself (Spark's advisory partition size).
DEFAULT_BYTES_PER_TASK = 64 * 1024 * 1024
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str | int, what: str = "--bytes-per-task") -> int:
    """Bytes from 67108864, 64m, 64MiB, 512k, 1g (binary units, as Spark's size settings)."""
    match = _SIZE.match(str(text))
    if not match or int(match.group(1)) <= 0:
        sys.exit(f"{what} {text!r}: expected a positive size such as 64m, 512k or 1g (bytes when no unit)")
    return int(match.group(1)) * 1024 ** "_kmg".index(match.group(2).lower() or "_")


def tasks_for(input_bytes: int, bytes_per_task: int) -> int:
    """Publishing tasks for an input: one per ``bytes_per_task`` started, at least one."""
    return max(1, math.ceil(input_bytes / bytes_per_task))


def add_sizing_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--bytes-per-task",
        dest="bytes_per_task",
        help=f"input bytes each publishing task reads, e.g. 64m (default 64m): {what}",
    )


def load_tables(path: str | None, tables: tuple[str, ...]) -> list[dict[str, Any]]:
    """The named tables of a TOML conf file, in that order (empty when no file is given)."""
    if not path:
        return [{} for _ in tables]
    conf_path = Path(path)
    if not conf_path.is_file():
        sys.exit(f"conf file {path!r} not found: pass --conf conf/local.toml or a file of your own")
    with conf_path.open("rb") as fh:
        data = tomllib.load(fh)
    unknown = set(data) - set(tables)
    if unknown:
        expected = " and ".join(f"[{t}]" for t in tables)
        sys.exit(f"conf file {path}: unknown table(s) {sorted(unknown)}; expected {expected}")
    return [dict(data.get(t, {})) for t in tables]


def load_conf(path: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the [rocketmq] and [job] tables of a TOML conf file (empty when no file is given)."""
    rocketmq, job = load_tables(path, ("rocketmq", "job"))
    return rocketmq, job


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", help="TOML conf file with [rocketmq] and [job] tables (see conf/)")
    parser.add_argument("--master", help="Spark master when not run by spark-submit (default local[2])")
    for name, text in ROCKETMQ_FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, help=text)
    parser.add_argument(
        "--exactly-once",
        dest="exactly_once",
        action="store_const",
        const=True,
        help="delivery_guarantee=exactly_once: each row visible once (RocketMQ transactional messages); "
        "needs --transaction-log-dir",
    )
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="any other sink option, repeatable"
    )


def merged(
    args: argparse.Namespace, job_keys: list[str], conf: tuple[dict[str, Any], dict[str, Any]] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sink options and job settings: conf file (or the tables given) first, flags on top."""
    rocketmq, job = conf if conf is not None else load_conf(args.conf)
    for name in ROCKETMQ_FLAGS:
        value = getattr(args, name)
        if value is not None:
            rocketmq[name] = value
    if getattr(args, "exactly_once", None):
        rocketmq["delivery_guarantee"] = "exactly_once"
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"--option {item!r}: expected KEY=VALUE")
        rocketmq[key.strip()] = value
    for key in job_keys:
        value = getattr(args, key, None)
        if value is not None:
            job[key] = value
    if args.master:
        job["master"] = args.master
    return rocketmq, job


def spark_session(app_name: str, job: dict[str, Any]):  # -> SparkSession
    """The active session under spark-submit, else a local one running this interpreter's workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # plain python, not spark-submit
        builder = builder.master(str(job.get("master", "local[2]")))
        builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        builder = builder.config("spark.sql.shuffle.partitions", "4")
        builder = builder.config("spark.pyspark.python", sys.executable)
    for key, value in (job.get("spark") or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(str(job.get("log_level", "WARN")))
    return spark


def publish_until_done(df: Any, sink: Any, job: dict[str, Any], name: str, checkpoint: str) -> list[Any]:
    """Publish a streaming DataFrame through ``sink`` (foreachBatch) until the query ends, or the job's
    max_batches or timeout_seconds is reached; the sink is closed (exactly_once: it waits for the halves
    left to check-backs). The DeliveryReport of every micro-batch; the query's error raised."""
    reports: list[Any] = []

    def publish(batch: Any, batch_id: int) -> None:
        reports.append(sink(batch, batch_id))

    writer = df.writeStream.foreachBatch(publish).option("checkpointLocation", str(job.get("checkpoint", checkpoint)))
    if job.get("available_now"):
        writer = writer.trigger(availableNow=True)
    elif job.get("trigger_seconds"):
        writer = writer.trigger(processingTime=f"{float(job['trigger_seconds'])} seconds")
    query = writer.queryName(name).start()
    deadline = time.monotonic() + float(job["timeout_seconds"]) if job.get("timeout_seconds") else None
    max_batches = int(job["max_batches"]) if job.get("max_batches") else None
    try:
        while query.isActive:
            if max_batches is not None and len(reports) >= max_batches:
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            query.awaitTermination(0.5)
    finally:
        if query.isActive:
            query.stop()
        sink.close()
    if query.exception():
        raise query.exception()
    return reports
