"""Local broker benchmark: messages/s stored for batches of 100-byte messages.

Starts `python -m spark_rocketmq.local --brokers 1` in its own process (its own core), then
several raw-socket senders push pre-encoded SEND_BATCH_MESSAGE frames (the protocol layer only,
no producer), `--in-flight` requests per connection (4 connections with one each keep the broker's
send thread busy), and wait for every answer. Prints messages/s stored (acknowledged, with
--ack-only), the requests the broker answered SYSTEM_BUSY (its send queue's 200 ms wait limit;
those messages are not counted) and the broker's peak RSS.

    .venv/bin/python bench/bench_local.py [--seconds 5] [--batch 5000] [--connections 4] [--in-flight 1] [--ack-only]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_rocketmq.protocol.codes import RequestCode, ResponseCode  # noqa: E402
from spark_rocketmq.protocol.command import RemotingCommand  # noqa: E402
from spark_rocketmq.protocol.frame import FrameDecoder  # noqa: E402
from spark_rocketmq.protocol.headers import SendMessageRequestHeader  # noqa: E402
from spark_rocketmq.protocol.message import encode_batch_body, encode_properties  # noqa: E402


def batch_frame(topic: str, count: int, queue_id: int) -> bytes:
    records = [
        (0, b"x" * 100, encode_properties({"UNIQ_KEY": f"{i:032X}", "WAIT": "true", "TAGS": "bench"}).encode())
        for i in range(count)
    ]
    header = SendMessageRequestHeader(
        producer_group="bench",
        topic=topic,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties="WAIT\x01true",
        batch=True,
        broker_name="broker-a",
    )
    cmd = RemotingCommand(
        code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=header.to_v2_fields(), body=encode_batch_body(records)
    )
    return cmd.encode()


def sender(
    addr: tuple[str, int],
    frame: bytes,
    count: int,
    window: int,
    stop: threading.Event,
    totals: list[tuple[int, int]],
) -> None:
    sock = socket.create_connection(addr)
    decoder = FrameDecoder()
    in_flight = 0
    sent = 0
    busy = 0
    while not stop.is_set() or in_flight:
        while not stop.is_set() and in_flight < window:
            sock.sendall(frame)  # opaque 0 on every frame: only the count of answers matters
            in_flight += 1
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("broker closed the connection")
        for answer in decoder.feed(data):
            in_flight -= 1
            if answer.code == ResponseCode.SUCCESS:
                sent += count
            elif answer.code == ResponseCode.SYSTEM_BUSY:
                busy += 1
            else:
                raise RuntimeError(f"broker answered {answer.code}: {answer.remark}")
    sock.close()
    totals.append((sent, busy))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=5000, help="messages per SEND_BATCH_MESSAGE request")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument(
        "--in-flight",
        type=int,
        default=1,
        help="requests each connection keeps in flight (more queue past the broker's 200 ms limit: busy answers)",
    )
    parser.add_argument("--ack-only", action="store_true", help="the broker acknowledges and stores nothing")
    args = parser.parse_args()

    command = [sys.executable, "-m", "spark_rocketmq.local", "--brokers", "1", "--topic", "Bench"]
    proc = subprocess.Popen(
        [*command, "--ack-only"] if args.ack_only else command,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        broker_addr = None
        for line in proc.stdout:
            m = re.match(r"broker broker-a (\S+):(\d+)", line)
            if m:
                broker_addr = (m.group(1), int(m.group(2)))
                break
        if broker_addr is None:
            print("the local cluster did not start", file=sys.stderr)
            return 1
        frames = [batch_frame("Bench", args.batch, q % 4) for q in range(args.connections)]
        stop = threading.Event()
        totals: list[tuple[int, int]] = []
        threads = [
            threading.Thread(target=sender, args=(broker_addr, f, args.batch, args.in_flight, stop, totals))
            for f in frames
        ]
        started = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(args.seconds)  # the measured interval itself, not a synchronisation
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        stored = sum(t[0] for t in totals)
        busy = sum(t[1] for t in totals)
        what = "messages acked" if args.ack_only else "messages stored"
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
        print(
            f"{'batch':>7} {'connections':>11} {'in flight':>9} {what:>16} {'msgs/s':>10} "
            f"{'busy answers':>12} {'broker peak RSS':>16}"
        )
        print(
            f"{args.batch:>7} {args.connections:>11} {args.in_flight:>9} {stored:>16,} {stored / elapsed:>10,.0f} "
            f"{busy:>12} {peak_rss_mib(proc.pid):>12.0f} MiB"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
