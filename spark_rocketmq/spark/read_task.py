"""What one Spark task does with its share of a read: pull its queues' offset ranges and yield Arrow batches.

Pulls of one queue are pipelined: ``pulls_in_flight`` requests at consecutive offsets (a stride of the
messages the last answer held) are in flight at once, sent without waiting (PullConsumer.pull_async: the
answers are handed over by the connection's I/O thread, no thread per pull), and taken in offset order; an
answer that does not start where the previous one ended (a byte cap, a tag filter skipping ahead) drops
the speculative ones and pulls again from there. Bodies are gathered until ``max_batch_bytes`` and
decoded at once into a record batch (spark/decoder.py), so a task holds about one batch of messages.

A queue whose broker does not answer is pulled again, after the route is followed (a new master, or a
replica serving reads), until ``read_timeout_ms``; then the task fails naming the queue and Spark retries
it. Offsets the broker no longer has fail the task (``fail_on_data_loss``) or are skipped and
logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from queue import Empty, SimpleQueue
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from ..client.consumer_config import ConsumerConfig
from ..client.pull_consumer import PullConsumer, PullResult, PullStatus
from ..errors import RemotingError, RemotingTimeoutError, RocketMQError
from .consumers import consumer_pool
from .decoder import decode_pull_bodies
from .offsets import describe
from .read_options import ReadOptions
from .read_plan import QueueRange

log = logging.getLogger("spark_rocketmq.spark.reader")

#: The first wait before pulling a queue again after its broker failed to answer, and the longest one.
RETRY_FIRST_WAIT_S = 0.1
RETRY_MAX_WAIT_S = 2.0


class DataLossError(RocketMQError):
    """Offsets a read needs are no longer on the broker (retention, or a queue reset)."""


class RangeReader:
    """Reads QueueRanges with one PullConsumer; ``batches(range)`` yields Arrow record batches."""

    def __init__(self, consumer: PullConsumer, options: ReadOptions, namespace: str | None) -> None:
        self.consumer = consumer
        self.options = options
        self.namespace = namespace
        self.tags = options.tags
        #: Answers as the I/O thread hands them over: (generation, offset, result, error). Requests of an
        #: earlier generation were dropped (a range's end, an answer that did not end where they start).
        self._answers: SimpleQueue[tuple[int, int, PullResult | None, BaseException | None]] = SimpleQueue()
        self._generation = 0

    def close(self) -> None:
        self._generation += 1  # answers still on their way are dropped

    # -- pulls ---------------------------------------------------------------------------------------
    def _submit(self, r: QueueRange, offset: int, count: int) -> None:
        generation, put = self._generation, self._answers.put

        def done(result: PullResult | None, error: BaseException | None) -> None:
            put((generation, offset, result, error))

        self.consumer.pull_async(
            r.queue,
            offset,
            count,
            done,
            expression=self.options.sub_expression,
            expression_type=self.options.expression_type,
        )

    def _take(self, r: QueueRange, offset: int, count: int, deadline: float, arrived: dict[int, Any]) -> PullResult:
        """The answer of the pull in flight at ``offset``; after a failure, pulled again until the deadline."""
        # Every pull ends by its deadline (the remoting client's scanner fails it then): the wait's bound only
        # guards against a scanner that stopped.
        bound = self.consumer.config.pull_timeout_ms / 1000.0 + RETRY_MAX_WAIT_S
        while offset not in arrived:
            try:
                generation, at, result, error = self._answers.get(timeout=bound)
            except Empty:
                timeout = RemotingTimeoutError(f"no answer to the pull of {describe(r.queue)} at offset {offset}")
                return self._pull_again(r, offset, count, deadline, timeout)
            if generation == self._generation:
                arrived[at] = (result, error)
        result, error = arrived.pop(offset)
        if error is None:
            return cast(PullResult, result)
        if not isinstance(error, RemotingError):
            raise error
        return self._pull_again(r, offset, count, deadline, error)

    def _pull_again(
        self, r: QueueRange, offset: int, count: int, deadline: float, failure: RemotingError
    ) -> PullResult:
        wait = RETRY_FIRST_WAIT_S
        while True:
            if time.monotonic() + wait >= deadline:
                raise RemotingError(
                    f"could not pull {describe(r.queue)} at offset {offset} for "
                    f"{self.options.read_timeout_ms} ms (readTimeoutMs): {failure}"
                ) from failure
            log.info("pulling %s at %d failed (%s); again in %.1f s", describe(r.queue), offset, failure, wait)
            time.sleep(wait)  # a backoff between attempts, not a synchronisation
            wait = min(RETRY_MAX_WAIT_S, wait * 2)
            try:
                return self.consumer.pull(
                    r.queue,
                    offset,
                    count,
                    expression=self.options.sub_expression,
                    expression_type=self.options.expression_type,
                )
            except RemotingError as exc:
                failure = exc

    # -- one range ---------------------------------------------------------------------------------------
    def batches(self, r: QueueRange) -> Iterator[pa.RecordBatch]:
        deadline = time.monotonic() + self.options.read_timeout_ms / 1000.0
        batch_size = self.options.pull_batch_size
        window = self.options.pulls_in_flight
        stride = batch_size
        cursor = r.start
        issued = r.start
        in_flight: dict[int, int] = {}  # offset -> messages asked for
        arrived: dict[int, tuple[PullResult | None, BaseException | None]] = {}
        bodies: list[bytes] = []
        held = 0
        trim = False
        self._generation += 1
        while cursor < r.end:
            while len(in_flight) < window and issued < r.end:
                in_flight[issued] = count = min(batch_size, r.end - issued)
                self._submit(r, issued, count)
                issued += stride
            count = in_flight.pop(cursor, 0)
            if not count:  # the last answer ended where no request starts: pull again from there
                in_flight.clear()
                arrived.clear()
                self._generation += 1
                issued = cursor
                continue
            result = self._take(r, cursor, count, deadline, arrived)
            status = result.status
            if result.next_begin_offset > cursor and status is not PullStatus.NO_NEW_MSG:
                # readTimeoutMs bounds a stall, not the whole range: progress moves the deadline on
                deadline = time.monotonic() + self.options.read_timeout_ms / 1000.0
            if status is PullStatus.FOUND and result.next_begin_offset > cursor:
                bodies.append(result.body)
                held += len(result.body)
                trim = trim or result.next_begin_offset > r.end
                found = result.next_begin_offset - cursor
                if found > 0:
                    stride = max(1, min(batch_size, found))
                cursor = result.next_begin_offset
                if held >= self.options.max_batch_bytes:
                    yield self._decode(r, bodies, trim)
                    bodies, held, trim = [], 0, False
            elif status is PullStatus.NO_MATCHED_MSG and result.next_begin_offset > cursor:
                cursor = result.next_begin_offset
            elif status is PullStatus.OFFSET_ILLEGAL and result.next_begin_offset > cursor:
                cursor = self._lost(r, cursor, result)
            else:  # NO_NEW_MSG, or an offset past the broker's max: a replica behind, a restarted broker
                if time.monotonic() >= deadline:
                    raise DataLossError(
                        f"{describe(r.queue)}: offset {cursor} is beyond what {result.broker_addr} has (max offset "
                        f"{result.max_offset}) after {self.options.read_timeout_ms} ms; the range planned was "
                        f"[{r.start}, {r.end})"
                    )
                time.sleep(RETRY_FIRST_WAIT_S)  # a backoff while the broker catches up
            if cursor not in in_flight:
                in_flight.clear()
                arrived.clear()
                self._generation += 1
                issued = cursor
        if bodies:
            yield self._decode(r, bodies, trim)

    def _lost(self, r: QueueRange, cursor: int, result: PullResult) -> int:
        lost = min(result.next_begin_offset, r.end) - cursor
        text = (
            f"{describe(r.queue)}: offsets {cursor} to {cursor + lost - 1} are no longer on the broker "
            f"(its min offset is {result.min_offset}, the read needed offset {cursor})"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{text}; set failOnDataLoss=false to skip them (each skipped range is logged), or start later"
            )
        log.warning("%s: skipped (failOnDataLoss=false)", text)
        return min(result.next_begin_offset, r.end)

    def _decode(self, r: QueueRange, bodies: list[bytes], trim: bool) -> pa.RecordBatch:
        batch = decode_pull_bodies(
            bodies, broker_name=r.broker_name, topic=r.topic, tags=self.tags, namespace=self.namespace
        )
        offsets = batch.column(batch.schema.get_field_index("queue_offset"))
        if batch.num_rows and pc.min(offsets).as_py() < r.start:
            # a 5.x inner batch pulled from its middle comes whole: its messages before the range are not read
            trim = True
        if trim:
            wanted = pc.and_(
                pc.greater_equal(offsets, pa.scalar(r.start, pa.int64())),
                pc.less(offsets, pa.scalar(r.end, pa.int64())),
            )
            batch = batch.filter(wanted)
        return batch


def read_ranges(ranges: list[QueueRange], options: ReadOptions, config: ConsumerConfig) -> Iterator[pa.RecordBatch]:
    """A task's read: every range in order, with this process's consumer for ``config``."""
    pool = consumer_pool()
    lease = pool.acquire(config)
    reader = RangeReader(lease.client, options, config.namespace)
    try:
        for r in ranges:
            yield from reader.batches(r)
    finally:
        reader.close()
        pool.release(lease)
