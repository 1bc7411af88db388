"""Executor side: one partition's Arrow record batches -> pipelined requests -> a PartitionSummary.

``PartitionWriter`` is the one writer both sink paths use (foreachBatch through ``sink.py``,
``format("rocketmq")`` through ``datasource.py``), with Spark's DataWriter shape:

- ``write(batch)`` encodes the rows into MessageBatch request bodies (at most ``max_request_bytes``
  each) and sends them, keeping at most ``max_in_flight_requests_per_task`` requests unsettled;
- ``commit()`` waits until every request is stored or has failed for good, and returns the summary;
- ``abort()`` stops resending and returns what is known.

Delivery deadline: a request that still fails after the client's own retries is sent again, after
a short growing wait (client/policy.py), until ``delivery_timeout_ms`` after the writer took its rows
(pending.py keeps the requests waiting for a resend, and the order per queue). Rows
without a sharding key are resent with no queue, so the client's fault strategy picks a healthy
broker; a keyed request is resent on its own queue, and no later request of that queue is sent
while an earlier one is unsettled or has failed (rows of one key keep their order). What no resend
can cure is never resent (client.send_failures.is_final): bad input, a topic no broker has, a broker answer
sendDefaultImpl does not retry (MESSAGE_ILLEGAL, ...), an ACL refusal. After a ClusterConfigError (a
cluster the producer never reached, or a refusal naming a configuration fix) the partition's later
rows are failed unsent: the driver raises that error within seconds, not at the deadline.

Rows undelivered at the deadline do not fail the task: they are counted in the summary, the driver
gathers every partition's summary into one DeliveryReport and fails the batch with DeliveryError.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from queue import Empty, SimpleQueue
from typing import cast

import pyarrow as pa

from ..client import SendResult, SendStatus
from ..client.collector import fewer_collections
from ..client.send_failures import is_final
from ..errors import ClusterConfigError, NotReplicatedError
from .dead_letters import DeadLetterWriter, batch_folder
from .encoder import EncodedRows, Group, TopicChecker, encode_rows
from .invalid import invalid_rows
from .job import WriteJob
from .pending import KeyOrder, PendingRequest, Resends, queue_name
from .pool import ProducerPool, default_pool, producers_created
from .report import PartitionSummary
from .request_outcomes import count_delivered, count_undelivered
from .task_producer import TaskProducer
from .transaction_ids import PROPERTY_SPARK_TXN, transaction_id

log = logging.getLogger("spark_rocketmq.spark")

#: Upper bound of body bytes encoded at once (keeps a worker's memory flat whatever the input size).
MAX_CHUNK_BYTES = 32 * 1024 * 1024
#: A writer at max_unsettled waits until this fraction of them settled (at least one) before it sends more.
REFILL_FRACTION = 8

__all__ = ["PartitionWriter", "producers_created", "write_partition"]


def _chunks(batch: pa.RecordBatch, body_column: str) -> Iterator[pa.RecordBatch]:
    """Slices of a record batch that hold no more than MAX_CHUNK_BYTES of bodies each."""
    size = batch.column(body_column).nbytes
    if size <= MAX_CHUNK_BYTES or batch.num_rows <= 1:
        yield batch
        return
    step = max(1, int(batch.num_rows * MAX_CHUNK_BYTES / size))
    for start in range(0, batch.num_rows, step):
        yield batch.slice(start, step)


class PartitionWriter:
    """Publishes one partition's rows: ``write(batch)`` as often as needed, then ``commit()`` or ``abort()``.

    Never raises for a failed send: the summary carries it. ``pool`` defaults to the process's
    producer pool; ``clock`` (monotonic seconds) and ``sleep`` are injectable.
    """

    def __init__(
        self,
        job: WriteJob,
        *,
        partition: int,
        attempt: int = 0,
        pool: ProducerPool | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.job = job
        self.partition = partition
        self._opts = job.options
        self._clock = clock
        self._sleep = sleep
        self._started = clock()
        self.summary = PartitionSummary(partition=partition, attempt=attempt, pid=os.getpid())
        ctx = job.ctx
        self._txn = (
            transaction_id(job.txn_namespace or ctx.id_namespace, ctx.batch_id, job.txn_run, partition, attempt)
            if job.transactional
            else None
        )
        self._producer = TaskProducer(pool if pool is not None else default_pool(), job, self.summary)
        self._no_producer = False
        try:
            self._producer.acquire()
        except Exception as exc:  # e.g. a configuration the client refuses: every row is undelivered
            self._no_producer = True
            self.summary.errors.append(f"creating the producer failed: {type(exc).__name__}: {exc}")
        self._topics = TopicChecker()
        self._row_start = 0
        self._next_progress = self._opts.progress_every_rows or 0
        self._stopped_on_invalid = False
        self._finished = False
        self._aborted = False
        self._unsettled = 0
        #: Requests sent and not settled (by id), and those whose future completed, in the order they did:
        #: a future's callback queues its request, so settling one costs the same however many are in flight.
        self._in_flight: dict[int, PendingRequest] = {}
        self._completed: SimpleQueue[PendingRequest] = SimpleQueue()
        self._resends = Resends(job.delivery_timeout_s)
        self._key_order = KeyOrder()
        self._warned_resend = False
        #: exactly_once: a broker checks a half back no sooner than the commit window (CHECK_IMMUNITY_TIME_IN_SECONDS):
        #: until the window is over the log answers UNKNOWN, so a check-back then costs a request to a producer
        #: and its answer for nothing (at each check round, every 60 s by default, a 4.9.8 broker checks back
        #: every half older than its transactionTimeOut, 6 s, with no commit yet; an immune one it copies only).
        self._check_immunity_s = -(-self._opts.transaction_commit_window_ms // 1000)
        #: exactly_once: the SPARK_TXN property of each send number (1 for a row's first send), made once.
        self._txn_properties: dict[int, dict[str, str]] = {}
        #: Set by the first send that failed for the cluster's configuration: later rows are not sent.
        self._cluster_error: ClusterConfigError | None = None
        #: on_invalid_row="dead_letter": the partition's refused rows.
        self._letters: DeadLetterWriter | None = None
        if self._opts.on_invalid_row == "dead_letter" and self._opts.dead_letter_path:
            folder = batch_folder(ctx.id_namespace, ctx.batch_id, job.dead_letter_run)
            self._letters = DeadLetterWriter(
                self._opts.dead_letter_path, folder, batch_id=ctx.batch_id, partition=partition
            )
            self.summary.dead_letter_folder = folder

    # -- the DataWriter shape ----------------------------------------------------------------------
    def write(self, batch: pa.RecordBatch) -> None:
        """Encode and send one record batch's rows (blocks while max_in_flight_requests_per_task are unsettled)."""
        if self._finished:
            raise RuntimeError("write() after commit() or abort()")
        for chunk in _chunks(batch, self.job.columns.body):
            self._write_chunk(chunk)

    def commit(self) -> PartitionSummary:
        """Wait until every request is stored or failed for good (delivery_timeout_ms); the summary."""
        if not self._finished:
            while self._unsettled:
                self._pump(block=True)
            self._finish(keep_letters=True)
        return self.summary

    def abort(self) -> PartitionSummary:
        """Stop: nothing more is sent or resent; rows not yet stored count as undelivered."""
        if not self._finished:
            self._aborted = True
            self._pump(block=False)
            for req in [*self._in_flight.values(), *self._resends.drain()]:
                self._fail(req, None, "the task was aborted")
            self._in_flight.clear()
            self._finish(keep_letters=False)
        return self.summary

    # -- rows -> requests --------------------------------------------------------------------------
    def _write_chunk(self, rb: pa.RecordBatch) -> None:
        n, s, opts = rb.num_rows, self.summary, self._opts
        row_start = self._row_start
        self._row_start += n
        s.rows += n
        if self._no_producer:
            s.failed_rows += n
            if opts.topic is not None:
                s.failed_topics[opts.topic] = s.failed_topics.get(opts.topic, 0) + n
            return
        if self._stopped_on_invalid:
            return  # the batch fails for its invalid rows; the rest is not sent
        encoded = encode_rows(
            rb,
            self.job.columns,
            topic_option=opts.topic,
            ctx=self.job.ctx,
            partition=self.partition,
            row_start=row_start,
            max_message_size=self.job.max_message_size,
            queue_count=lambda t: len(self._producer.queue_list(t)),
            topics=self._topics,
            transactional=self.job.transactional,
        )
        if encoded.reserved_left_out_rows:
            s.add_reserved_left_out(encoded.reserved_left_out_rows, encoded.reserved_left_out)
        if encoded.invalid_count:
            s.invalid_rows += encoded.invalid_count
            room = max(0, opts.max_invalid_samples - len(s.invalid_samples))
            wanted = encoded.invalid_count if self._letters is not None else room
            if wanted > 0:
                refused = invalid_rows(
                    encoded,
                    rb,
                    self.job.columns,
                    partition=self.partition,
                    row_start=row_start,
                    limit=wanted,
                    topics=self._topics,
                )
                s.invalid_samples.extend(x.describe() for x in refused[:room])
                if self._letters is not None:
                    self._letters.add(rb, refused, row_start)
            if opts.on_invalid_row == "fail":
                self._stopped_on_invalid = s.stopped_on_invalid = True
                return
        max_unsettled = self.job.max_unsettled
        # Once max_unsettled are unsettled, an eighth of them settle before more are sent: the requests then go
        # out in runs, many frames per write of the I/O thread, instead of one each time an answer comes back.
        refill_at = max_unsettled - max(1, max_unsettled // REFILL_FRACTION)
        for group, a, b in encoded.request_slices(self.job.request_limit):
            self._add(self._request(encoded, group, a, b, row_start))
            if self._unsettled >= max_unsettled:
                while self._unsettled > refill_at:
                    self._pump(block=True)
        if self._next_progress and s.rows >= self._next_progress:
            log.warning(
                "RocketMQ sink: batch %s partition %d: %d rows read, %d messages acknowledged so far",
                self.job.ctx.batch_id, self.partition, s.rows, s.messages,
            )  # fmt: skip
            self._next_progress += opts.progress_every_rows

    def _request(self, encoded: EncodedRows, group: Group, a: int, b: int, row_start: int) -> PendingRequest:
        queue = None
        if group.queue_slot is not None:
            listed = self._producer.queue_list(group.topic)
            queue = listed[group.queue_slot] if group.queue_slot < len(listed) else None
        taken = self._clock()
        if group.single:
            row = int(encoded.record_rows[a])  # its row in the record batch
            req = PendingRequest(group.topic, 1, queue, taken, message=encoded.row_fields.message(row, group.topic))
            req.row = row_start + row
        else:
            req = PendingRequest(group.topic, b - a, queue, taken, body=encoded.view(a, b))
        req.queue_unknown = group.queue_slot is not None and queue is None
        return req

    # -- requests ----------------------------------------------------------------------------------
    def _add(self, req: PendingRequest) -> None:
        self._unsettled += 1
        if self._cluster_error is not None:
            self._fail(req, None, "not sent: the cluster is misconfigured (see the first error)")
        elif req.queue_unknown:
            cause = self._producer.queue_error(req.topic)
            self._fail(req, cause, None if cause else "the topic's queue list changed under a keyed send")
        elif req.queue is None:
            self._send(req)
        elif self._key_order.blocked(req.queue):
            self._fail(req, None, f"not sent: an earlier request of {queue_name(req.queue)} was not delivered")
        elif self._key_order.admit(req):
            self._send(req)

    def _send(self, req: PendingRequest) -> None:
        req.sends += 1
        if req.sends > 1:
            self.summary.resends += 1
            self.summary.topic_resends[req.topic] = self.summary.topic_resends.get(req.topic, 0) + 1
        future: Future[SendResult]
        try:
            producer = self._producer.get()
            if self._txn is not None:
                assert req.message is not None  # every row goes alone in this mode
                txn = self._txn_properties.get(req.sends)
                if txn is None:  # the first row of this send number: its SPARK_TXN, for every row sent so
                    txn = self._txn_properties[req.sends] = {PROPERTY_SPARK_TXN: f"{self._txn}/{req.sends}"}
                req.txn = txn[PROPERTY_SPARK_TXN]
                future = cast(
                    "Future[SendResult]",
                    producer.send_half_async(
                        req.message, queue=req.queue, check_immunity_s=self._check_immunity_s, extra_properties=txn
                    ),
                )
            elif req.message is not None:
                future = producer.send_async(req.message, queue=req.queue)
            else:
                assert req.body is not None
                future = producer.send_batch_body_async(req.topic, req.body, req.count, queue=req.queue)
        except Exception as exc:  # refused before the wire (closed producer, no route, ...)
            future = Future()
            future.set_exception(exc)
        req.future = future
        self._in_flight[id(req)] = req
        completed = self._completed
        future.add_done_callback(lambda _: completed.put(req))  # on the I/O thread: never blocks

    def _pump(self, *, block: bool) -> None:
        """Settle finished requests and resend those due; with ``block``, wait until one of that happens."""
        while True:
            settled = False
            while True:
                try:
                    req = self._completed.get_nowait()
                except Empty:
                    break
                settled = self._take_completed(req) or settled
            due = self._resends.due(self._clock()) if self._resends and not self._aborted else []
            for req in due:
                self._send(req)
            if settled or due or not block:
                return
            next_resend = self._resends.next_at()
            timeout = None if next_resend is None else max(0.0, next_resend - self._clock())
            if self._in_flight:
                try:  # the engine settles every send by its deadline: this wait ends
                    req = self._completed.get(timeout=timeout)
                except Empty:
                    continue  # a resend came due
                if self._take_completed(req):
                    return
            elif timeout is not None:
                self._sleep(timeout)  # only resends are pending: their backoff
            else:
                raise RuntimeError(f"{self._unsettled} requests unsettled with none in flight or due")

    def _take_completed(self, req: PendingRequest) -> bool:
        """Settle a request whose future completed; False for one abort() already failed."""
        if self._in_flight.pop(id(req), None) is None:
            return False
        self._settle(req)
        return True

    def _settle(self, req: PendingRequest) -> None:
        future = req.future
        assert future is not None
        exc = future.exception()
        if exc is None and req.txn is None:
            status = future.result().status
            if not self._replicated(req, status):
                exc = NotReplicatedError(
                    f"stored on the master of topic {req.topic} but answered {status.value}, and "
                    "retry_another_broker_when_not_store_ok asks for SEND_OK"
                )
        if exc is None:
            count_delivered(self.summary, req, future)
            req.future = None
            self._settled(req, delivered=True)
            return
        req.future = None
        if self._aborted:
            self._fail(req, exc, "the task was aborted")
            return
        if is_final(exc) or not self._resends.schedule(req, self._clock()):
            self._fail(req, exc, None)
            return
        if not self._warned_resend:
            self._warned_resend = True
            log.warning(
                "RocketMQ sink: batch %s partition %d: a request of %d rows to topic %s failed (%s: %s); "
                "resending until delivery_timeout_ms",
                self.job.ctx.batch_id, self.partition, req.count, req.topic, type(exc).__name__, exc,
            )  # fmt: skip

    def _replicated(self, req: PendingRequest, status: SendStatus) -> bool:
        """Count a stored request its broker answered FLUSH_* / SLAVE_NOT_AVAILABLE; False when the producer's
        retry_another_broker_when_not_store_ok asks for it to be sent again (retryAnotherBrokerWhenNotStoreOK)."""
        if status is SendStatus.SEND_OK:
            return True
        counts = self.summary.not_replicated
        counts[status.value] = counts.get(status.value, 0) + req.count
        return not self.job.producer_config.retry_another_broker_when_not_store_ok

    def _fail(self, req: PendingRequest, exc: BaseException | None, reason: str | None) -> None:
        if isinstance(exc, ClusterConfigError):
            self._cluster_error = exc
        count_undelivered(self.summary, req, exc, reason, job=self.job, partition=self.partition)
        self._settled(req, delivered=False)

    def _settled(self, req: PendingRequest, *, delivered: bool) -> None:
        self._unsettled -= 1
        if req.queue is None:
            return  # rows of no key: no order to keep
        following, unsent = self._key_order.settled(req, delivered=delivered)
        # Later rows of an undelivered request's queue must not land before its rows: they are not sent.
        for later in unsent:
            assert req.queue is not None
            self._fail(later, None, f"not sent: an earlier request of {queue_name(req.queue)} was not delivered")
        if following is not None:
            self._send(following)

    def _finish(self, *, keep_letters: bool) -> None:
        self._finished = True
        if self._letters is not None:
            self._letters.finish(self.summary, keep=keep_letters)
        self._producer.release()
        self.summary.seconds = self._clock() - self._started


def write_partition(
    batches: Iterable[pa.RecordBatch],
    job: WriteJob,
    *,
    partition: int,
    attempt: int = 0,
    pool: ProducerPool | None = None,
) -> PartitionSummary:
    """One task: every record batch through a PartitionWriter, then commit (abort if the input fails); the
    cyclic collector runs less often meanwhile (client/collector.py: a half message costs about a fifth
    less CPU)."""
    with fewer_collections():
        writer = PartitionWriter(job, partition=partition, attempt=attempt, pool=pool)
        try:
            for batch in batches:
                writer.write(batch)
        except BaseException:
            writer.abort()
            raise
        return writer.commit()
