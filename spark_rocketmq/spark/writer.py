"""Executor side: one partition's Arrow record batches -> pipelined batch requests -> a PartitionSummary.

One Producer per Python worker process per configuration (keyed by ProducerConfig.fingerprint()):
created on first use, reused by every task and micro-batch that process runs (Spark reuses its
Python workers), closed at interpreter exit where Python gets to run exit handlers. Spark ends
forked Python workers with os._exit, so nothing is left for exit: every task waits for all its
requests before it returns.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .encoder import TopicChecker, encode_rows, invalid_rows
from .ids import BatchContext
from .options import SinkOptions
from .report import PartitionSummary
from .schema import MessageColumns

log = logging.getLogger("spark_rocketmq.spark")

#: Upper bound of body bytes encoded at once (keeps a worker's memory flat whatever the input size).
MAX_CHUNK_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_IN_FLIGHT = 16

_lock = threading.Lock()
_producers: dict[str, Any] = {}
_created: dict[str, int] = {}


def producer_for(config: Any) -> tuple[Any, str, int]:
    """(producer, fingerprint, producers this process created for it) - one per process per configuration."""
    key = config.fingerprint()
    with _lock:
        producer = _producers.get(key)
        if producer is None:
            from ..client.producer import Producer

            producer = Producer(config)
            start = getattr(producer, "start", None)
            if callable(start):
                start()
            _producers[key] = producer
            _created[key] = _created.get(key, 0) + 1
            if len(_producers) == 1:
                atexit.register(close_producers)
        return producer, key, _created.get(key, 0)


def producers_created() -> dict[str, int]:
    """Producers this process has created, per configuration fingerprint."""
    with _lock:
        return dict(_created)


def close_producers() -> None:
    with _lock:
        producers = list(_producers.values())
        _producers.clear()
    for producer in producers:
        try:
            producer.close()
        except Exception:  # exit path: nothing sensible to do
            log.debug("closing a producer failed", exc_info=True)


@dataclass(frozen=True)
class WriteJob:
    """Everything a task needs, built and checked on the driver (picklable)."""

    producer_config: Any
    options: SinkOptions
    columns: MessageColumns
    ctx: BatchContext

    @property
    def max_message_size(self) -> int:
        return int(getattr(self.producer_config, "max_message_size", 4 * 1024 * 1024))

    @property
    def request_limit(self) -> int:
        return min(self.options.max_request_bytes or self.max_message_size, self.max_message_size)

    @property
    def max_in_flight(self) -> int:
        if self.options.max_in_flight_requests:
            return self.options.max_in_flight_requests
        # Bounded memory: at most this many request bodies (<= max_message_size each) are held at once.
        return min(
            int(getattr(self.producer_config, "max_in_flight", 0) or DEFAULT_MAX_IN_FLIGHT), DEFAULT_MAX_IN_FLIGHT
        )


def _retries(producer: Any) -> int:
    stats = getattr(producer, "stats", None)
    if stats is None:
        return 0
    if callable(stats):
        stats = stats()
    if isinstance(stats, dict):
        return int(stats.get("retries", 0))
    return int(getattr(stats, "retries", 0))


def _chunks(batches: Iterable[pa.RecordBatch], body_column: str) -> Iterator[pa.RecordBatch]:
    """Slice record batches so that no slice holds more than MAX_CHUNK_BYTES of bodies."""
    for rb in batches:
        size = rb.column(body_column).nbytes
        if size <= MAX_CHUNK_BYTES or rb.num_rows <= 1:
            yield rb
            continue
        step = max(1, int(rb.num_rows * MAX_CHUNK_BYTES / size))
        for start in range(0, rb.num_rows, step):
            yield rb.slice(start, step)


class _Pending:
    __slots__ = ("count", "future", "queue", "size", "topic")

    def __init__(self, future: Future, topic: str, count: int, size: int, queue: Any) -> None:
        self.future, self.topic, self.count, self.size, self.queue = future, topic, count, size, queue


def write_partition(
    batches: Iterable[pa.RecordBatch], job: WriteJob, *, partition: int, attempt: int = 0
) -> PartitionSummary:
    """Publish one partition's rows; never raises for a failed send (the summary carries it)."""
    started = time.monotonic()
    opts = job.options
    summary = PartitionSummary(partition=partition, attempt=attempt, pid=os.getpid())
    try:
        producer, key, created = producer_for(job.producer_config)
    except Exception as exc:  # e.g. no NameServer reachable: every row of the partition is undelivered
        for rb in batches:
            summary.rows += rb.num_rows
        summary.failed_rows = summary.rows
        summary.errors.append(f"creating the producer failed: {type(exc).__name__}: {exc}")
        summary.seconds = time.monotonic() - started
        return summary
    summary.producer = key
    summary.producers_created = created
    retries_before = _retries(producer)
    topics = TopicChecker()
    queues: dict[str, list[Any]] = {}

    def queue_list(topic: str) -> list[Any]:
        """The topic's publish queues ([] when there is no route: those sends fail with the cause)."""
        if topic not in queues:
            try:
                queues[topic] = list(producer.fetch_publish_queues(topic))
            except Exception as exc:
                queues[topic] = []
                queue_errors[topic] = exc
        return queues[topic]

    queue_errors: dict[str, Exception] = {}

    pending: deque[_Pending] = deque()
    last_for_queue: dict[Any, _Pending] = {}
    failed = False
    topic_counts: dict[str, int] = {}

    def settle(p: _Pending) -> None:
        nonlocal failed
        try:
            p.future.result()
        except Exception as exc:
            failed = True
            summary.failed_rows += p.count
            if len(summary.errors) < opts.max_invalid_samples:
                summary.errors.append(f"topic {p.topic}: {type(exc).__name__}: {exc}")
            return
        summary.messages += p.count
        summary.bytes += p.size
        summary.requests += 1
        topic_counts[p.topic] = topic_counts.get(p.topic, 0) + p.count

    row_start = 0
    next_progress = opts.progress_every_rows or 0
    stop = False
    try:
        for rb in _chunks(batches, job.columns.body):
            n = rb.num_rows
            if stop or failed:
                summary.rows += n
                if failed:
                    summary.failed_rows += n  # not attempted after a failure: the batch replays
                row_start += n
                continue
            encoded = encode_rows(
                rb,
                job.columns,
                topic_option=opts.topic,
                ctx=job.ctx,
                partition=partition,
                row_start=row_start,
                max_message_size=job.max_message_size,
                queue_count=lambda t: len(queue_list(t)),
                topics=topics,
            )
            summary.rows += n
            if encoded.invalid_count:
                summary.invalid_rows += encoded.invalid_count
                room = opts.max_invalid_samples - len(summary.invalid_samples)
                if room > 0:
                    samples = invalid_rows(
                        encoded, rb, job.columns, partition=partition, row_start=row_start, limit=room, topics=topics
                    )
                    summary.invalid_samples.extend(s.describe() for s in samples)
                if opts.on_invalid_row == "fail":
                    stop = True
                    summary.stopped_on_invalid = True
                    row_start += n
                    continue
            for group, a, b in encoded.request_slices(job.request_limit):
                queue = None
                if group.queue_slot is not None:
                    listed = queue_list(group.topic)
                    queue = listed[group.queue_slot] if group.queue_slot < len(listed) else None
                if queue is not None and queue in last_for_queue:
                    # Rows of one sharding key keep their order: one request per queue at a time.
                    before = last_for_queue.pop(queue)
                    while pending and before in pending:
                        settle(pending.popleft())
                try:
                    if group.queue_slot is not None and queue is None:
                        raise queue_errors.get(group.topic) or RuntimeError(
                            f"topic {group.topic}: the queue list changed under a sharded send; the batch replays"
                        )
                    if group.single:
                        msg = encoded.message(a, group.topic)
                        future = producer.send_async(msg, queue=queue)
                        size = len(msg.body)
                    else:
                        body = encoded.body(a, b)
                        future = producer.send_batch_body_async(group.topic, body, b - a, queue=queue)
                        size = len(body)
                except Exception as exc:  # refused before the wire (no route, closed producer, ...)
                    future, size = Future(), 0
                    future.set_exception(exc)
                p = _Pending(future, group.topic, b - a, size, queue)
                pending.append(p)
                if queue is not None:
                    last_for_queue[queue] = p
                while len(pending) >= job.max_in_flight:
                    settle(pending.popleft())
            row_start += n
            if next_progress and summary.rows >= next_progress:
                log.warning(
                    "RocketMQ sink: batch %s partition %d: %d rows read, %d messages acknowledged so far",
                    job.ctx.batch_id, partition, summary.rows, summary.messages,
                )  # fmt: skip
                next_progress += opts.progress_every_rows
    finally:
        while pending:
            settle(pending.popleft())
    summary.retries = max(0, _retries(producer) - retries_before)
    summary.topics = topic_counts
    summary.seconds = time.monotonic() - started
    return summary
