"""Runs the sink under Spark Connect and prints one JSON line with what the client saw.

Started by test_sink_connect.py in a subprocess: ``SparkSession.builder.remote("local[2]")`` starts
a local Spark Connect server in this process's JVM, which cannot share a process with the rest of
the suite's classic session. SPARK_TESTING=1 in the environment makes the server take a free port
(and the client ask the server which one).

    python tests/spark/connect_job.py --namesrv 127.0.0.1:PORT --prefix Conn --workdir DIR
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any


def _connect_session() -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.remote("local[2]")
        .appName("spark-rocketmq-connect-tests")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )


def direct_call(spark: Any, namesrv: str, topic: str) -> dict[str, Any]:
    """sink(df, 0) in the client: the report comes back to the caller and its log."""
    from pyspark.sql import functions as F

    from spark_rocketmq import RocketMQSink

    sink = RocketMQSink(namesrv_addr=namesrv, topic=topic, group="connect-direct")
    df = spark.range(0, 500, numPartitions=2).select(F.col("id").cast("string").alias("body"))
    returned = sink(df, 0)
    report = sink.last_report
    return {
        "returned_messages": returned.messages,
        "last_report": None if report is None else report.to_dict(),
        "line": None if report is None else report.line(),
    }


def foreach_batch(spark: Any, namesrv: str, topic: str, workdir: Path) -> dict[str, Any]:
    """A file stream through foreachBatch: the function runs in the Connect server's Python worker."""
    from pyspark.sql import functions as F

    from spark_rocketmq import RocketMQSink

    src = workdir / "in"
    src.mkdir(parents=True)
    for f in range(2):
        rows = [{"id": f * 250 + i} for i in range(250)]
        (src / f"part-{f}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    reports = workdir / "foreach-reports"
    reports.mkdir()
    sink = RocketMQSink(namesrv_addr=namesrv, topic=topic, group="connect-stream")
    reports_dir = str(reports)

    def publish(df: Any, batch_id: int) -> None:
        # Runs where Connect runs foreachBatch functions; what the sink kept is written down for the test.
        logging.basicConfig(level=logging.INFO)
        returned = sink(df, batch_id)
        assert sink.last_report is returned
        with open(os.path.join(reports_dir, f"{batch_id}.json"), "w", encoding="utf-8") as fh:
            json.dump({"last_report": sink.last_report.to_dict(), "line": sink.last_report.line()}, fh)

    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
        .select(F.col("id").cast("string").alias("body"))
    )
    query = (
        stream.writeStream.foreachBatch(publish)
        .option("checkpointLocation", str(workdir / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(240)
    finally:
        query.stop()
    error = query.exception()
    return {
        "finished": bool(finished),
        "error": None if error is None else str(error),
        "reports": [json.loads(p.read_text()) for p in sorted(reports.glob("*.json"))],
        "client_last_report": None if sink.last_report is None else sink.last_report.to_dict(),
    }


def format_batch(spark: Any, namesrv: str, topic: str, workdir: Path) -> dict[str, Any]:
    """df.write.format("rocketmq") from a Connect client."""
    from pyspark.sql import functions as F

    from spark_rocketmq import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    df = spark.range(0, 600, numPartitions=3).select(F.col("id").cast("string").alias("body"))
    (
        df.write.format("rocketmq")
        .option("namesrvAddr", namesrv)
        .option("topic", topic)
        .option("producerGroup", "connect-format")
        .option("reportDir", str(workdir / "format-reports"))
        .mode("append")
        .save()
    )
    lines = (workdir / "format-reports" / "reports.jsonl").read_text().splitlines()
    return {"reports": [json.loads(line) for line in lines]}


def read_back(spark: Any, namesrv: str, topic: str, workdir: Path) -> dict[str, Any]:
    """spark.read and spark.readStream .format("rocketmq") from a Connect client (the topic format_batch wrote)."""
    read = spark.read.format("rocketmq").option("namesrvAddr", namesrv).option("topic", topic).load()
    bodies = sorted(int(r.body) for r in read.select("body").collect())
    query = (
        spark.readStream.format("rocketmq")
        .option("namesrvAddr", namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "250")
        .load()
        .selectExpr("CAST(body AS STRING) AS body")
        .writeStream.format("parquet")
        .option("path", str(workdir / "read-stream"))
        .option("checkpointLocation", str(workdir / "read-stream-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    streamed = sorted(int(r.body) for r in spark.read.parquet(str(workdir / "read-stream")).collect())
    return {"batch_bodies": bodies, "stream_bodies": streamed, "stream_batches": query.lastProgress["batchId"] + 1}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--prefix", required=True, help="topics: <prefix>Direct, <prefix>Stream, <prefix>Format")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    workdir = Path(args.workdir)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    logging.getLogger("spark_rocketmq").setLevel(logging.INFO)

    spark = _connect_session()
    try:
        out = {
            "is_connect": type(spark).__module__.startswith("pyspark.sql.connect"),
            "direct": direct_call(spark, args.namesrv, args.prefix + "Direct"),
            "stream": foreach_batch(spark, args.namesrv, args.prefix + "Stream", workdir),
            "format": format_batch(spark, args.namesrv, args.prefix + "Format", workdir),
        }
        out["read"] = read_back(spark, args.namesrv, args.prefix + "Format", workdir)
    finally:
        spark.stop()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
