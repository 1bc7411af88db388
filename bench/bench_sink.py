"""Spark sink benchmark: rows/s end to end, local[2], to a local cluster, beside the same run's ceiling.

The ceiling is Spark handing the same cached DataFrame to a no-op Arrow function (mapInArrow that
only touches each batch): what no sink can beat on this machine. The ratio sink/ceiling is the
figure to watch. Also prints the peak RSS of the Python workers (VmHWM of every pyspark worker
process), which must stay bounded whatever the input size.

    python bench/bench_sink.py [--rows 2000000 --size 100] [--rows 200000 --size 1024]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def worker_peak_rss_mib() -> float:
    """Largest VmHWM among this machine's PySpark worker processes (they outlive each task)."""
    peak = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            cmdline = (status.parent / "cmdline").read_bytes()
            if b"pyspark.daemon" not in cmdline and b"pyspark.worker" not in cmdline:
                continue
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            continue
    return peak / 1024


@contextmanager
def local_cluster(topics: list[str]) -> Iterator[str]:
    """`python -m spark_rocketmq.local` with two brokers in a process of its own; yields the NameServer address."""
    args = [sys.executable, "-m", "spark_rocketmq.local", "--brokers", "2"]
    for topic in topics:
        args += ["--topic", topic]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("NameServer "):
                yield line.split()[1]
                break
        else:
            raise RuntimeError("the local cluster did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def frame(spark, rows: int, size: int, partitions: int):
    from pyspark.sql import functions as F

    body = F.expr(f"cast(rpad(concat('row-', cast(id as string), '-'), {size}, 'x') as binary)")
    df = spark.range(0, rows, numPartitions=partitions).select(body.alias("body"))
    df = df.cache()
    df.count()
    return df


def ceiling(df) -> float:
    import pyarrow as pa

    def noop(batches):
        n = 0
        for b in batches:
            n += b.num_rows
        yield pa.RecordBatch.from_pydict({"n": [n]})

    started = time.perf_counter()
    df.mapInArrow(noop, "n long").collect()
    return time.perf_counter() - started


def run_sink(df, namesrv_addr: str, topic: str) -> tuple[float, int]:
    from spark_rocketmq import RocketMQSink

    sink = RocketMQSink({"namesrv_addr": namesrv_addr, "topic": topic, "group": "bench"})
    started = time.perf_counter()
    report = sink(df, 0)
    return time.perf_counter() - started, report.messages


def arrow_encoder_rate(size: int, seconds: float = 2.0) -> float:
    """Rows/s of the sink's vectorised MessageBatch encoder alone, on one core."""
    import pyarrow as pa

    from spark_rocketmq.spark.encoder import encode_rows
    from spark_rocketmq.spark.message_ids import batch_context
    from spark_rocketmq.spark.schema import MessageColumns

    n = 10_000
    batch = pa.RecordBatch.from_arrays([pa.array([b"x" * size] * n, pa.binary())], names=["body"])
    ctx = batch_context("bench", 0)
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        encode_rows(
            batch,
            MessageColumns(body="body"),
            topic_option="Bench",
            ctx=ctx,
            partition=0,
            row_start=done,
            max_message_size=4 * 1024 * 1024,
            queue_count=lambda topic: 8,
        )
        done += n
    return done / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="ROWSxBYTES, repeatable (default 2000000x100, 200000x1024)")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    cases = [tuple(int(v) for v in c.lower().split("x")) for c in (args.case or ["2000000x100", "200000x1024"])]

    for size in sorted({size for _, size in cases}):
        print(f"Arrow encoder alone, {size}-byte bodies: {arrow_encoder_rate(size):,.0f} rows/s (one core)")

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{'case':>18} {'ceiling rows/s':>15} {'sink rows/s':>13} {'ratio':>6} {'worker peak RSS':>16}")
    with local_cluster([f"Bench{size}" for _, size in cases]) as namesrv_addr:
        for rows, size in cases:
            topic = f"Bench{size}"
            df = frame(spark, rows, size, args.partitions)
            ceiling(df)  # warm the workers
            ceil_s = ceiling(df)
            sink_s, messages = run_sink(df, namesrv_addr, topic)
            if messages != rows:
                print(f"{rows}x{size}: sink reported {messages} messages for {rows} rows", file=sys.stderr)
                return 1
            df.unpersist()
            print(
                f"{rows:>10,} x {size:>4}B {rows / ceil_s:>15,.0f} {rows / sink_s:>13,.0f} "
                f"{ceil_s / sink_s:>6.2f} {worker_peak_rss_mib():>12.0f} MiB"
            )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
