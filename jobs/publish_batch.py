"""Batch job: read files (JSON, CSV, Parquet), publish every row to RocketMQ, print the delivery report.

    python jobs/publish_batch.py --conf conf/local.toml --input data/orders --format json
    spark-submit jobs/publish_batch.py --conf conf/cluster.example.toml --input s3a://bucket/orders

Rows become messages as the sink's column table says: a `body` column is used as it is; without
one, the whole row is sent as JSON (to_json(struct(*))). The job exits non-zero when any row could
not be delivered; running it again republishes the same rows with the same message ids.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobconf import add_common_flags, merged, spark_session

JOB_KEYS = ["input", "format", "partitions"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_flags(parser)
    parser.add_argument("--input", help="file or directory to read")
    parser.add_argument("--format", choices=["json", "csv", "parquet"], help="input file format (default json)")
    parser.add_argument("--partitions", type=int, help="repartition to this many tasks before publishing")
    return parser.parse_args(argv)


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
    if job.get("partitions"):
        df = df.repartition(int(job["partitions"]))
    return RocketMQSink(rocketmq)(df, 0)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_rocketmq").setLevel(logging.INFO)
    args = parse_args(argv)
    rocketmq, job = merged(args, JOB_KEYS)
    report = run(rocketmq, job)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
