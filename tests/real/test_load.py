"""Full speed with default options against a real RocketMQ: the brokers' flow control (busy answers,
[TIMEOUT_CLEAN_QUEUE]) costs time, never a row. What was stored is read back by the kit's Java consumer.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import functions as F

from spark_rocketmq import Message, Producer

from .kit import Kit

SINK_ROWS = 200_000
THREADS, BATCHES, PER_BATCH, ASYNC = 4, 10, 2_500, 20_000


def test_sink_at_full_speed_loses_nothing(spark, kit: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    df = spark.range(0, SINK_ROWS, numPartitions=4).select(
        F.concat(F.lit("load-"), F.lpad(F.col("id").cast("string"), 96, "0")).alias("body")  # 100 B rows
    )
    df.write.format("rocketmq").option("namesrvAddr", real_addr).option("topic", real_topic).option(
        "reportDir", str(tmp_path)
    ).mode("append").save()
    (entry,) = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
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

        with ThreadPoolExecutor(THREADS) as pool:
            batch_sent = pool.map(batches, range(THREADS))
            futures = [
                p.send_async(Message(real_topic, f"async-{i:06d}".encode().ljust(100, b"."))) for i in range(ASYNC)
            ]
            assert [f.result(timeout=120).count for f in futures] == [1] * ASYNC
            assert sum(batch_sent) == THREADS * BATCHES * PER_BATCH
        stats = p.stats()
    print(f"producer at full speed: {stats}")  # busy answers, if any, are resent: shown with -s
    assert stats.failures == 0
    total = THREADS * BATCHES * PER_BATCH + ASYNC
    stored = kit.dump(real_topic, at_least=total)
    assert len(stored) == total == len({m["bodySha256"] for m in stored})
