"""Full speed with default options against a real RocketMQ: the brokers' flow control (busy answers,
[TIMEOUT_CLEAN_QUEUE]) costs time, never a row. What was stored is read back by the kit's Java consumer.

The loads are as large as it takes for flow control to act: the producer test checks that its sends
waited for room (its in-flight limit reached) or that a broker answered busy; the sink's rows make
MessageBatch requests of about 1 MiB, several per partition and broker, more than a broker's initial
in-flight window holds at once.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import functions as F

from spark_rocketmq import Message, Producer

from .kit import Kit

SINK_ROWS = 100_000
THREADS, BATCHES, PER_BATCH, ASYNC = 4, 5, 2_500, 20_000


def test_sink_at_full_speed_loses_nothing(spark, kit: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    df = spark.range(0, SINK_ROWS, numPartitions=4).select(
        F.concat(F.lit("load-"), F.lpad(F.col("id").cast("string"), 96, "0")).alias("body")  # 100 B rows
    )
    df.write.format("rocketmq").option("namesrvAddr", real_addr).option("topic", real_topic).option(
        "reportDir", str(tmp_path)
    ).mode("append").save()
    (entry,) = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    print(f"sink at full speed: {entry}")  # retries and resends after busy answers, if any: shown with -s
    assert (entry["messages"], entry["failed_rows"], entry["state"]) == (SINK_ROWS, 0, "committed")
    stored = kit.dump(real_topic, at_least=SINK_ROWS)
    assert len(stored) == SINK_ROWS == len({m["uniq"] for m in stored}) == len({m["bodySha256"] for m in stored})


def test_producer_at_full_speed_loses_nothing(kit: Kit, real_addr: str, real_topic: str) -> None:
    with Producer(namesrv_addr=real_addr, group="spark_rocketmq_real_load") as p:

        def batches(t: int) -> int:
            sent = 0
            for b in range(BATCHES):
                msgs = [
                    Message(real_topic, f"batch-{t}-{b}-{i:06d}".encode().ljust(100, b".")) for i in range(PER_BATCH)
                ]
                sent += sum(r.count for r in p.send_batch(msgs))
            return sent

        peak = 0
        sending = threading.Event()
        sending.set()

        def watch() -> None:  # the most sends ever pending at once
            nonlocal peak
            while sending.is_set():
                peak = max(peak, p.stats().in_flight)
                time.sleep(0.001)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            with ThreadPoolExecutor(THREADS) as pool:
                batch_sent = pool.map(batches, range(THREADS))
                futures = [
                    p.send_async(Message(real_topic, f"async-{i:06d}".encode().ljust(100, b"."))) for i in range(ASYNC)
                ]
                assert [f.result(timeout=120).count for f in futures] == [1] * ASYNC
                assert sum(batch_sent) == THREADS * BATCHES * PER_BATCH
        finally:
            sending.clear()
            watcher.join()
        stats = p.stats()
        limit = p.config.max_in_flight
    print(f"producer at full speed: {stats}, at most {peak} of {limit} sends pending")  # shown with -s
    assert stats.failures == 0
    assert stats.busy_answers > 0 or peak == limit, "flow control never acted: a load too small to test it"
    total = THREADS * BATCHES * PER_BATCH + ASYNC
    stored = kit.dump(real_topic, at_least=total)
    assert len(stored) == total == len({m["bodySha256"] for m in stored})
