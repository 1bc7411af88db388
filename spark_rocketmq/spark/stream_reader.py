"""``spark.readStream.format("rocketmq")``: a streaming read, its offsets in Spark's checkpoint.

Offsets are per (topic, brokerName, queue id), in spark/offsets.py's JSON form; Spark keeps them in
the query's checkpoint, so a restarted query resumes exactly where its last committed micro-batch ended.
Each micro-batch:

- ``latestOffset(start, limit)`` asks the routes for the topics' queues (a queue or broker that appeared
  since starts at offset 0, its earliest) and each queue's max offset. A queue whose broker does not
  answer keeps its start offset: that queue waits, the others are read. With ``maxOffsetsPerTrigger``
  (Spark 4.2+: ``ReadMaxRows``) the micro-batch's share is spread over the queues by backlog
  (spark/read_plan.py ``admit``). On Spark 4.1, whose engine passes no read limit, the reader applies
  maxOffsetsPerTrigger itself from the end of its previous micro-batch.
- ``partitions`` and ``read`` are the batch reader's (spark/read_plan.py, spark/read_task.py).
- ``commit(end)``: with ``consumerGroup``, the end offsets are written to the brokers under that group
  (UPDATE_CONSUMER_OFFSET) so operators see the query's lag; the per-batch source metrics are recorded.

Trigger.AvailableNow: ``prepareForTriggerAvailableNow`` notes every queue's max offset, and no
micro-batch goes past it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from ..client.pull_consumer import PullConsumer
from ..errors import ClusterConfigError, ConfigError, RocketMQError
from ..protocol.route import MessageQueue
from .offsets import Position, QueueOffsets, check_named_queues, describe, from_json_dict, resolve, to_json_dict
from .read_options import parse_read_options
from .read_plan import admit, queue_ranges, split_ranges
from .read_task import read_ranges
from .reader import RocketMQInputPartition, check_data_loss, subscribe_queues
from .source_metrics import record_source_batch, record_source_skipped, source_metrics

log = logging.getLogger("spark_rocketmq.spark.reader")

try:  # Spark 4.2+: admission control and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.1: latestOffset() takes nothing
    ReadLimit = object  # type: ignore[misc,assignment]
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[misc,assignment]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.options, self.config = parse_read_options(options)
        o = self.options
        if o.ending_offsets is not None or o.ending_timestamp is not None:
            raise ConfigError(
                "options endingOffsets / endingTimestamp are for spark.read (a batch read); a stream reads on "
                "(use Trigger.AvailableNow to stop at what is there when the query starts)"
            )
        self._consumer: Any = None
        self._target: QueueOffsets | None = None  # Trigger.AvailableNow: no micro-batch goes past it
        self._previous_end: QueueOffsets | None = None
        self._latest: QueueOffsets = {}
        self._metrics: Any = None
        self._group_announced = False

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options only: the driver's consumer and progress stay on the driver.
        state = dict(self.__dict__)
        state.update(_consumer=None, _target=None, _previous_end=None, _latest={}, _metrics=None)
        state["_group_announced"] = False
        return state

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            self._consumer = PullConsumer(self.config)
        return self._consumer

    # -- offsets ---------------------------------------------------------------------------------------
    def _queues(self) -> list[MessageQueue]:
        return subscribe_queues(self.consumer, self.options.topics)

    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        queues = self._queues()
        position = Position.of(o.starting_offsets, o.starting_timestamp, "latest", "startingOffsets")
        if position.offsets is not None:
            check_named_queues(position.offsets, queues, position.option, o.topics)
        fallback = o.starting_offsets_fallback or "latest"
        start = resolve(position, queues, self.consumer, fallback=fallback, group=o.consumer_group)
        start = check_data_loss(start, self.consumer, o, "the starting")
        log.info("a new streaming read of %s starts at %s", ",".join(o.topics), to_json_dict(start))
        self._previous_end = start
        return to_json_dict(start)

    def _max_offsets(self, start: QueueOffsets, *, strict: bool = False) -> QueueOffsets:
        """Every queue's max offset now; a queue whose broker does not answer keeps its start (``strict``: the
        failure is raised instead). A refusal no retry cures (ACL, configuration) is always raised."""
        latest: QueueOffsets = {}
        try:
            queues = self._queues()
        except ClusterConfigError:
            raise
        except RocketMQError as exc:
            if strict:
                raise
            log.warning("no route of %s now (%s): the micro-batch reads nothing new", self.options.topics, exc)
            return dict(start)
        failed: dict[str, str] = {}
        for mq in queues:
            if mq.broker_name in failed:
                if mq in start:
                    latest[mq] = start[mq]
                continue
            try:
                latest[mq] = self.consumer.max_offset(mq)
            except ClusterConfigError:
                raise
            except RocketMQError as exc:
                if strict:
                    raise
                failed[mq.broker_name] = str(exc)
                if mq in start:
                    latest[mq] = start[mq]
        for broker, why in failed.items():
            log.warning("broker %s did not answer (%s): its queues wait for a later micro-batch", broker, why)
        for mq, offset in start.items():  # queues the route no longer names: nothing more to read there
            latest.setdefault(mq, offset)
            if latest[mq] < offset:
                log.warning(
                    "%s: the broker's max offset %d is below the query's offset %d (a failover that lost "
                    "messages, or a reset queue): reading waits until the queue passes %d",
                    describe(mq),
                    latest[mq],
                    offset,
                    offset,
                )
                latest[mq] = offset
        return latest

    def _new_queues(self, begin: QueueOffsets, latest: QueueOffsets) -> QueueOffsets:
        """Queues that appeared since ``begin``: each starts at its min offset (its earliest), recorded as its
        end in this micro-batch and read from the next one on. One whose broker does not answer waits."""
        fresh: QueueOffsets = {}
        for mq in latest:
            if mq not in begin:
                try:
                    fresh[mq] = self.consumer.min_offset(mq)
                except ClusterConfigError:
                    raise
                except RocketMQError as exc:
                    log.warning("new queue %s: no min offset yet (%s); it waits", describe(mq), exc)
        return fresh

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        if start is None:  # Spark 4.1: no start, no limit; the reader limits itself from its previous end
            begin = self._previous_end
            cap = self.options.max_offsets_per_trigger if begin is not None else None
            if begin is None:  # a restarted query on 4.1: Spark keeps where it is; every queue's max, or raise
                latest = self._max_offsets({}, strict=True)
                self._latest = dict(latest)
                self._previous_end = latest
                return to_json_dict(latest)
        else:
            begin = from_json_dict(start, "the checkpointed start offset")
            cap = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        latest = self._max_offsets(begin)
        self._latest = dict(latest)
        fresh = self._new_queues(begin, latest)
        latest = {mq: off for mq, off in latest.items() if mq in begin}
        if self._target is not None:
            latest = {mq: min(off, self._target.get(mq, begin[mq])) for mq, off in latest.items()}
            latest = {mq: max(off, begin[mq]) for mq, off in latest.items()}
        end = admit(begin, latest, cap)
        end.update(fresh)
        self._previous_end = end
        return to_json_dict(end)

    def getDefaultReadLimit(self) -> Any:
        cap = self.options.max_offsets_per_trigger
        if ReadMaxRows is None:
            return None
        return ReadMaxRows(cap) if cap is not None else ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json_dict(self._latest) if self._latest else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._max_offsets({}, strict=True)  # a target missing queues would end the run early
        log.info("Trigger.AvailableNow: reading up to %s", to_json_dict(self._target))

    # -- reading ---------------------------------------------------------------------------------------
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        first = from_json_dict(start, "the micro-batch's start offset")
        last = from_json_dict(end, "the micro-batch's end offset")
        if not self.options.fail_on_data_loss:
            first = self._skip_lost(first, last)
        ranges = queue_ranges(first, last)
        return [RocketMQInputPartition(task) for task in split_ranges(ranges, self.options.min_partitions)]

    def _skip_lost(self, first: QueueOffsets, last: QueueOffsets) -> QueueOffsets:
        """failOnDataLoss=false: the micro-batch's ranges start at the queues' min offsets where retention
        deleted their first offsets (one GET_MIN_OFFSET a queue with offsets to read), and what is skipped is
        logged and counted (rocketmq_source_skipped_offsets_total). A queue whose broker does not answer
        keeps its start: its task skips what its pulls find gone (logged on the executor)."""
        reading = {mq: off for mq, off in first.items() if off < last.get(mq, off)}
        skipped: dict[MessageQueue, int] = {}
        out = dict(first)
        for mq, offset in reading.items():
            try:  # past this micro-batch's end, the rest is skipped (and counted) by the next one
                lost = check_data_loss({mq: offset}, self.consumer, self.options, "the micro-batch's", skipped, last)
                out.update(lost)
            except ClusterConfigError:
                raise
            except RocketMQError as exc:
                log.warning("%s: min offset not known (%s); its task skips what is gone", describe(mq), exc)
        if self._metrics is None:
            self._metrics = source_metrics()
        record_source_skipped(self._metrics, skipped)
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RocketMQInputPartition):  # no partition to read: Spark runs one empty task
            yield from read_ranges(partition.ranges, self.options, self.config)

    # -- after a micro-batch -----------------------------------------------------------------------------
    def commit(self, end: dict[str, Any]) -> None:
        offsets = from_json_dict(end, "the committed end offset")
        self._previous_end = offsets
        group = self.options.consumer_group
        if group and not self._group_announced:  # mqadmin consumerProgress -g GROUP finds the group by it
            try:
                self._group_announced = self.consumer.announce_group(group, self.options.topics)
            except RocketMQError as exc:
                log.warning("group %s not announced to the brokers (%s); tried again at the next commit", group, exc)
        if group:
            failed: dict[str, str] = {}
            for mq, offset in offsets.items():
                if mq.broker_name in failed:  # one timeout per broker, not one per queue
                    continue
                try:
                    self.consumer.update_consumer_offset(group, mq, offset)
                except RocketMQError as exc:
                    failed[mq.broker_name] = f"{describe(mq)}: {exc}"
            for why in failed.values():  # the checkpoint stays the truth: the next commit writes them again
                log.warning("consumer offsets of group %s not written on a broker: %s", group, why)
        if self._metrics is None:
            self._metrics = source_metrics()
        record_source_batch(self._metrics, offsets, self._latest, self.options.topics)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
