"""Streaming job: a RocketMQ topic -> an optional SQL transform -> another RocketMQ topic.

    python jobs/relay.py --conf conf/relay.toml --available-now
    spark-submit jobs/relay.py --conf conf/relay.toml --exactly-once --transaction-log-dir hdfs:///rmq/txlog

The conf file has three tables: [source] holds the reader's options (topic, startingOffsets,
subExpression, consumerGroup, ...; namesrv_addr defaults to [rocketmq]'s), [rocketmq] the sink's
(the destination topic, delivery_guarantee, ...), [job] the job's own settings (checkpoint, sql,
available_now, max_batches, ...). Flags win over the file.

The stream of messages is the temporary view ``messages`` (the read schema: topic, keys, tags, body,
properties, ...); ``sql`` selects from it what to publish, with the sink's columns (body, and keys,
tags, properties as wanted). Without ``sql`` every message is republished as it is.

With ``delivery_guarantee = "exactly_once"`` every input message is published exactly once across
driver restarts and retried tasks: the source's offsets are in the checkpoint, each micro-batch is read
again identically when replayed, and the sink's transaction log knows which micro-batches committed
(docs/reading.md, "Exactly once from topic to topic").
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobconf import add_common_flags, load_tables, merged, publish_until_done, spark_session

JOB_KEYS = ["checkpoint", "sql", "available_now", "max_batches", "trigger_seconds", "timeout_seconds"]
#: The columns republished when no sql is given.
REPUBLISHED = ["body", "keys", "tags", "properties"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_flags(parser)
    parser.add_argument("--source-topic", dest="source_topic", help="the topic to read (source table's topic)")
    parser.add_argument("--checkpoint", help="checkpoint location (default var/checkpoints/relay)")
    parser.add_argument("--sql", help="SELECT ... FROM messages: what to publish (default: every message as it is)")
    parser.add_argument(
        "--available-now",
        dest="available_now",
        action="store_const",
        const=True,
        help="relay what is in the topic now, then stop (bounded run)",
    )
    parser.add_argument("--max-batches", dest="max_batches", type=int, help="stop after this many micro-batches")
    parser.add_argument("--trigger-seconds", dest="trigger_seconds", type=float, help="micro-batch interval")
    parser.add_argument("--timeout-seconds", dest="timeout_seconds", type=float, help="stop after this long")
    return parser.parse_args(argv)


def load(argv: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(reader options, sink options, job settings) from the conf file and flags."""
    args = parse_args(argv)
    source, rocketmq, job = load_tables(args.conf, ("source", "rocketmq", "job"))
    rocketmq, job = merged(args, JOB_KEYS, (rocketmq, job))
    if args.source_topic:
        source["topic"] = args.source_topic
    return source, rocketmq, job


def messages_frame(spark: Any, source: dict[str, Any], rocketmq: dict[str, Any]) -> Any:
    """The source topic as a stream of messages."""
    from spark_rocketmq.spark.datasource import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    options = {"namesrvAddr": rocketmq.get("namesrv_addr"), **source}
    reader = spark.readStream.format("rocketmq")
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, str(value).lower() if isinstance(value, bool) else str(value))
    return reader.load()


def run(source: dict[str, Any], rocketmq: dict[str, Any], job: dict[str, Any], spark: Any | None = None) -> list[Any]:
    """Run the relay to its end (bounded) and return the DeliveryReport of every micro-batch."""
    from spark_rocketmq import RocketMQSink

    spark = spark or spark_session("relay", job)
    messages = messages_frame(spark, source, rocketmq)
    messages.createOrReplaceTempView("messages")
    out = spark.sql(str(job["sql"])) if job.get("sql") else messages.select(*REPUBLISHED)
    return publish_until_done(out, RocketMQSink(rocketmq), job, "relay", "var/checkpoints/relay")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_rocketmq").setLevel(logging.INFO)
    source, rocketmq, job = load(argv)
    if not source.get("topic"):
        sys.exit("give the topic to read: [source] topic in the conf file, or --source-topic")
    if not job.get("available_now") and not (job.get("max_batches") or job.get("timeout_seconds")):
        sys.exit("a relay reads on for ever: give --available-now, --max-batches or --timeout-seconds")
    reports = run(source, rocketmq, job)
    rows = sum(r.rows for r in reports)
    messages = sum(r.messages for r in reports)
    print(f"relay: {len(reports)} micro-batches, {rows} messages read, {messages} published")
    return 0


if __name__ == "__main__":
    sys.exit(main())
