"""Message trace of a batch write whose application stops right after it: every row's Pub record is in the
trace topic, because each task writes its trace before it ends (spark/task_producer.py).

The job runs in a subprocess with a Spark session of its own (this file, run as a script): it writes, stops
Spark at once and exits, as a batch application does; the test then reads the trace topic back from the
local brokers' stores. The pooled producers are kept (the default producerIdleTimeoutMs), so no close()
writes the traces. Before the tasks flushed them, the records the trace thread still held for its 500 ms
wait died with the Python workers: with spark.python.worker.reuse=true (Spark's default) when the stop
killed them, which most runs showed; with reuse=false as soon as each task ended (the worker's os._exit),
which every run showed.

    python tests/spark/test_trace_flush.py --namesrv 127.0.0.1:PORT --topic T --path sink|format --reuse true|false
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_rocketmq.client import TransactionState
from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.client.hooks import EndTransactionContext
from spark_rocketmq.client.results import SendResult
from spark_rocketmq.client.trace import MessageTracer
from spark_rocketmq.protocol.message import Message
from spark_rocketmq.protocol.trace import RMQ_SYS_TRACE_TOPIC, PubTrace, decode_trace_records
from spark_rocketmq.spark.job import WriteJob
from spark_rocketmq.spark.message_ids import batch_context
from spark_rocketmq.spark.options import SinkOptions
from spark_rocketmq.spark.pool import ProducerPool
from spark_rocketmq.spark.schema import MessageColumns
from spark_rocketmq.spark.writer import write_partition

ROWS = 2000
PARTITIONS = 4


def _job(namesrv: str, topic: str, path: str, reuse: str) -> dict[str, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: spark_session
    from pyspark.sql import functions as F
    from spark_session import spark_builder

    from spark_rocketmq import RocketMQDataSource, RocketMQSink

    builder = spark_builder("local[2]", f"spark-rocketmq-trace-flush-{path}")
    spark = builder.config("spark.python.worker.reuse", reuse).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if path == "format":
        spark.dataSource.register(RocketMQDataSource)
    df = spark.range(0, ROWS, numPartitions=PARTITIONS).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).alias("body"),
        F.concat(F.lit("k-"), F.col("id").cast("string")).alias("keys"),
    )
    options = {"namesrvAddr": namesrv, "topic": topic, "group": "trace-flush", "enableMsgTrace": "true"}
    messages = -1
    if path == "sink":
        messages = RocketMQSink(**options)(df, 0).messages
    else:
        df.write.format("rocketmq").options(**options).mode("append").save()
    spark.stop()  # at once: the executors' Python workers end with it
    return {"messages": messages}


def run_job(namesrv: str, topic: str, path: str, reuse: str) -> dict[str, Any]:
    """Run the job in a process of its own (also the real tier's: tests/real/test_extensions.py)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, __file__, "--namesrv", namesrv, "--topic", topic, "--path", path,
         "--reuse", reuse],
        capture_output=True, text=True, timeout=280, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    out = dict(json.loads(lines[-1]))
    out["trace_warnings"] = [line for line in proc.stderr.splitlines() if "trace" in line]  # the tasks' own
    return out


def test_flush_settled_waits_for_the_trace_messages_answers_within_its_timeout() -> None:
    sent: list[Future[SendResult]] = []

    def send(message: Message) -> Future[SendResult]:
        sent.append(Future())
        return sent[-1]

    tracer = MessageTracer("g", RMQ_SYS_TRACE_TOPIC, send)
    try:
        assert not tracer.pending()
        tracer.end_transaction(
            EndTransactionContext("g", "127.0.0.1:1", "T", "ID", None, TransactionState.COMMIT, False)
        )
        assert tracer.pending()
        assert tracer.flush(5.0)  # handed to the trace producer: enough without settled
        assert tracer.pending() and len(sent) == 1  # its answer is awaited
        assert not tracer.flush(0.05, settled=True)  # no answer within the timeout: False, not a hang
        sent[0].set_exception(OSError("no answer"))
        assert tracer.flush(5.0, settled=True) and not tracer.pending() and tracer.failed == 1
    finally:
        tracer.close(1.0)


def test_a_task_ends_with_its_trace_written_and_its_pooled_producer_open(cluster) -> None:
    cluster.create_topic("TraceTask", queues=2)
    config = ProducerConfig(namesrv_addr=cluster.namesrv_addr, group="trace-task", enable_msg_trace=True)
    job = WriteJob(config, SinkOptions(topic="TraceTask"), MessageColumns(body="body"), batch_context("q", 1))
    pool = ProducerPool()
    try:
        rows = pa.RecordBatch.from_pydict({"body": pa.array([b"row-%d" % i for i in range(50)])})
        summary = write_partition([rows], job, partition=0, pool=pool)
        assert summary.messages == 50
        [lease] = [pool.acquire(config)]  # the task's producer, still pooled and open
        tracer = lease.client.tracer  # type: ignore[attr-defined]
        assert not lease.client.closed and not tracer.pending()
        pool.release(lease)
        stored = {m.uniq_key for m in cluster.messages("TraceTask")}
        traced = {
            r.msg_id
            for m in cluster.messages(RMQ_SYS_TRACE_TOPIC)
            for r in decode_trace_records(m.decompressed_body().decode())
            if isinstance(r, PubTrace)
        }
        assert len(stored) == 50 and stored <= traced
    finally:
        pool.reset()


@pytest.mark.spark
@pytest.mark.parametrize(("path", "reuse"), [("sink", "true"), ("format", "false")])
def test_every_row_is_traced_when_spark_stops_right_after_the_write(cluster, path: str, reuse: str) -> None:
    from spark_rocketmq.spark.compat import supports_datasource

    if path == "format" and not supports_datasource():
        pytest.skip('format("rocketmq") needs the Python Data Source API (PySpark 4.1+)')
    topic = f"TraceFlush{path.capitalize()}"
    cluster.create_topic(topic, queues=4)
    out = run_job(cluster.namesrv_addr, topic, path, reuse)
    assert out["messages"] in (ROWS, -1)
    stored = {m.uniq_key for m in cluster.messages(topic)}
    assert len(stored) == ROWS
    traced = {
        r.msg_id
        for m in cluster.messages(RMQ_SYS_TRACE_TOPIC)
        for r in decode_trace_records(m.decompressed_body().decode())
        if isinstance(r, PubTrace) and r.topic == topic
    }
    missing = stored - traced
    assert not missing, f"{len(missing)} of {ROWS} rows have no Pub record in {RMQ_SYS_TRACE_TOPIC}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--path", choices=["sink", "format"], required=True)
    parser.add_argument("--reuse", choices=["true", "false"], required=True)
    args = parser.parse_args()
    print(json.dumps(_job(args.namesrv, args.topic, args.path, args.reuse)))
