"""Runs the sink on master local-cluster[2,1,1024] (two executor JVMs) and prints one JSON line.

Started by test_sink_cluster.py in a subprocess: a Python process holds one SparkContext, and the
rest of the suite shares a local[2] one. Exit code 3: the local cluster could not start.

    python tests/spark/cluster_job.py --namesrv 127.0.0.1:PORT --topic T --scenario producers|kill
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterator

import pyarrow as pa


def _kill_executor_once(marker: str):
    """An Arrow pass-through that kills its executor JVM in partition 1, first attempt, mid-way."""

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        tc = TaskContext.get()
        for i, rb in enumerate(batches):
            yield rb
            if tc.partitionId() == 1 and tc.attemptNumber() == 0 and i == 2 and not os.path.exists(marker):
                # python worker -> pyspark.daemon -> executor JVM (never the driver's JVM)
                jvm = _parent_of(os.getppid())
                with open(f"/proc/{jvm}/cmdline", "rb") as fh:
                    if b"CoarseGrainedExecutorBackend" not in fh.read():
                        continue
                with open(marker, "w") as fh:
                    fh.write(str(jvm))
                os.kill(jvm, signal.SIGKILL)

    return fn


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--scenario", choices=["producers", "kill"], required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_rocketmq import RocketMQSink

    try:
        spark = (
            SparkSession.builder.master("local-cluster[2,1,1024]")
            .appName("spark-rocketmq-cluster-test")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
            .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(2, numPartitions=2).count()
    except Exception as exc:
        print(json.dumps({"error": f"local-cluster did not start: {exc}"}))
        return 3

    sink = RocketMQSink(namesrv_addr=args.namesrv, topic=args.topic, group="cluster-test", max_request_bytes=8000)
    out: dict = {}
    if args.scenario == "producers":
        reports = []
        for batch_id in range(3):
            df = spark.range(batch_id * 4000, (batch_id + 1) * 4000, numPartitions=8).select(
                F.col("id").cast("string").alias("body")
            )
            reports.append(sink(df, batch_id))
        out["messages"] = sum(r.messages for r in reports)
        out["producers"] = [{str(k): v for k, v in r.producers.items()} for r in reports]
    else:
        marker = os.path.join(args.workdir, "killed")
        df = (
            spark.range(0, 6000, numPartitions=3)
            .select(F.col("id").cast("string").alias("body"))
            .mapInArrow(_kill_executor_once(marker), "body string")
        )
        report = sink(df, 0)
        out["messages"] = report.messages
        out["killed"] = os.path.exists(marker)
        out["partitions"] = report.partitions
    spark.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
