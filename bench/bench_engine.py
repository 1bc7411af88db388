"""Client CPU per message of the send engine alone: every request is answered at once, in this process.

The producer runs as usual (routes from a local NameServer, queue choice, fault items, windows,
UNIQ_KEYs, the frame of each request, its answer decoded, matched by opaque and settled, the
future and its callback), except that a request to a broker is not written to a socket: the
connection decodes a prepared answer for it at once. What is left out is the I/O loop, the sockets
and the broker, so the figure is CPU time of this process only and moves little with the machine's
load (the end-to-end figures of bench_client.py and bench_real.py do). A script, not a test.

    .venv/bin/python bench/bench_engine.py            # starts python -m spark_rocketmq.local
    .venv/bin/python bench/bench_engine.py --extension trace    # with message trace on (or: hook, metrics)

``--extension``: ``hook`` registers a send hook that does nothing, ``trace`` turns on enable_msg_trace
(the trace thread's CPU counted: each run ends when its records are written), ``metrics`` turns on
enable_metrics with OpenTelemetry's SDK recording into an in-memory reader.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_client import SingleSends, local_cluster  # noqa: E402

from spark_rocketmq import Message, Producer  # noqa: E402
from spark_rocketmq.client import connection, in_flight  # noqa: E402
from spark_rocketmq.protocol.codes import RequestCode, SerializeType  # noqa: E402
from spark_rocketmq.protocol.command import RemotingCommand  # noqa: E402

SENDS = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
TOPIC = "BenchEngine"


def answer(opaque: int, count: int, serialize_type: SerializeType) -> bytes:
    """A 4.9.8 broker's SEND_OK frame for a request of ``count`` messages, in the request's serialization."""
    msg_id = ",".join(f"7F00000100002A9F{i:016X}" for i in range(count))
    fields = {"msgId": msg_id, "queueId": "1", "queueOffset": "12345", "MSG_REGION": "DefaultRegion"}
    return RemotingCommand(
        code=0, opaque=opaque, flag=1, ext_fields=fields, language="JAVA", version=395, serialize_type=serialize_type
    ).encode()


def answered_at_once(count: int) -> Callable[..., None]:
    """Connection._queue_request for send requests: the frame made (by the connection), the answer decoded
    and settled."""
    real = connection.Connection._queue_request

    def queue_request(self: Any, opaque: int, head: bytes, body: Any, code: int, deadline: float, done: Any) -> None:
        if code not in SENDS:
            real(self, opaque, head, body, code, deadline, done)
            return
        self._in_flight[opaque] = in_flight.InFlight(done, deadline, code)
        self._dispatch(self._decoder.feed(answer(opaque, count, SerializeType.ROCKETMQ)))

    return queue_request


class NoopHook:
    def hook_name(self) -> str:
        return "NoopHook"

    def send_message_before(self, ctx: Any) -> None:
        return None

    def send_message_after(self, ctx: Any) -> None:
        return None


def extension_options(name: str) -> dict[str, Any]:
    """Producer options for ``--extension``."""
    if name == "trace":
        return {"enable_msg_trace": True}
    if name == "metrics":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        return {"enable_metrics": True, "meter_provider": MeterProvider(metric_readers=[InMemoryMetricReader()])}
    return {}


def cpu_per_message(producer: Producer, send: Callable[[], int], messages: int, count: int) -> float:
    """Microseconds of this process's CPU per message, less the cost of making the answers."""
    real = connection.Connection._queue_request
    connection.Connection._queue_request = answered_at_once(count)  # type: ignore[method-assign]
    try:
        started, sent = time.process_time(), 0
        while sent < messages:
            sent += send()
        if producer.tracer is not None:
            producer.tracer.flush(60.0)
        spent = time.process_time() - started
    finally:
        connection.Connection._queue_request = real  # type: ignore[method-assign]
    started = time.process_time()
    for i in range(sent // count):
        answer(i, count, SerializeType.ROCKETMQ)
    return (spent - (time.process_time() - started)) * 1e6 / sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the least is printed")
    parser.add_argument("--extension", choices=("none", "hook", "trace", "metrics"), default="none")
    args = parser.parse_args()
    options = extension_options(args.extension)
    with local_cluster(2, ack_only=True) as addr, Producer(namesrv_addr=addr, group="bench_engine", **options) as p:
        if args.extension == "hook":
            p.register_send_message_hook(NoopHook())
        p.send(Message(TOPIC, b"x" * 100))  # route, connections, the broker's version
        if p.tracer is not None:
            p.tracer.flush(60.0)  # the trace producer's route and connections
        single = SingleSends(p, TOPIC)
        batch = [Message(TOPIC, b"x" * 100) for _ in range(1000)]

        def batches() -> int:
            return sum(r.count for r in p.send_batch(batch))

        print(
            f"send engine, extension {args.extension}, requests answered in this process "
            "(us of CPU per message, the least of the runs)"
        )
        for name, send, count in (
            ("send_async, one message per request", single, 1),
            ("send_batch, 1000 x 100 B per request", batches, 1000),
        ):
            best = min(cpu_per_message(p, send, args.messages, count) for _ in range(args.repeat))
            print(f"  {name:<40} {best:8.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
