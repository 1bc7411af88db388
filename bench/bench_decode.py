"""Pull-body decoding benchmark: messages/s and MB/s of spark/decoder.py beside protocol/stored.py.

Messages of 100-byte bodies with the properties a Java producer and broker write (UNIQ_KEY, KEYS,
TAGS, WAIT, CLUSTER), in commit-log records as a broker answers PULL_MESSAGE. Cases:

- ``pull32``: one answer of 32 messages per call (a broker's default maxTransferCountOnMessageInMemory);
- ``pull256k``: one answer of 256 KiB per call (maxTransferBytesOnMessageInMemory);
- ``batched``: decode_pull_bodies of 64 answers of 32 messages per call (what a reader can do);
- ``scale``: 1,000,000 messages in answers of 256 KiB, decoded one answer per call.

Each case decodes the same bytes with decode_pull_body (an Arrow record batch) and with
decode_stored_messages (a StoredMessage per message, keys/tags/msg id read). Times are CPU seconds of
this process (time.process_time), the best of --runs, so that other work on a shared machine weighs
less; MB/s counts the encoded bytes.

    python bench/bench_decode.py                     # every case, 3 runs
    python bench/bench_decode.py --case scale --runs 1
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_rocketmq.protocol.message import encode_properties  # noqa: E402
from spark_rocketmq.protocol.stored import decode_stored_messages, encode_stored_records  # noqa: E402
from spark_rocketmq.spark.decoder import decode_pull_bodies, decode_pull_body  # noqa: E402

BODY = 100
PULL_BYTES = 256 * 1024


def answers(messages: int, per_answer: int | None, bytes_per_answer: int | None) -> list[bytes]:
    """Pull answers holding ``messages`` messages, split by count or by size."""
    items = []
    for i in range(messages):
        props = {
            "UNIQ_KEY": f"0A000001B5C818B4AAC2{i:012X}",
            "KEYS": f"order-{i}",
            "TAGS": f"tag{i % 4}",
            "WAIT": "true",
        }
        items.append((0, bytes([65 + i % 26]) * BODY, encode_properties(props).encode()))
    data, sizes = encode_stored_records(
        items,
        topic="BenchmarkTest",
        queue_id=0,
        first_queue_offset=0,
        commit_log_offset=0,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        born_host=("10.0.0.5", 51234),
        store_timestamp=1_700_000_000_100,
        store_host=("10.0.0.9", 10911),
        extra_properties=b"CLUSTER\x01DefaultCluster",
    )
    out: list[bytes] = []
    start = pos = count = 0
    for size in sizes:
        if (per_answer and count == per_answer) or (bytes_per_answer and pos - start + size > bytes_per_answer):
            out.append(data[start:pos])
            start, count = pos, 0
        pos += size
        count += 1
    out.append(data[start:pos])
    return out


def reference(body: bytes) -> int:
    """decode_stored_messages, reading what a row holds besides the fields (tags, keys, msg id)."""
    msgs = decode_stored_messages(body)
    for m in msgs:
        m.tags, m.keys, m.msg_id  # noqa: B018
    return len(msgs)


def best(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    times = []
    count = 0
    for _ in range(runs):
        start = time.process_time()
        count = fn()
        times.append(time.process_time() - start)
    return min(times), count


def case(name: str, bodies: list[bytes], runs: int, group: int = 1) -> None:
    size = sum(len(b) for b in bodies)
    if group > 1:
        groups = [bodies[i : i + group] for i in range(0, len(bodies), group)]
        ours = best(runs, lambda: sum(decode_pull_bodies(g, broker_name="broker-a").num_rows for g in groups))
    else:
        ours = best(runs, lambda: sum(decode_pull_body(b, broker_name="broker-a").num_rows for b in bodies))
    ref = best(runs, lambda: sum(reference(b) for b in bodies))
    assert ours[1] == ref[1], (ours[1], ref[1])
    calls = len(bodies) // group or 1
    print(f"{name}: {ours[1]:,} messages, {size / 1e6:.1f} MB, {calls:,} calls of {ours[1] / calls:,.0f} messages")
    for label, (seconds, count) in (("decode_pull_body", ours), ("decode_stored_messages", ref)):
        print(f"  {label:24s} {count / seconds:>12,.0f} msgs/s {size / seconds / 1e6:>8.1f} MB/s  ({seconds:.3f} s)")
    print(f"  ratio {ref[0] / ours[0]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=["pull32", "pull256k", "batched", "scale"], action="append")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cases = args.case or ["pull32", "pull256k", "batched", "scale"]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    if "pull32" in cases:
        case("pull32", answers(32 * 300, 32, None), args.runs)
    if "pull256k" in cases:
        case("pull256k", answers(40_000, None, PULL_BYTES), args.runs)
    if "batched" in cases:
        case("batched (64 answers of 32 per call)", answers(32 * 64 * 10, 32, None), args.runs, group=64)
    if "scale" in cases:
        case("scale", answers(1_000_000, None, PULL_BYTES), args.runs)


if __name__ == "__main__":
    main()
