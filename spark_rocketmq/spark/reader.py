"""``spark.read.format("rocketmq")``: a batch read of topics between two positions.

The reader is made and planned on the driver (Spark runs ``reader()`` and ``partitions()`` in a Python
worker of the driver's host): it asks the NameServer for the topics' queues and the brokers for the
offsets the start and end positions name, then splits the ranges into tasks (spark/read_plan.py). Each
task pulls its ranges with its executor's pooled consumer (spark/read_task.py) and yields Arrow batches
of the read schema (spark/read_schema.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..client.pull_consumer import PullConsumer
from ..errors import ConfigError
from ..protocol.route import MessageQueue
from .offsets import Position, QueueOffsets, check_named_queues, describe, resolve
from .read_options import ReadOptions, parse_read_options
from .read_plan import QueueRange, queue_ranges, split_ranges
from .read_task import DataLossError, read_ranges

log = logging.getLogger("spark_rocketmq.spark.reader")


@dataclass
class RocketMQInputPartition(InputPartition):
    """One task's share: offset ranges of one or more queues."""

    ranges: list[QueueRange]

    def __init__(self, ranges: list[QueueRange]) -> None:
        super().__init__(len(ranges))
        self.ranges = ranges


def subscribe_queues(consumer: PullConsumer, topics: list[str]) -> list[MessageQueue]:
    """Every readable queue of the topics (TopicNotFoundError names a topic the NameServer lacks)."""
    queues: list[MessageQueue] = []
    for topic in topics:
        queues.extend(consumer.fetch_subscribe_queues(topic))
    return sorted(queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))


def check_data_loss(
    start: QueueOffsets,
    consumer: PullConsumer,
    options: ReadOptions,
    what: str,
    skipped: dict[MessageQueue, int] | None = None,
    ends: QueueOffsets | None = None,
) -> QueueOffsets:
    """Starts below a queue's min offset (messages deleted by retention): fail, or move up (to at most the
    queue's offset in ``ends``: the rest is a later range's), log, and add the offsets skipped to ``skipped``."""
    out = dict(start)
    for mq, offset in start.items():
        low = consumer.min_offset(mq)
        if offset >= low:
            continue
        text = f"{describe(mq)}: {what} offset {offset} is below the queue's min offset {low} (deleted by retention)"
        if options.fail_on_data_loss:
            raise DataLossError(f"{text}; set failOnDataLoss=false to skip the missing offsets")
        moved = low if ends is None else min(low, ends.get(mq, low))
        log.warning("%s: skipping %d offsets (failOnDataLoss=false)", text, moved - offset)
        out[mq] = moved
        if skipped is not None:
            skipped[mq] = skipped.get(mq, 0) + moved - offset
    return out


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options, self.config = parse_read_options(options)
        if self.options.max_offsets_per_trigger is not None:
            raise ConfigError("option maxOffsetsPerTrigger is for spark.readStream; a batch read reads its whole range")
        if self.options.consumer_group and self.options.starting_offsets != "group":
            log.info("consumerGroup is only read (startingOffsets=group) by a batch read; nothing is committed")

    def plan(self) -> list[QueueRange]:
        """The ranges to read, from the brokers' offsets now."""
        o = self.options
        with PullConsumer(self.config) as consumer:
            queues = subscribe_queues(consumer, o.topics)
            starting = Position.of(o.starting_offsets, o.starting_timestamp, "earliest", "startingOffsets")
            ending = Position.of(o.ending_offsets, o.ending_timestamp, "latest", "endingOffsets")
            if ending.kind == "group":
                raise ConfigError("option endingOffsets=group is not supported: give latest, JSON or endingTimestamp")
            for position in (starting, ending):
                if position.offsets is not None:
                    check_named_queues(position.offsets, queues, position.option, o.topics)
            fallback = o.starting_offsets_fallback or "earliest"
            start = resolve(starting, queues, consumer, fallback=fallback, group=o.consumer_group)
            end = resolve(ending, queues, consumer, fallback="latest")
            start = check_data_loss(start, consumer, o, "the starting")
        for mq in queues:
            if start[mq] > end[mq]:
                raise ConfigError(
                    f"{describe(mq)}: the starting offset {start[mq]} is after the ending offset {end[mq]}; check "
                    "startingOffsets / endingOffsets (or the timestamps)"
                )
        ranges = queue_ranges(start, end)
        log.info("reading %d offsets of %d queues of %s", sum(r.size for r in ranges), len(ranges), ",".join(o.topics))
        return ranges

    def partitions(self) -> list[InputPartition]:
        return [RocketMQInputPartition(task) for task in split_ranges(self.plan(), self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RocketMQInputPartition):  # no partition to read: Spark runs one empty task
            yield from read_ranges(partition.ranges, self.options, self.config)
