"""Client CPU per row of the exactly-once sink's executor side: rows sent as half messages, without Spark.

A ``PartitionWriter`` of an exactly_once job (the writer Spark's tasks run) writes ``--rows`` rows of
100-byte bodies, in record batches of ``--batch-rows``, to ack-only local brokers (``python -m
spark_rocketmq.local --ack-only``, a process of its own: its CPU is not counted), then commits. The
figure is this process's CPU (all its threads: the writer's and the producer's I/O thread) from the
first write to the commit's return, divided by the rows; the median of ``--runs`` measured runs, after
one not counted (route, connections, windows opened). A script, not a test.

    .venv/bin/python bench/bench_half_cpu.py
    .venv/bin/python bench/bench_half_cpu.py --mode at_least_once   # batch bodies, for comparison
    .venv/bin/python bench/bench_half_cpu.py --profile /tmp/half.prof   # cProfile of one measured run
    .venv/bin/python bench/bench_half_cpu.py --at-once   # steadier: every send answered in this thread

``--at-once``: a send request is not written to a socket; the connection decodes a prepared SEND_OK for it
at once and settles it on the writer's thread (as bench_engine.py does for the engine alone). What is
left out is the I/O loop, the sockets and the hand-over between the two threads, so the figure moves
little with the machine's load; the cost of making the answers is included (a few tenths of a us).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_sink import local_cluster  # noqa: E402

from spark_rocketmq.client import connection, in_flight, io_loop  # noqa: E402
from spark_rocketmq.client.config import ProducerConfig  # noqa: E402
from spark_rocketmq.protocol.codes import RequestCode, SerializeType  # noqa: E402
from spark_rocketmq.protocol.command import RemotingCommand  # noqa: E402
from spark_rocketmq.spark.job import WriteJob  # noqa: E402
from spark_rocketmq.spark.message_ids import batch_context  # noqa: E402
from spark_rocketmq.spark.options import SinkOptions  # noqa: E402
from spark_rocketmq.spark.pool import ProducerPool  # noqa: E402
from spark_rocketmq.spark.schema import MessageColumns  # noqa: E402
from spark_rocketmq.spark.writer import write_partition  # noqa: E402

TOPIC = "BenchHalf"


#: The I/O loop's steps of each run: (flushes, reads, wake-ups written), counted by count_io_steps.
STEPS: list[tuple[int, ...]] = []
_counts = {"flush": 0, "read": 0, "wake": 0}


def count_io_steps() -> None:
    """Count each connection flush (a sendmsg or more), read (a recv) and loop wake-up (a byte written)."""

    def counted(cls: Any, name: str, what: str, when: Callable[[Any], bool] = lambda _: True) -> None:
        real = getattr(cls, name)

        def step(self: Any, *args: Any) -> Any:
            if when(self):
                _counts[what] += 1
            return real(self, *args)

        setattr(cls, name, step)

    counted(connection.Connection, "on_flush", "flush")
    counted(connection.Connection, "on_readable", "read")
    counted(io_loop.IOLoop, "_wake", "wake", lambda loop: loop._sleeping and not loop._woken)


def io_steps() -> tuple[int, int, int]:
    return _counts["flush"], _counts["read"], _counts["wake"]


def one_run(
    job: WriteJob, pool: ProducerPool, batches: list[pa.RecordBatch], batch_id: int
) -> tuple[float, float, float]:
    """(CPU seconds, of which the writer's thread, wall seconds) of one partition's write and commit."""
    job = WriteJob(job.producer_config, job.options, job.columns, batch_context("bench", batch_id), f"run{batch_id}")
    steps = io_steps()
    wall, cpu, own = time.monotonic(), time.process_time(), time.thread_time()
    summary = write_partition(batches, job, partition=0, pool=pool)
    cpu, own, wall = time.process_time() - cpu, time.thread_time() - own, time.monotonic() - wall
    STEPS.append(tuple(b - a for a, b in zip(steps, io_steps(), strict=True)))
    rows = sum(b.num_rows for b in batches)
    if summary.messages != rows:
        raise SystemExit(f"{summary.messages} of {rows} rows delivered: {summary.errors[:3]}")
    return cpu, own, wall


def answer_at_once() -> None:
    """Connection._queue_request answers a SEND_MESSAGE_V2 at once with a SEND_OK of its opaque."""
    real = connection.Connection._queue_request
    fields = {
        "msgId": "7F00000100002A9F0000000000012345",
        "queueId": "1",
        "queueOffset": "12345",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    ok = RemotingCommand(
        code=0, opaque=0, flag=1, ext_fields=fields, language="JAVA", version=395, serialize_type=SerializeType.ROCKETMQ
    ).encode()
    head, tail = ok[:13], ok[17:]  # the opaque: after the two length words, code, language and version

    def queue_request(self: Any, opaque: int, head_: bytes, body: Any, code: int, deadline: float, done: Any) -> None:
        if code != RequestCode.SEND_MESSAGE_V2:
            real(self, opaque, head_, body, code, deadline, done)
            return
        self._in_flight[opaque] = in_flight.InFlight(done, deadline, code)
        self._dispatch(self._decoder.feed(head + opaque.to_bytes(4, "big") + tail))

    connection.Connection._queue_request = queue_request  # type: ignore[method-assign,assignment]


def profiled(path: str, run: Callable[[], object]) -> None:
    """cProfile of ``run`` in this thread (``path``) and in every other thread meanwhile (``path``.threads)."""
    mine, others = cProfile.Profile(), cProfile.Profile()
    lock = threading.Lock()

    def hook(frame: Any, event: str, arg: Any) -> None:  # the other threads' calls, into one profile
        sys.setprofile(None)
        with lock:
            others.enable()

    threading.setprofile(hook)  # only threads started from now: a producer's I/O thread is, its pool reset
    mine.enable()
    run()
    mine.disable()
    threading.setprofile(None)
    mine.dump_stats(path)
    others.dump_stats(f"{path}.threads")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--batch-rows", type=int, default=10_000, help="rows per Arrow record batch")
    parser.add_argument("--runs", type=int, default=5, help="measured runs (the median is printed)")
    parser.add_argument("--mode", choices=("exactly_once", "at_least_once"), default="exactly_once")
    parser.add_argument("--in-flight", type=int, default=512, help="max_in_flight_requests_per_task")
    parser.add_argument("--profile", help="write a cProfile of one more run to this file")
    parser.add_argument("--at-once", action="store_true", help="answer each send in the writer's thread")
    parser.add_argument(
        "--gc-off", action="store_true", help="no cyclic collection in the measured runs (steadier instruction counts)"
    )
    args = parser.parse_args()
    bodies = pa.array([f"{i:0>100}" for i in range(args.rows)]).cast(pa.binary())
    batches = [
        pa.record_batch({"body": bodies.slice(i, args.batch_rows)}) for i in range(0, args.rows, args.batch_rows)
    ]
    count_io_steps()
    with local_cluster([TOPIC], ack_only=True) as (addr, _pid), tempfile.TemporaryDirectory() as log_dir:
        config = ProducerConfig(namesrv_addr=addr, group="bench-half", max_in_flight=1024)
        options = SinkOptions(
            topic=TOPIC,
            delivery_guarantee=args.mode,
            transaction_log_dir=log_dir if args.mode == "exactly_once" else None,
            max_in_flight_requests_per_task=args.in_flight,
        )
        job = WriteJob(config, options, MessageColumns(body="body"), batch_context("bench", 0), "run0")
        pool = ProducerPool()
        try:
            one_run(job, pool, batches[:1], 0)  # warm-up: route, connections, windows
            if args.at_once:
                answer_at_once()
            if args.gc_off:
                gc.collect()
                gc.disable()
            figures = [one_run(job, pool, batches, i + 1) for i in range(args.runs)]
            if args.profile:
                fresh = ProducerPool()  # its producer's I/O thread starts under the profile
                try:
                    profiled(args.profile, lambda: one_run(job, fresh, batches, args.runs + 1))
                finally:
                    fresh.reset()
        finally:
            pool.reset()
    per_row = sorted(cpu * 1e6 / args.rows for cpu, _, _ in figures)
    writer = statistics.median(own * 1e6 / args.rows for _, own, _ in figures)
    rates = [args.rows / wall for _, _, wall in figures]
    mode = args.mode + (" (answered at once)" if args.at_once else "")
    measured = STEPS[1 : 1 + args.runs]
    flushes, reads, wakes = (statistics.median(m[i] for m in measured) * 1000 / args.rows for i in range(3))
    runs = ", ".join(f"{x:.2f}" for x in per_row)
    print(
        f"{mode}: {args.rows} rows x {args.runs} runs, client CPU per row: median "
        f"{statistics.median(per_row):.2f} us (runs {runs}; the writer's thread {writer:.2f} us, the rest the "
        f"I/O thread's); rows/s median {statistics.median(rates):,.0f}; per 1000 rows: {flushes:.0f} flushes, "
        f"{reads:.0f} reads, {wakes:.0f} loop wake-ups"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
