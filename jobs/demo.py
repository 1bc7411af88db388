"""`make run`: a local NameServer + two brokers, the streaming job on a bounded input, and what arrived.

Starts a LocalCluster on free loopback ports, writes a few JSON files of orders, runs
jobs/publish_stream.py on them in Spark local mode (trigger availableNow), reads every stored
message back from the brokers and prints a summary, reads the topics back into a DataFrame with
spark.read.format("rocketmq") (PySpark 4.1+), then stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import publish_stream
from jobconf import load_conf, spark_session


def write_orders(directory: Path, files: int, rows_per_file: int, topics: list[str]) -> int:
    rng = random.Random(7)
    directory.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in range(files):
        with (directory / f"orders-{f:03d}.json").open("w") as fh:
            for _ in range(rows_per_file):
                order = {
                    "order_id": f"o-{n}",
                    "customer": f"c-{rng.randrange(500)}",
                    "amount": round(rng.uniform(1, 500), 2),
                    "status": rng.choice(["created", "paid", "shipped"]),
                }
                row = {
                    "topic": topics[n % len(topics)],
                    "tags": order["status"],
                    "keys": order["order_id"],
                    "sharding_key": order["customer"],
                    "body": json.dumps(order),
                }
                fh.write(json.dumps(row) + "\n")
                n += 1
    return n


def read_topics(spark: Any, namesrv_addr: str, topics: list[str]) -> tuple[int, set[str], float] | None:
    """(messages, distinct message ids, seconds) of the topics read with spark.read.format("rocketmq");
    None on a PySpark without Python data sources (before 4.1)."""
    from spark_rocketmq.spark.compat import supports_datasource

    if not supports_datasource():
        print('(spark.read.format("rocketmq") needs PySpark 4.1+: the read back is skipped)')
        return None
    from spark_rocketmq import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    started = time.monotonic()
    df = spark.read.format("rocketmq").option("namesrvAddr", namesrv_addr).option("topic", ",".join(topics)).load()
    ids = {r.msg_id for r in df.select("msg_id").collect()}
    rows = df.count()
    return rows, ids, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conf", default="conf/local.toml")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=25_000)
    parser.add_argument("--show", type=int, default=3, help="decoded messages to print")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_rocketmq").setLevel(logging.INFO)

    from spark_rocketmq.local import LocalCluster

    rocketmq, job = load_conf(args.conf)
    topics = ["Orders", "OrderAudit"]
    rocketmq.pop("topic", None)  # route each row by its topic column
    work = Path(tempfile.mkdtemp(prefix="spark-rocketmq-demo-"))
    try:
        with LocalCluster(brokers=2, namesrvs=1, store_dir=str(work / "store")) as cluster:
            for topic in topics:
                cluster.create_topic(topic, queues=4)
            print(f"local cluster up: NameServer {cluster.namesrv_addr}, brokers broker-a and broker-b")
            rows = write_orders(work / "input", args.files, args.rows_per_file, topics)
            print(f"input: {rows} orders in {args.files} JSON files under {work / 'input'}")
            rocketmq["namesrv_addr"] = cluster.namesrv_addr
            job.update(
                input=str(work / "input"),
                format="json",
                checkpoint=str(work / "checkpoint"),
                available_now=True,
                schema="topic STRING, tags STRING, keys STRING, sharding_key STRING, body STRING",
                rows_per_batch=2,
            )
            spark = spark_session("make-run", job)
            started = time.monotonic()
            reports = publish_stream.run(rocketmq, job, spark)
            seconds = time.monotonic() - started
            read_back = read_topics(spark, cluster.namesrv_addr, topics)
            spark.stop()

            stored = [m for t in topics for m in cluster.messages(t)]
            published = sum(r.messages for r in reports)
            ids = {m.uniq_key for m in stored}
            print()
            print(f"micro-batches : {len(reports)}")
            print(f"rows          : {sum(r.rows for r in reports)} in, {published} messages published")
            print(f"stored        : {len(stored)} messages, {len(ids)} distinct message ids")
            per_topic = Counter(m.topic for m in stored)
            per_broker = Counter(m.broker_name for m in stored)
            print(f"topics        : {dict(per_topic)}")
            print(f"brokers       : {dict(per_broker)}")
            print(f"throughput    : {published / seconds:,.0f} rows/s end to end ({seconds:.1f} s incl. query start)")
            print()
            for m in stored[: args.show]:
                print(
                    f"  {m.topic} {m.broker_name} q{m.queue_id}@{m.queue_offset} id={m.uniq_key} "
                    f"tags={m.tags} keys={m.keys} body={m.body[:80].decode()}"
                )
            if read_back is not None:
                read_rows, read_ids, read_seconds = read_back
                print(
                    f"\nread back    : {read_rows} messages, {len(read_ids)} distinct ids with "
                    f'spark.read.format("rocketmq") in {read_seconds:.1f} s'
                )
            if len(stored) != rows or len(ids) != rows:
                print(f"MISMATCH: {rows} rows in, {len(stored)} stored, {len(ids)} distinct ids", file=sys.stderr)
                return 1
            if read_back is not None and (read_back[0] != rows or read_back[1] != ids):
                print(f"MISMATCH: {rows} rows in, {read_back[0]} read back", file=sys.stderr)
                return 1
            print("\nevery row arrived exactly once" + (", and was read back once" if read_back else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
