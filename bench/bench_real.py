"""This project beside Java's own client, in one run, against one real Apache RocketMQ.

Starts a real RocketMQ from a kit (default ../shared/rocketmq-4.9.8: a NameServer and two brokers on
free ports, removed afterwards), then measures on the same brokers, one after the other:

- Java's BatchProducer (8 threads, batches of 1000 x 100 B, a new list of Messages for every send) and
  the Spark sink (RocketMQSink, the writer behind foreachBatch and format("rocketmq"), on a cached
  DataFrame of 100 B rows, local[2], warm), and our send_batch of Message objects (8 threads as
  Java's, --batch-threads, 1000 x 100 B), with new Messages for every call as Java's, then with one
  list sent again (what the encoding alone costs);
- Java's Producer (32 threads, one sync send per message, 100 B) and our single sends (send_async,
  default options, one request per message).

Each Java benchmark runs again after ours (a broker's JIT makes it cheaper per message for minutes,
which favours whatever runs later; --warm-up runs Java's batches first, not counted); ratios are to
Java's better run. For each it prints messages/s and
the CPU per message of each kind of process, read from /proc: the
client (Java's benchmark JVM; Spark's JVM and Python workers; this Python process), and the brokers
(NameServer and brokers together). Figures, not a test: run it on a quiet machine.

    python bench/bench_real.py                       # the 4.9.8 kit beside this clone
    python bench/bench_real.py --kit ../shared/rocketmq-5.3.3 --seconds 60 --rows 4000000
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_client import SingleSends  # noqa: E402
from bench_sink import cpu_seconds, frame, run_sink, session  # noqa: E402

from spark_rocketmq import Message, Producer  # noqa: E402
from tests.real.kit import Kit  # noqa: E402

JAVA_BENCHMARK = "org.apache.rocketmq.example.benchmark."
#: A line Java's benchmarks print every 10 s: messages in that window (MPS for batches, else TPS); 5.x puts
#: " | " between the two.
RATE = re.compile(r"Send TPS: (\d+)(?:\s*\|?\s*Send MPS: (\d+))?")


def process_cpu(kit_pids: set[int]) -> dict[str, float]:
    """CPU seconds so far: Java's benchmark JVM ("java"), Spark's JVM and workers, this process, the brokers."""
    out = cpu_seconds(kit_pids)
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if JAVA_BENCHMARK.encode() not in (stat.parent / "cmdline").read_bytes():
                continue
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out["java"] = out.get("java", 0.0) + (int(fields[11]) + int(fields[12])) / tick
    self_cpu = os.times()
    out["python"] = self_cpu.user + self_cpu.system
    return out


def per_message(
    before: dict[str, float], after: dict[str, float], messages: int, client: list[str]
) -> tuple[float, float]:
    """(client, brokers) microseconds of CPU per message between two readings."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return sum(delta.get(k, 0.0) for k in client) * 1e6 / messages, delta.get("brokers", 0.0) * 1e6 / messages


class Figure:
    def __init__(self, name: str, rate: float, client_us: float, brokers_us: float) -> None:
        self.name, self.rate, self.client_us, self.brokers_us = name, rate, client_us, brokers_us

    def __str__(self) -> str:
        return (
            f"{self.name:<44} {self.rate:>12,.0f} msg/s   client {self.client_us:5.2f} us/msg   "
            f"brokers {self.brokers_us:5.2f} us/msg"
        )


def java(
    kit: Kit, kit_pids: set[int], name: str, cls: str, args: list[str], seconds: float, addr: str | None = None
) -> Figure:
    """Run one of Java's benchmarks for `seconds` (against ``addr``, by default the kit's NameServer); its rate
    over the windows after the first (warm-up)."""
    proc = subprocess.Popen(
        [str(kit.folder / "rmq"), "java", JAVA_BENCHMARK + cls, "-n", addr or kit.namesrv_addr, *args],
        env={**os.environ, **kit.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    windows: list[tuple[int, dict[str, float]]] = []
    deadline = time.monotonic() + seconds
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = RATE.search(line)
            if m:
                windows.append((int(m[2] or m[1]), process_cpu(kit_pids)))
            if time.monotonic() > deadline and len(windows) >= 3:
                break
    finally:
        proc.kill()
        proc.wait()
    if len(windows) < 3:
        raise RuntimeError(f"{cls} printed fewer than 3 rates in {seconds} s")
    messages = sum(n for n, _ in windows[1:]) * 10  # each rate is a 10 s window's
    client_us, brokers_us = per_message(windows[0][1], windows[-1][1], messages, ["java"])
    return Figure(name, messages / ((len(windows) - 1) * 10), client_us, brokers_us)


def for_seconds(seconds: float, threads: int, work: Callable[[], int]) -> tuple[int, float]:
    """Run work() in `threads` threads until `seconds` have passed; (messages, elapsed seconds)."""
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def loop(i: int) -> None:
        while time.monotonic() < stop:
            counts[i] += work()

    started = time.perf_counter()
    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(counts), time.perf_counter() - started


def our_batches(addr: str, topic: str, kit_pids: set[int], seconds: float, threads: int, *, fresh: bool) -> Figure:
    """send_batch of 1000 x 100 B in ``threads`` threads. ``fresh``: each call sends 1000 Message objects
    made for it, as Java's BatchProducer builds its list for every send; otherwise one list again and again."""
    body = b"x" * 100
    with Producer(namesrv_addr=addr, group="bench_real_batch") as p:
        same = [Message(topic, body) for _ in range(1000)]
        p.send_batch(same)  # route and connections

        def send() -> int:
            batch = [Message(topic, body) for _ in range(1000)] if fresh else same
            return sum(r.count for r in p.send_batch(batch))

        before = process_cpu(kit_pids)
        sent, elapsed = for_seconds(seconds, threads, send)
        after = process_cpu(kit_pids)
    what = "new Messages each call" if fresh else "one list sent again"
    name = f"send_batch, {threads} threads, 1000 x 100 B, {what}"
    return Figure(name, sent / elapsed, *per_message(before, after, sent, ["python"]))


def our_single_sends(
    addr: str, topic: str, kit_pids: set[int], seconds: float, max_in_flight: int | None = None
) -> Figure:
    """send_async with default options (or ``max_in_flight`` sends pending), one request per message: the
    producer's own in-flight bound holds the caller back; a callback counts the stored ones."""
    options = {} if max_in_flight is None else {"max_in_flight": max_in_flight}
    with Producer(namesrv_addr=addr, group="bench_real_single", **options) as p:
        p.send(Message(topic, b"x" * 100))
        sends = SingleSends(p, topic)
        before = process_cpu(kit_pids)
        sent, elapsed = for_seconds(seconds, 1, sends)
        while p.stats().in_flight:  # the last sends settle (each within send_msg_timeout_ms)
            time.sleep(0.001)
        after = process_cpu(kit_pids)
    if sends.stored != sent:
        print(f"single sends: {sent - sends.stored} of {sent} failed", file=sys.stderr)
    return Figure(
        "send_async, one request per message, 100 B" + (f", max_in_flight {max_in_flight}" if options else ""),
        sends.stored / elapsed,
        *per_message(before, after, sent, ["python"]),
    )


def our_sink(addr: str, topic: str, kit_pids: set[int], rows: int, runs: int) -> Figure:
    spark = session(10_000)
    df = frame(spark, rows, 100, 4)
    run_sink(df, addr, topic)  # warm workers and their producers
    best, client, brokers = float("inf"), 0.0, 0.0
    for _ in range(runs):
        before = process_cpu(kit_pids)
        seconds, messages = run_sink(df, addr, topic)
        after = process_cpu(kit_pids)
        if messages != rows:
            raise RuntimeError(f"the sink reported {messages} messages for {rows} rows")
        c, b = per_message(before, after, rows, ["jvm", "workers"])
        client, brokers = client + c / runs, brokers + b / runs
        best = min(best, seconds)
    df.unpersist()
    spark.stop()
    return Figure(f"Spark sink, {rows:,} x 100 B", rows / best, client, brokers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kit", default=str(ROOT.parent / "shared" / "rocketmq-4.9.8"), help="RocketMQ kit folder")
    parser.add_argument("--seconds", type=float, default=40, help="length of each timed run")
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the sink's DataFrame")
    parser.add_argument("--runs", type=int, default=3, help="sink runs (the best rate, the mean CPU)")
    parser.add_argument("--batch-threads", type=int, default=8, help="threads calling send_batch (Java's: 8)")
    parser.add_argument(
        "--parts",
        default="batches,single",
        help="what to run: batches (BatchProducer, sink, send_batch), single (Producer, send_async), or both",
    )
    parser.add_argument(
        "--warm-up", type=float, default=0, help="seconds of Java's BatchProducer first, not counted (warm brokers)"
    )
    parser.add_argument(
        "--max-in-flight", type=int, default=None, help="single sends: sends pending (default: the producer's)"
    )
    args = parser.parse_args()
    if not (Path(args.kit) / "rmq").is_file():
        print(f"bench_real: no RocketMQ kit at {args.kit} (a folder with an rmq script)", file=sys.stderr)
        return 2
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"brokers, clients and Spark on the same cores"
    )
    kit = Kit.launch(Path(args.kit))
    try:
        pids = {pid for name in ("namesrv", "a", "b") if (pid := kit.pid(name))}
        topic = kit.topic("BenchReal")
        print(
            f"RocketMQ {kit.version} at {kit.namesrv_addr}, topic {topic} (4 queues on each of 2 brokers)", flush=True
        )
        # Java's benchmark runs before and after ours: a broker's JIT keeps making it cheaper for minutes,
        # so the first run on a fresh kit pays more per message; the ratio is to Java's better run.
        if "batches" in args.parts:
            java_batch = ["-t", topic, "-s", "100", "-b", "1000", "-w", "8"]
            name = "Java BatchProducer, 8 threads, 1000 x 100 B"
            if args.warm_up:
                print(java(kit, pids, name + " (warm-up)", "BatchProducer", java_batch, args.warm_up), flush=True)
            javas = [java(kit, pids, name, "BatchProducer", java_batch, args.seconds)]
            print(javas[0], flush=True)
            sink = our_sink(kit.namesrv_addr, topic, pids, args.rows, args.runs)
            batches = [
                our_batches(kit.namesrv_addr, topic, pids, args.seconds, args.batch_threads, fresh=fresh)
                for fresh in (True, False)
            ]
            javas.append(java(kit, pids, name + " (again)", "BatchProducer", java_batch, args.seconds))
            best = max(j.rate for j in javas)
            for figure in (sink, *batches):
                print(figure, f"  ({figure.rate / best:.2f}x Java's better run)", flush=True)
            print(javas[1], flush=True)
        if "single" in args.parts:
            java_single = ["-t", topic, "-s", "100", "-w", "32"]
            name = "Java Producer, 32 threads, sync, 100 B"
            javas = [java(kit, pids, name, "Producer", java_single, args.seconds)]
            print(javas[0], flush=True)
            single = our_single_sends(kit.namesrv_addr, topic, pids, args.seconds, args.max_in_flight)
            javas.append(java(kit, pids, name + " (again)", "Producer", java_single, args.seconds))
            print(single, f"  ({single.rate / max(j.rate for j in javas):.2f}x Java's better run)", flush=True)
            print(javas[1], flush=True)
    finally:
        kit.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
