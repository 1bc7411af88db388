"""A user's own streaming app for spark-submit: JSON files -> a projection -> foreachBatch(RocketMQSink).

    spark-submit --py-files spark_rocketmq-VERSION-py-files.zip foreach_batch_app.py NAMESRV TOPIC INPUT CHECKPOINT

Prints one JSON line: the micro-batches and rows the sink reported.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink


def main(namesrv: str, topic: str, input_dir: str, checkpoint: str) -> int:
    spark = SparkSession.builder.appName("foreach-batch-app").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    sink = RocketMQSink(namesrv_addr=namesrv, topic=topic, group="standalone-app")
    reports = []

    def publish(df, batch_id: int) -> None:
        reports.append(sink(df, batch_id))

    orders = spark.readStream.schema("order_id LONG, status STRING").json(input_dir)
    messages = orders.select(
        F.to_json(F.struct("order_id", "status")).alias("body"),
        F.col("status").alias("tags"),
        F.concat(F.lit("order-"), F.col("order_id").cast("string")).alias("keys"),
    )
    query = (
        messages.writeStream.foreachBatch(publish)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(json.dumps({"batches": len(reports), "rows": sum(r.rows for r in reports)}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
