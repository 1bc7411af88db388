"""Exactly-once sink benchmark beside Java's TransactionProducer, on the same real cluster, in one run.

1. warm-up, Java: ``rmq java org.apache.rocketmq.example.benchmark.TransactionProducer -n ADDR -t TOPIC
   -s 100 -w 32`` for ``--java-seconds`` (it prints "Send TPS" every 10 s once it has 10 s of history:
   each TPS line is one half message sent and committed per transaction), not counted;
2. the sink: ``--rows`` rows of 100-byte bodies in 2 partitions, local[2], delivery_guarantee=exactly_once
   (each row a half message, then the driver's commit), a warm-up batch not counted and ``--runs``
   measured ones; rows/s = rows / the batch's time (tasks and commit phase), and the commit phase alone;
3. Java again, measured, on brokers as warm as the sink had them; the ratio is the best measured sink
   batch to Java's best measured 10 s.

The kit is a folder holding an ``rmq`` script (``--kit``, default $ROCKETMQ_KIT). Without
``--namesrv-addr`` (default $ROCKETMQ_NAMESRV_ADDR) the kit's NameServer and two brokers are started on
free ports and removed afterwards; with it, that cluster is used (RMQ_* variables in the environment
reach the script). Figures, not a test.

    python bench/bench_transactions.py --kit ../shared/rocketmq-4.9.8

    RMQ_PORT_SHIFT=400 RMQ_NAMESRV_PORT=9996 RMQ_RUN=/tmp/rmq-i20-4 \\
        python bench/bench_transactions.py --kit ../shared/rocketmq-4.9.8 --namesrv-addr 127.0.0.1:9996
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sink import cpu_per_row, cpu_seconds

TPS = re.compile(r"Send TPS:\s*(\d+)")


def java_transaction_producer(kit: Path, addr: str, topic: str, seconds: float, env: dict[str, str]) -> list[int]:
    """Send TPS figures Java's TransactionProducer printed within ``seconds``."""
    cmd = [
        str(kit / "rmq"), "java", "org.apache.rocketmq.example.benchmark.TransactionProducer",
        "-n", addr, "-t", topic, "-s", "100", "-w", "32",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=5)
    return [int(m.group(1)) for line in lines if (m := TPS.search(line))]


def sink_runs(addr: str, topic: str, rows: int, runs: int) -> list[tuple[float, float, int]]:
    """(seconds, commit seconds, rows) of each exactly-once batch."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_rocketmq import RocketMQSink

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-transactions")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, rows, numPartitions=2).select(F.lpad(F.col("id").cast("string"), 100, "x").alias("body"))
    df = df.cache()
    df.count()
    out = []
    with tempfile.TemporaryDirectory(prefix="txlog-") as log_dir:
        sink = RocketMQSink(
            namesrv_addr=addr,
            topic=topic,
            group="bench-exactly-once",
            delivery_guarantee="exactly_once",
            transaction_log_dir=log_dir,
            id_namespace=f"bench-{time.time_ns()}",
            max_in_flight=1024,
            max_in_flight_requests_per_task=512,
        )
        try:
            for batch in range(runs):
                before = cpu_seconds(set())
                driver_before = os.times()
                report = sink(df, batch)
                after = cpu_seconds(set())
                driver_after = os.times()
                out.append((report.seconds, report.commit_seconds, report.messages))
                print(report.line(), flush=True)
                per_row = cpu_per_row(before, after, rows)
                driver = (driver_after.user + driver_after.system - driver_before.user - driver_before.system) * 1e6
                print(
                    f"  CPU per row: Spark JVM {per_row['jvm']:.1f} us, Python workers {per_row['workers']:.1f} us, "
                    f"driver (commit phase) {driver / rows:.1f} us, brokers {per_row['brokers']:.1f} us",
                    flush=True,
                )
        finally:
            sink.close()
    spark.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kit", default=os.environ.get("ROCKETMQ_KIT"), help="folder of the kit's rmq script")
    parser.add_argument("--namesrv-addr", default=os.environ.get("ROCKETMQ_NAMESRV_ADDR"))
    parser.add_argument("--topic", default="BenchTx")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--java-seconds", type=float, default=45.0)
    args = parser.parse_args()
    if not args.kit:
        parser.error("give --kit (or ROCKETMQ_KIT)")
    kit_folder = Path(args.kit)
    launched = None
    if args.namesrv_addr:
        addr, env, topic = args.namesrv_addr, dict(os.environ), args.topic
        subprocess.run([str(kit_folder / "rmq"), "topic", topic, "4"], check=True, capture_output=True)
    else:  # a cluster of the kit's own, on free ports, removed afterwards
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.real.kit import Kit

        launched = Kit.launch(kit_folder)
        addr, env = launched.namesrv_addr, {**os.environ, **launched.env}
        topic = launched.topic(args.topic)
        print(f"RocketMQ {launched.version} at {addr}, topic {topic}", flush=True)
    try:
        return run(kit_folder, addr, topic, env, args)
    finally:
        if launched is not None:
            launched.close()


def run(kit: Path, addr: str, topic: str, env: dict[str, str], args: argparse.Namespace) -> int:
    # Both sides warmed first on the same brokers (a broker's JIT makes it cheaper for minutes, and a Spark
    # session's first batch pays for cold workers): a Java run and a sink batch not counted, then the
    # measured ones. The ratio is the best measured sink batch to Java's best measured 10 s.
    java = args.java_seconds > 0
    warm = java_transaction_producer(kit, addr, topic, args.java_seconds, env) if java else []
    print(f"warm-up, Java TransactionProducer (-s 100 -w 32): Send TPS {warm}", flush=True)
    results = sink_runs(addr, topic, args.rows, args.runs + 1)
    warm_sink, measured = results[0], results[1:]
    print(f"warm-up, exactly_once sink: {warm_sink[2] / warm_sink[0]:,.0f} rows/s")
    for seconds, commit, n in measured:
        print(f"exactly_once sink: {n} rows in {seconds:.2f} s = {n / seconds:,.0f} rows/s "
              f"(commit phase {commit:.2f} s = {n / commit if commit else 0:,.0f} halves/s)")  # fmt: skip
    tps = java_transaction_producer(kit, addr, topic, args.java_seconds, env) if java else []
    print(f"Java TransactionProducer, warm brokers: Send TPS {tps}", flush=True)
    best = max((n / s for s, _, n in measured), default=0.0)
    best_java = max(tps, default=0)
    print(
        f"best sink {best:,.0f} rows/s vs Java's best {best_java:,} msg/s: {best / best_java if best_java else 0:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
