"""Reading a topic with Spark beside Java's DefaultLitePullConsumer, in one run, against one real Apache RocketMQ.

Starts a real RocketMQ from a kit (default ../shared/rocketmq-4.9.8: a NameServer and two brokers on
free ports, removed afterwards), fills a topic of --queues queues on each broker with --messages
messages of --body-bytes (100 B by default; send_batch requests of about 1 MB, 4 threads), then reads the
whole topic, one reader after the other on the same brokers:

- Java: bench/LitePullRead.java, compiled with javac against the kit's lib/*.jar and run by the kit's
  ``rmq java`` (EXTRA_CP): a DefaultLitePullConsumer assigned every queue from its first offset,
  pullBatchSize 32 (--java-batch), polling until it has counted every message. Its time and CPU are
  from asking for the topic's queues to the last message (the JVM's start and the consumer's are not
  counted);
- Spark: ``spark.read.format("rocketmq")...load().write.format("noop").mode("overwrite").save()``,
  local[2], PYSPARK_PYTHON this Python; its time is the save() call's (planning, tasks, every row
  handed to the noop sink).

Java reads first (a warm-up, not counted), then Spark (a count() of the topic checked against
--messages, also a warm-up), then --runs measured runs of each, alternating. It prints each run's
messages/s, the ratio of the best runs (and of the medians), the CPU per message of each kind of process
(Java's JVM; Spark's JVM and Python workers; the brokers: NameServer and brokers together, from /proc
as bench_real.py reads it), and the peak RSS (VmHWM) of Spark's Python workers, which must not grow
with the topic: run with a larger --messages to see it stay. Figures, not a test: run it on a quiet
machine.

    python bench/bench_read.py                                   # 1,000,000 x 100 B on the 4.9.8 kit
    python bench/bench_read.py --kit ../shared/rocketmq-5.3.3 --messages 4000000
    python bench/bench_read.py --option pullsInFlight=8 --option maxBatchBytes=8388608
    python bench/bench_read.py --messages 600000 --body-bytes 4000 --driver-memory 1g --no-java --runs 1
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_real import Figure, per_message, process_cpu  # noqa: E402
from bench_sink import session, worker_peak_rss_mib  # noqa: E402

from spark_rocketmq import Message, Producer  # noqa: E402
from spark_rocketmq.client.consumer_config import ConsumerConfig  # noqa: E402
from spark_rocketmq.client.pull_consumer import PullConsumer  # noqa: E402
from tests.real.kit import Kit  # noqa: E402

#: What LitePullRead prints when it has read the topic.
READ_LINE = re.compile(r"READ messages=(\d+) bytes=(\d+) ms=([\d.]+) cpu_ms=([\d.]+) duplicates=(\d+)")


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    mem_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:")
    )
    return (
        f"{os.cpu_count()} cores ({model}), {mem_kib / 1024 / 1024:.1f} GiB RAM, Python {platform.python_version()}; "
        "brokers, readers and Spark on the same cores"
    )


def fill(addr: str, topic: str, messages: int, body_bytes: int, threads: int = 4) -> float:
    """send_batch of ``body_bytes`` bodies in ``threads`` threads until ``messages`` are stored, each request
    about 1 MB; seconds taken."""
    started = time.perf_counter()
    per = max(1, min(1000, 1_000_000 // body_bytes))
    batches = [per] * (messages // per) + ([messages % per] if messages % per else [])
    lock = threading.Lock()
    errors: list[BaseException] = []
    with Producer(namesrv_addr=addr, group="bench_read_fill", send_msg_timeout_ms=30_000) as p:
        batch = [Message(topic, b"x" * body_bytes) for _ in range(per)]

        def loop() -> None:
            try:
                while True:
                    with lock:
                        if not batches:
                            return
                        n = batches.pop()
                    sent = sum(r.count for r in p.send_batch(batch[:n]))
                    if sent != n:
                        raise RuntimeError(f"send_batch stored {sent} of {n}")
            except BaseException as exc:  # reported below
                errors.append(exc)

        pool = [threading.Thread(target=loop) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def stored(addr: str, topic: str) -> int:
    """Messages in the topic: the sum of its queues' max offsets (min offsets are 0 on a fresh kit)."""
    with PullConsumer(ConsumerConfig(namesrv_addr=addr)) as consumer:
        return sum(consumer.max_offset(mq) - consumer.min_offset(mq) for mq in consumer.fetch_subscribe_queues(topic))


def compile_java(kit: Kit) -> Path:
    classes = kit.run_folder / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "javac",
            "-nowarn",
            "-cp",
            f"{kit.folder}/lib/*",
            "-d",
            str(classes),
            str(ROOT / "bench" / "LitePullRead.java"),
        ],
        check=True,
    )
    return classes


def java_read(kit: Kit, classes: Path, pids: set[int], topic: str, messages: int, batch: int, name: str) -> Figure:
    before = process_cpu(pids)
    done = subprocess.run(
        [str(kit.folder / "rmq"), "java", "LitePullRead", kit.namesrv_addr, topic, str(messages), str(batch)],
        env={**os.environ, **kit.env, "EXTRA_CP": str(classes)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = process_cpu(pids)
    m = READ_LINE.search(done.stdout)
    if done.returncode or m is None:
        raise RuntimeError(f"LitePullRead failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    if int(m[1]) != messages:
        raise RuntimeError(f"LitePullRead read {m[1]} messages of {messages}")
    if int(m[5]):
        print(f"{name}: {m[5]} messages handed twice by the consumer, counted once", flush=True)
    _, brokers_us = per_message(before, after, messages, [])
    return Figure(name, messages / (float(m[3]) / 1000), float(m[4]) * 1000 / messages, brokers_us)


class SparkReads:
    def __init__(self, addr: str, topic: str, options: dict[str, str], driver_memory: str) -> None:
        from spark_rocketmq import RocketMQDataSource

        self.spark = session(10_000, driver_memory)
        self.spark.dataSource.register(RocketMQDataSource)
        self.addr, self.topic, self.options = addr, topic, options

    def frame(self) -> Any:
        reader = self.spark.read.format("rocketmq").option("namesrvAddr", self.addr).option("topic", self.topic)
        return reader.options(**self.options).load()

    def count(self) -> int:
        return int(self.frame().count())

    def read(self, pids: set[int], messages: int, name: str) -> tuple[Figure, dict[str, float]]:
        df = self.frame()
        before = process_cpu(pids)
        started = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        seconds = time.perf_counter() - started
        after = process_cpu(pids)
        kinds = {k: (after.get(k, 0.0) - before.get(k, 0.0)) * 1e6 / messages for k in ("jvm", "workers", "python")}
        client_us, brokers_us = per_message(before, after, messages, ["jvm", "workers", "python"])
        return Figure(name, messages / seconds, client_us, brokers_us), kinds

    def stop(self) -> None:
        self.spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kit", default=str(ROOT.parent / "shared" / "rocketmq-4.9.8"), help="RocketMQ kit folder")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages in the topic")
    parser.add_argument("--body-bytes", type=int, default=100, help="each message's body size")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory (local mode: the executor's)")
    parser.add_argument("--no-java", action="store_true", help="Spark's reads alone (a memory run)")
    parser.add_argument("--queues", type=int, default=8, help="queues of the topic on each of the 2 brokers")
    parser.add_argument("--runs", type=int, default=3, help="measured runs of each reader, after a warm-up each")
    parser.add_argument("--java-batch", type=int, default=32, help="Java's pullBatchSize")
    parser.add_argument(
        "--option", action="append", default=[], metavar="NAME=VALUE", help="an option of Spark's read, repeatable"
    )
    args = parser.parse_args()
    if not (Path(args.kit) / "rmq").is_file():
        print(f"bench_read: no RocketMQ kit at {args.kit} (a folder with an rmq script)", file=sys.stderr)
        return 2
    options = dict(o.split("=", 1) for o in args.option)
    print(f"machine: {machine()}", flush=True)
    kit = Kit.launch(Path(args.kit))
    try:
        pids = {pid for name in ("namesrv", "a", "b") if (pid := kit.pid(name))}
        topic = kit.topic("BenchRead", queues=args.queues)
        addr = kit.namesrv_addr
        print(
            f"RocketMQ {kit.version} at {addr}, topic {topic} ({args.queues} queues on each of 2 brokers)", flush=True
        )
        seconds = fill(addr, topic, args.messages, args.body_bytes)
        if (n := stored(addr, topic)) != args.messages:  # a send retried after a timeout stored twice
            print(f"the topic holds {n:,} messages (a batch retried after a timeout): reading {n:,}", flush=True)
            args.messages = n
        print(f"filled with {args.messages:,} x {args.body_bytes} B in {seconds:.1f} s", flush=True)
        classes = compile_java(kit)
        java_name = f"Java DefaultLitePullConsumer, pullBatchSize {args.java_batch}"
        if not args.no_java:
            warm_up = java_read(kit, classes, pids, topic, args.messages, args.java_batch, java_name + " (warm-up)")
            print(warm_up, flush=True)
        spark = SparkReads(addr, topic, options, args.driver_memory)
        try:
            if (n := spark.count()) != args.messages:
                raise RuntimeError(f"Spark counted {n} rows of {args.messages}")
            print(f"Spark count() (warm-up): {n:,} rows; workers' peak RSS {worker_peak_rss_mib():.0f} MiB", flush=True)
            spark_name = 'spark.read.format("rocketmq") -> noop, local[2]'
            javas: list[Figure] = []
            ours: list[Figure] = []
            kinds: list[dict[str, float]] = []
            for _ in range(args.runs):
                if not args.no_java:
                    javas.append(java_read(kit, classes, pids, topic, args.messages, args.java_batch, java_name))
                    print(javas[-1], flush=True)
                figure, per_kind = spark.read(pids, args.messages, spark_name)
                ours.append(figure)
                kinds.append(per_kind)
                print(figure, " ".join(f"{k} {v:.2f}" for k, v in per_kind.items()), flush=True)
            peak = worker_peak_rss_mib()
            jvm_peak = worker_peak_rss_mib((b"org.apache.spark.deploy.SparkSubmit",))
        finally:
            spark.stop()
        bodies_mb = args.messages * args.body_bytes / 1e6
        memory = (
            f"peak RSS: Spark's Python workers {peak:.0f} MiB, Spark's JVM {jvm_peak:.0f} MiB (spark.driver.memory "
            f"{args.driver_memory}); {args.messages:,} messages, {bodies_mb:,.0f} MB of bodies"
        )
        if args.no_java:
            print(f"\nSpark {max(o.rate for o in ours):,.0f} msg/s at best\n{memory}", flush=True)
            return 0
        best_java, best_ours = max(j.rate for j in javas), max(o.rate for o in ours)
        med_java, med_ours = statistics.median(j.rate for j in javas), statistics.median(o.rate for o in ours)
        mean = {k: statistics.mean(d[k] for d in kinds) for k in kinds[0]}
        brokers = statistics.mean(j.brokers_us for j in javas), statistics.mean(o.brokers_us for o in ours)
        print(
            f"\nbest runs: Java {best_java:,.0f} msg/s, Spark {best_ours:,.0f} msg/s: {best_ours / best_java:.2f}x\n"
            f"medians:   Java {med_java:,.0f} msg/s, Spark {med_ours:,.0f} msg/s: {med_ours / med_java:.2f}x\n"
            f"CPU us/msg (means): Java's JVM {statistics.mean(j.client_us for j in javas):.2f}, brokers "
            f"{brokers[0]:.2f} | Spark's JVM {mean['jvm']:.2f}, Python workers {mean['workers']:.2f}, "
            f"driver {mean['python']:.2f}, brokers {brokers[1]:.2f}\n{memory}",
            flush=True,
        )
    finally:
        kit.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
