"""A streaming read of a topic into JSON files (Spark's file sink), run by test_reader.py in a process of its
own so that the test can SIGKILL the driver mid-stream and start it again on the same checkpoint.

    python tests/real/stream_read_job.py --namesrv HOST:PORT --topic T --checkpoint DIR --out DIR
        [--max-offsets N] [--available-now]

Each row written is one message's position and identity (broker_name, queue_id, queue_offset, msg_id and the
SHA-256 of its body). Without --available-now it reads on until it is killed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: spark_session


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-offsets", type=int, default=100)
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()

    from spark_session import local_session

    spark = local_session("spark-rocketmq-real-stream-read")
    rows = (
        spark.readStream.format("rocketmq")
        .option("namesrvAddr", args.namesrv)
        .option("topic", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets))
        .load()
        .selectExpr("broker_name", "queue_id", "queue_offset", "msg_id", "sha2(body, 256) AS sha")
    )
    writer = rows.writeStream.format("json").option("path", args.out).option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        print(f"stream_read_job: {query.exception()}", file=sys.stderr)
        return 1
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
