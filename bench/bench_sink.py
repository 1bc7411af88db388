"""Spark sink benchmark: rows/s end to end, local[2], beside the same run's ceiling.

The ceiling is Spark handing the same cached DataFrame to a no-op Arrow function (mapInArrow that
only counts each batch's rows): what no sink can beat on this machine. The ratio sink/ceiling is
the figure to watch; absolute figures vary with whatever else runs on the machine.

The sink runs against two kinds of local cluster, each ``python -m spark_rocketmq.local`` in a
process of its own:

- ack-only brokers (``--ack-only``): every frame and batch record is checked and answered SEND_OK
  with real offsets, nothing is stored. This measures the sink's side (Arrow transfer, encoding,
  requests, waiting);
- storing brokers: the same rows stored in RocketMQ's commit-log layout (bounded by the Python
  brokers sharing the two cores, not by the sink).

Cold start: the first write in a fresh session (a new driver process, new Python workers) beside a
no-op mapInArrow of the same rows as the first Python job of another fresh session. Also printed:
the peak RSS of the Python workers (VmHWM of every pyspark worker process), and what a job of one
row per partition takes (the no-op and the sink): the part of each case's time that is not its rows.

With ``--namesrv-addr`` the sink publishes to that cluster instead (a real Apache RocketMQ, whose
brokers' CPU is counted when they run on this machine), in place of both local clusters. The
comparison that tells whether Spark publishes faster than Java is this beside Java's own batch
benchmark on the same cluster, in ``$ROCKETMQ_HOME/benchmark``:
``sh batchproducer.sh -n ADDR -t TOPIC -s 100 -b 1000 -w 8``.

    python bench/bench_sink.py                                   # 2000000x100 and 200000x1024, 3 runs each
    python bench/bench_sink.py --case 2000000x100 --runs 5 --no-storing --no-cold
    python bench/bench_sink.py --namesrv-addr 10.0.0.5:9876 --topic BenchmarkTest
    python bench/bench_sink.py --case 500000x100 --no-storing --no-cold --sink-option enableMsgTrace=true
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

#: Rows per Arrow batch Spark hands to Python (spark.sql.execution.arrow.maxRecordsPerBatch), same
#: for the ceiling and the sink. Spark's default is 10,000.
DEFAULT_ARROW_BATCH = 10_000


def worker_peak_rss_mib(marks: tuple[bytes, ...] = (b"pyspark.daemon", b"pyspark.worker")) -> float:
    """Largest VmHWM among this machine's processes whose command line holds one of ``marks`` (by default
    PySpark's worker processes, which outlive each task)."""
    peak = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            cmdline = (status.parent / "cmdline").read_bytes()
            if not any(mark in cmdline for mark in marks):
                continue
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            continue
    return peak / 1024


#: What a real NameServer's or broker's java command line holds: its process counts as "brokers".
ROCKETMQ_MAIN_CLASSES = (b"org.apache.rocketmq.broker.BrokerStartup", b"org.apache.rocketmq.namesrv.NamesrvStartup")


def _process_kind(cmdline: bytes, broker_pids: set[int], pid: int) -> str | None:
    if pid in broker_pids or any(name in cmdline for name in ROCKETMQ_MAIN_CLASSES):
        return "brokers"
    if b"pyspark.daemon" in cmdline or b"pyspark.worker" in cmdline:
        return "workers"
    if b"org.apache.spark.deploy.SparkSubmit" in cmdline:
        return "jvm"
    return None


def cpu_seconds(broker_pids: set[int]) -> dict[str, float]:
    """CPU seconds (user + system) so far of Spark's JVM, the Python workers and the brokers' processes.

    A worker that exited since the last reading is missed: workers are reused (spark.python.worker.reuse).
    """
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            kind = _process_kind((stat.parent / "cmdline").read_bytes(), broker_pids, int(stat.parent.name))
            if kind is None:
                continue
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _cpu_text(per_kind: Counter[str]) -> str:
    return ", ".join(f"{kind} {us:.2f}" for kind, us in per_kind.items())


def cpu_per_row(before: dict[str, float], after: dict[str, float], rows: int) -> dict[str, float]:
    """Microseconds of CPU per row of each kind of process between two cpu_seconds() readings."""
    return {k: (after.get(k, 0.0) - before.get(k, 0.0)) * 1e6 / rows for k in ("jvm", "workers", "brokers")}


@contextmanager
def local_cluster(topics: list[str], *, ack_only: bool) -> Iterator[tuple[str, int]]:
    """`python -m spark_rocketmq.local` with two brokers in a process of its own; yields the NameServer
    address and the process id."""
    args = [sys.executable, "-m", "spark_rocketmq.local", "--brokers", "2"]
    if ack_only:
        args.append("--ack-only")
    for topic in topics:
        args += ["--topic", topic]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("NameServer "):
                yield line.split()[1], proc.pid
                break
        else:
            raise RuntimeError("the local cluster did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def session(arrow_batch: int, driver_memory: str = "4g") -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(arrow_batch))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def frame(spark: Any, rows: int, size: int, partitions: int) -> Any:
    from pyspark.sql import functions as F

    body = F.expr(f"cast(rpad(concat('row-', cast(id as string), '-'), {size}, 'x') as binary)")
    df = spark.range(0, rows, numPartitions=partitions).select(body.alias("body"))
    df = df.cache()
    df.count()
    return df


def ceiling(df: Any) -> float:
    import pyarrow as pa

    def noop(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        n = 0
        for b in batches:
            n += b.num_rows
        yield pa.RecordBatch.from_pydict({"n": [n]})

    started = time.perf_counter()
    df.mapInArrow(noop, "n long").collect()
    return time.perf_counter() - started


#: --sink-option KEY=VALUE: more options of every sink run (e.g. enableMsgTrace=true).
SINK_OPTIONS: dict[str, str] = {}


def run_sink(df: Any, namesrv_addr: str, topic: str) -> tuple[float, int]:
    from spark_rocketmq import RocketMQSink

    sink = RocketMQSink({"namesrv_addr": namesrv_addr, "topic": topic, "group": "bench", **SINK_OPTIONS})
    started = time.perf_counter()
    report = sink(df, 0)
    return time.perf_counter() - started, report.messages


def fixed_cost(spark: Any, namesrv_addr: str, topic: str, partitions: int, runs: int, sink_name: str) -> None:
    """Print what a job costs whatever its size: the ceiling and the sink over one row per partition.
    Both figures are mostly Spark's (scheduling the tasks, a Python worker per task); the difference
    between a case's time and this is what its rows cost."""
    df = frame(spark, partitions, 8, partitions)
    ceiling(df)
    run_sink(df, namesrv_addr, topic)
    noop_s = min(ceiling(df) for _ in range(runs))
    sink_s = min(run_sink(df, namesrv_addr, topic)[0] for _ in range(runs))
    df.unpersist()
    print(
        f"a job of {partitions} rows in {partitions} partitions: no-op mapInArrow {noop_s * 1000:.0f} ms, "
        f"sink ({sink_name}) {sink_s * 1000:.0f} ms",
        flush=True,
    )


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


def cold(args: argparse.Namespace) -> int:
    """One fresh session (this process): cache the rows, then time the first Python job, print JSON."""
    rows, size = (int(v) for v in args.cold_case.lower().split("x"))
    spark = session(args.arrow_batch)
    df = frame(spark, rows, size, args.partitions)
    if args.cold == "noop":
        seconds, messages = ceiling(df), rows
    else:
        seconds, messages = run_sink(df, args.namesrv, args.topic or f"Bench{size}")
    print(json.dumps({"seconds": seconds, "messages": messages, "worker_rss_mib": worker_peak_rss_mib()}))
    spark.stop()
    return 0


def cold_run(mode: str, case: str, namesrv: str, args: argparse.Namespace) -> float:
    command = [sys.executable, __file__, "--cold", mode, "--cold-case", case, "--namesrv", namesrv]
    command += ["--partitions", str(args.partitions), "--arrow-batch", str(args.arrow_batch)]
    if args.topic:
        command += ["--topic", args.topic]
    command += [f"--sink-option={option}" for option in args.sink_option]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    rows = int(case.lower().split("x")[0])
    if result["messages"] != rows:
        raise RuntimeError(f"cold {mode}: {result['messages']} messages for {rows} rows")
    return float(result["seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="ROWSxBYTES, repeatable (default 2000000x100, 200000x1024)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; the best is printed")
    parser.add_argument("--arrow-batch", type=int, default=DEFAULT_ARROW_BATCH, help="maxRecordsPerBatch")
    parser.add_argument("--no-storing", action="store_true", help="skip the storing brokers")
    parser.add_argument("--no-cold", action="store_true", help="skip the fresh-session measurement")
    parser.add_argument("--no-encoder", action="store_true", help="skip the encoder-alone figure")
    parser.add_argument("--cold-case", default="200000x100", help="ROWSxBYTES of the fresh-session runs")
    parser.add_argument("--namesrv-addr", help="publish to this cluster's NameServer instead of local clusters")
    parser.add_argument("--topic", help="topic to publish to (default Bench<BYTES>)")
    parser.add_argument(
        "--sink-option", action="append", default=[], metavar="KEY=VALUE", help="a sink option, repeatable"
    )
    parser.add_argument("--cold", choices=["noop", "sink"], help=argparse.SUPPRESS)
    parser.add_argument("--namesrv", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for option in args.sink_option:
        key, _, value = option.partition("=")
        SINK_OPTIONS[key] = value
    if args.cold:
        return cold(args)
    cases = [tuple(int(v) for v in c.lower().split("x")) for c in (args.case or ["2000000x100", "200000x1024"])]
    runs = max(1, args.runs)

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"local[2], {args.partitions} partitions, maxRecordsPerBatch {args.arrow_batch}, best of {runs} runs"
    )
    if not args.no_encoder:
        for size in sorted({size for _, size in cases}):
            print(f"Arrow encoder alone, {size}-byte bodies: {arrow_encoder_rate(size):,.0f} rows/s (one core)")

    topics = sorted({f"Bench{size}" for _, size in cases} | {f"Bench{args.cold_case.lower().split('x')[1]}"})
    if args.topic:
        topics = [args.topic]
    with ExitStack() as stack:
        store_addr = None
        broker_pids: set[int]
        if args.namesrv_addr:  # a cluster of the user's: its brokers are the only ones
            ack_addr, broker_pids, sink_name = args.namesrv_addr, set(), "cluster"
        else:
            ack_addr, ack_pid = stack.enter_context(local_cluster(topics, ack_only=True))
            broker_pids = {ack_pid}
            sink_name = "ack-only"
            if not args.no_storing:
                store_addr, _store_pid = stack.enter_context(local_cluster(topics, ack_only=False))

        if not args.no_cold:
            noop_s, sink_s = float("inf"), float("inf")
            for _ in range(runs):
                noop_s = min(noop_s, cold_run("noop", args.cold_case, ack_addr, args))
                sink_s = min(sink_s, cold_run("sink", args.cold_case, ack_addr, args))
            print(
                f"fresh session, {args.cold_case}, first Python job: no-op mapInArrow {noop_s:.2f} s, "
                f"sink ({sink_name}) {sink_s:.2f} s: +{sink_s - noop_s:.2f} s"
            )

        spark = session(args.arrow_batch)
        fixed_cost(spark, ack_addr, args.topic or f"Bench{cases[0][1]}", args.partitions, runs, sink_name)
        header = f"{'case':>18} {'ceiling rows/s':>15} {sink_name + ' rows/s':>16} {'ratio':>6}"
        if store_addr:
            header += f" {'storing rows/s':>15} {'ratio':>6}"
        print(header + f" {'worker peak RSS':>16}")
        for rows, size in cases:
            topic = args.topic or f"Bench{size}"
            df = frame(spark, rows, size, args.partitions)
            ceiling(df)  # warm the workers
            run_sink(df, ack_addr, topic)  # and the producers
            best = {"ceiling": float("inf"), "ack": float("inf"), "store": float("inf")}
            cpu: dict[str, Counter[str]] = {"ceiling": Counter(), "ack": Counter()}
            for _ in range(runs):
                # Interleaved, so that a burst of other load hits all of them alike.
                before = cpu_seconds(broker_pids)
                best["ceiling"] = min(best["ceiling"], ceiling(df))
                between = cpu_seconds(broker_pids)
                seconds, messages = run_sink(df, ack_addr, topic)
                after = cpu_seconds(broker_pids)
                cpu["ceiling"].update(cpu_per_row(before, between, rows * runs))
                cpu["ack"].update(cpu_per_row(between, after, rows * runs))
                if messages != rows:
                    print(f"{rows}x{size}: sink reported {messages} messages for {rows} rows", file=sys.stderr)
                    return 1
                best["ack"] = min(best["ack"], seconds)
            # Storing runs last: the kernel writes back what the storing brokers wrote for a while after
            # they answer, which would take CPU from the ceiling and ack-only runs.
            for _ in range(runs if store_addr else 0):
                assert store_addr is not None
                seconds, messages = run_sink(df, store_addr, topic)
                if messages != rows:
                    print(f"{rows}x{size}: sink reported {messages} messages for {rows} rows", file=sys.stderr)
                    return 1
                best["store"] = min(best["store"], seconds)
            df.unpersist()
            line = (
                f"{rows:>10,} x {size:>4}B {rows / best['ceiling']:>15,.0f} {rows / best['ack']:>16,.0f} "
                f"{best['ceiling'] / best['ack']:>6.2f}"
            )
            if store_addr:
                line += f" {rows / best['store']:>15,.0f} {best['ceiling'] / best['store']:>6.2f}"
            print(line + f" {worker_peak_rss_mib():>12.0f} MiB", flush=True)
            print(
                f"    CPU us/row, mean of {runs} runs: ceiling {_cpu_text(cpu['ceiling'])}; "
                f"sink ({sink_name}) {_cpu_text(cpu['ack'])}",
                flush=True,
            )
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
