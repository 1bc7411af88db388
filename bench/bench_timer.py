"""Timer rows through a streaming query: rows/s of the sink when every row has a delivery time, and a check
that a consumer sees each row once and none before its time.

A streaming query (file source, parquet, ``--files`` files taken one per micro-batch, foreachBatch with
``RocketMQSink``) publishes ``--rows`` rows whose ``deliver_time`` is the micro-batch's
current_timestamp() plus 0..``--spread-s`` seconds. Each timer row is one SEND_MESSAGE_V2 request (a
broker ignores delivery times inside a batch). Printed: each micro-batch's report line and the rows/s
of the sink over the whole query; then, with ``--dump RMQ``, the topic is read back with the kit's Java
consumer (``rmq dump``) until every row is there: rows stored, distinct ids, and how many were stored
before their TIMER_DELIVER_MS less the broker's precision (1 s), which must be none.

    python bench/bench_timer.py --namesrv-addr 127.0.0.1:9877 --topic TimerBench \\
        --dump ../shared/rocketmq-5.3.3/rmq
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRECISION_MS = 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namesrv-addr", required=True)
    parser.add_argument("--topic", default="TimerBench")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--spread-s", type=int, default=60)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--in-flight", type=int, default=16, help="max_in_flight_requests_per_task (one request per timer row)"
    )
    parser.add_argument("--dump", help="the kit's rmq script: read the topic back with the Java consumer")
    parser.add_argument("--dump-timeout-s", type=float, default=300.0)
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_rocketmq import RocketMQSink

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-timer-"))
    per_file = args.rows // args.files
    for f in range(args.files):
        spark.range(f * per_file, (f + 1) * per_file, numPartitions=args.partitions).select(
            F.col("id"), F.concat(F.lit("timer-row-"), F.col("id").cast("string")).alias("payload")
        ).write.parquet(str(work / "in" / f"part-{f:03d}"))
    # One folder per file so that maxFilesPerTrigger=partitions gives one input folder's files a batch.
    files = sorted(str(p) for p in (work / "in").glob("*/*.parquet"))
    for i, path in enumerate(files):
        os.rename(path, work / "in" / f"{i:05d}.parquet")
    stream = (
        spark.readStream.schema("id long, payload string")
        .option("maxFilesPerTrigger", args.partitions)
        .parquet(str(work / "in"))
        .select(
            F.col("payload").alias("body"),
            (F.current_timestamp() + F.make_interval(secs=(F.col("id") % args.spread_s).cast("double"))).alias(
                "deliver_time"
            ),
        )
    )
    sink = RocketMQSink(
        namesrv_addr=args.namesrv_addr,
        topic=args.topic,
        group="bench-timer",
        max_in_flight_requests_per_task=args.in_flight,
        max_in_flight=max(64, args.in_flight),
    )
    reports = []

    def publish(df, batch_id: int) -> None:
        reports.append(sink(df, batch_id))
        print(reports[-1].line(), flush=True)

    began = time.monotonic()
    query = (
        stream.writeStream.foreachBatch(publish)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.monotonic() - began
    if query.exception() is not None:
        raise SystemExit(f"the query failed: {query.exception()}")
    rows = sum(r.rows for r in reports)
    sink_s = sum(r.seconds for r in reports)
    timer_rows = sum(r.timer_rows for r in reports)
    handles = sum(len(r.recall_handles) for r in reports)
    print(
        f"{rows} rows ({timer_rows} timer rows, {handles} recall handles) in {len(reports)} micro-batches: "
        f"sink {sink_s:.1f} s = {rows / sink_s:,.0f} rows/s; query {wall:.1f} s = {rows / wall:,.0f} rows/s",
        flush=True,
    )
    spark.stop()
    if args.dump:
        deadline = time.monotonic() + args.dump_timeout_s
        while True:
            out = subprocess.run([args.dump, "dump", args.topic], capture_output=True, text=True, check=True).stdout
            got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            if len(got) >= rows or time.monotonic() > deadline:
                break
            time.sleep(5)
        ids = {m["uniq"] for m in got}
        early = [m for m in got if m["storeTimestamp"] < int(m["props"]["TIMER_DELIVER_MS"]) - PRECISION_MS]
        late = [m["storeTimestamp"] - int(m["props"]["TIMER_DELIVER_MS"]) for m in got]
        print(
            f"stored {len(got)} messages, {len(ids)} distinct ids, {len(early)} before their time; "
            f"stored after TIMER_DELIVER_MS by {min(late)} .. {max(late)} ms",
            flush=True,
        )
        return 0 if (len(got), len(ids), len(early)) == (rows, rows, 0) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
