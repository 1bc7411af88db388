"""The partition writer with a stand-in producer: requests, in-flight bound, resends, order per queue."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import pyarrow as pa
import pytest

from spark_rocketmq.client import Producer, ProducerStats, SendResult, SendStatus
from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.client.transaction import TransactionHandle
from spark_rocketmq.errors import (
    BrokerError,
    ClusterConfigDeliveryError,
    ClusterConfigError,
    DeliveryError,
    InvalidMessageError,
    RemotingTimeoutError,
    TopicNotFoundError,
    TopicNotWritableError,
)
from spark_rocketmq.protocol.message import Message, decode_batch_body
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.spark.contract import SinkProducer
from spark_rocketmq.spark.job import WriteJob
from spark_rocketmq.spark.message_ids import batch_context
from spark_rocketmq.spark.options import SinkOptions
from spark_rocketmq.spark.pool import ProducerPool
from spark_rocketmq.spark.report import DeliveryReport
from spark_rocketmq.spark.schema import MessageColumns
from spark_rocketmq.spark.writer import PartitionWriter, write_partition

QUEUES = [MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(2)]


class Sent:
    """One request as the stand-in saw it."""

    def __init__(self, n: int, topic: str, body: bytes, count: int, queue: MessageQueue | None) -> None:
        self.n, self.topic, self.body, self.count, self.queue = n, topic, body, count, queue
        self.ok = False

    @property
    def bodies(self) -> list[bytes]:
        return [r.body for r in decode_batch_body(self.body)]


class StandInProducer:
    """Honours SinkProducer; answers each request from a background thread.

    ``fail(sent) -> exception or None`` decides each request's fate.
    """

    def __init__(self, fail: Callable[[Sent], BaseException | None] = lambda s: None) -> None:
        self.fail = fail
        self.sent: list[Sent] = []
        self.singles: list[Message] = []
        self.in_flight = 0
        self.max_seen = 0
        #: Requests sent while an earlier request of the same queue was unanswered.
        self.overtaking: list[Sent] = []
        self._open_per_queue: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout_s: float | None = None) -> None:
        self._closed = True

    def stats(self) -> ProducerStats:
        return ProducerStats(requests=len(self.sent), messages=0, retries=0, failures=0, bytes_sent=0, in_flight=0)

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(topic, q.broker_name, q.queue_id) for q in QUEUES]

    def send_batch_body_async(
        self,
        topic: str,
        body: bytes,
        count: int,
        *,
        uniq_keys: Sequence[str] | None = None,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
    ) -> Future[SendResult]:
        fut: Future[SendResult] = Future()
        with self._lock:
            sent = Sent(len(self.sent), topic, bytes(body), count, queue)
            self.sent.append(sent)
            self.in_flight += 1
            self.max_seen = max(self.max_seen, self.in_flight)
            if queue is not None:
                if self._open_per_queue.get(queue):
                    self.overtaking.append(sent)
                self._open_per_queue[queue] = self._open_per_queue.get(queue, 0) + 1
        error = self.fail(sent)

        def answer() -> None:
            with self._lock:
                self.in_flight -= 1
                if queue is not None:
                    self._open_per_queue[queue] -= 1
                sent.ok = error is None
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(SendResult(SendStatus.SEND_OK, "", "", queue or QUEUES[0], 0, count))

        threading.Timer(0.001, answer).start()
        return fut

    def send_async(
        self, message: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None
    ) -> Future[SendResult]:
        self.singles.append(message)
        fut: Future[SendResult] = Future()
        fut.set_result(SendResult(SendStatus.SEND_OK, "", "", queue or QUEUES[0], 0))
        return fut

    def send_half_async(
        self, message: Message, *, queue: MessageQueue | None = None, check_immunity_s: int | None = None
    ) -> Future[TransactionHandle]:
        raise AssertionError("the writer sends no half message in at_least_once mode")

    def delivered(self) -> list[Sent]:
        return [s for s in self.sent if s.ok]


def busy() -> BrokerError:
    return BrokerError(14, "[REJECTREQUEST]system busy", "127.0.0.1:1", "SEND_BATCH_MESSAGE")


def make_job(*, sharded: bool = False, delay: bool = False, **options) -> WriteJob:
    config = ProducerConfig(namesrv_addr="127.0.0.1:1", group="writer-tests")
    cols = MessageColumns(
        body="body",
        sharding_key="sharding_key" if sharded else None,
        delay_level="delay_level" if delay else None,
    )
    return WriteJob(config, SinkOptions(topic="T", **options), cols, batch_context("q", 1))


def run(producer: StandInProducer, batches: list[pa.RecordBatch], job: WriteJob, partition: int = 0):
    pool = ProducerPool(lambda config: producer)
    summary = write_partition(batches, job, partition=partition, pool=pool)
    assert pool.uses() in ({}, {job.producer_config.fingerprint(): 0})  # the writer gave its producer back
    return summary


def _batches(n: int, per_batch: int, sharded: bool = False) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, n, per_batch):
        ids = range(start, min(n, start + per_batch))
        cols = {"body": pa.array([f"{i:06d}".encode() * 10 for i in ids])}
        if sharded:
            cols["sharding_key"] = pa.array([f"k{i % 3}" for i in ids])
        out.append(pa.RecordBatch.from_pydict(cols))
    return out


def _all_bodies(n: int) -> list[bytes]:
    return [f"{i:06d}".encode() * 10 for i in range(n)]


def test_stand_in_and_client_producer_honour_the_contract() -> None:
    assert isinstance(StandInProducer(), SinkProducer)
    for name in ("send_batch_body_async", "send_async", "send_half_async", "fetch_publish_queues", "stats", "close"):
        wanted = inspect.signature(getattr(SinkProducer, name)).parameters
        actual = inspect.signature(getattr(Producer, name)).parameters
        # Every parameter the writer may pass, in the same place; anything more has a default.
        assert [(p.name, p.kind) for p in actual.values()][: len(wanted)] == [
            (p.name, p.kind) for p in wanted.values()
        ] or all(n in actual and actual[n].kind == p.kind for n, p in wanted.items()), name
        assert all(p.default is not p.empty for n, p in actual.items() if n not in wanted), name
    assert isinstance(inspect.getattr_static(Producer, "closed"), property)


def test_every_row_sent_once_within_the_in_flight_bound() -> None:
    producer = StandInProducer()
    job = make_job(max_request_bytes=1000, max_in_flight_requests_per_task=3)
    summary = run(producer, _batches(1000, 300), job, partition=2)
    assert (summary.rows, summary.messages, summary.failed_rows, summary.resends) == (1000, 1000, 0, 0)
    assert summary.requests == len(producer.sent) > 50
    assert 1 <= producer.max_seen <= 3
    assert [b for s in producer.sent for b in s.bodies] == _all_bodies(1000)
    assert all(len(s.body) <= 1000 for s in producer.sent)
    assert summary.topics == {"T": 1000}
    assert summary.producers_created == 1
    assert summary.config_fingerprint == job.producer_config.fingerprint()


def test_old_option_name_max_in_flight_requests_still_works() -> None:
    from spark_rocketmq.spark.options import split_options

    options, producer_options = split_options({"maxInFlightRequests": "3", "topic": "T"})
    assert options.max_in_flight_requests_per_task == 3 and producer_options == {}


def test_default_request_size_is_one_mib_bounded_by_max_message_size() -> None:
    assert make_job().request_limit == 1024 * 1024
    assert make_job(max_request_bytes=8 * 1024 * 1024).request_limit == 4 * 1024 * 1024
    assert make_job(max_request_bytes=5000).request_limit == 5000


def test_rows_of_one_sharding_key_go_to_one_queue_in_order() -> None:
    producer = StandInProducer()
    summary = run(producer, _batches(600, 100, sharded=True), make_job(max_request_bytes=500, sharded=True))
    assert summary.messages == 600
    per_queue: dict[MessageQueue, list[bytes]] = {}
    for s in producer.sent:
        assert s.queue is not None
        per_queue.setdefault(s.queue, []).extend(s.bodies)
    for bodies in per_queue.values():
        assert bodies == sorted(bodies)
    assert sum(len(b) for b in per_queue.values()) == 600
    assert producer.overtaking == []


def test_a_request_that_fails_after_the_client_retries_is_resent_with_no_queue() -> None:
    producer = StandInProducer(fail=lambda s: busy() if s.n in (1, 4) else None)
    summary = run(producer, _batches(500, 100), make_job(max_request_bytes=1000))
    assert (summary.messages, summary.failed_rows, summary.resends) == (500, 0, 2)
    delivered = [b for s in producer.delivered() for b in s.bodies]
    assert sorted(delivered) == _all_bodies(500)  # every row stored exactly once
    assert all(s.queue is None for s in producer.sent)  # the client's fault strategy picks the broker
    assert summary.requests == len(producer.sent) - 2


@pytest.mark.parametrize(
    "error",
    [
        TopicNotWritableError("T", "its route has no writable queue"),  # read-only brokers: a rolling restart
        BrokerError(1, "store error", "b:1"),  # refused by one broker: another may take it
    ],
    ids=["read-only-route", "system-error"],
)
def test_what_may_pass_is_resent_until_the_deadline(error: Exception) -> None:
    producer = StandInProducer(fail=lambda s: error)
    summary = run(producer, _batches(300, 100), make_job(max_request_bytes=1000, delivery_timeout_ms=300))
    assert summary.resends > 0 and summary.failed_rows == 300


def test_rows_undelivered_at_the_deadline_fail_with_topic_and_count() -> None:
    producer = StandInProducer(fail=lambda s: RemotingTimeoutError("no answer in time", "127.0.0.1:1"))
    summary = run(producer, _batches(500, 100), make_job(max_request_bytes=1000, delivery_timeout_ms=300))
    assert (summary.rows, summary.messages, summary.failed_rows) == (500, 0, 500)
    assert summary.failed_topics == {"T": 500}
    assert summary.resends > 0
    assert "not delivered within delivery_timeout_ms=300" in summary.errors[0]
    report = DeliveryReport.from_summaries([summary], batch_id=7, seconds=1.0, on_invalid_row="fail")
    with pytest.raises(DeliveryError, match=r"batch 7: 500 of 500 rows were not delivered \(topic T: 500 rows\)"):
        report.raise_for_failures()


@pytest.mark.parametrize(
    "error",
    [
        InvalidMessageError("bad"),
        TopicNotFoundError("T"),
        BrokerError(13, "the message is illegal, maybe msg body or properties length not matched", "b:1"),
        BrokerError(1, "org.apache.rocketmq.acl.common.AclException: No acl config for user", "b:1"),
    ],
    ids=["invalid", "no-topic", "message-illegal", "acl"],
)
def test_what_no_resend_can_cure_is_not_resent(error: Exception) -> None:
    producer = StandInProducer(fail=lambda s: error)
    summary = run(producer, _batches(300, 100), make_job(max_request_bytes=1000))
    assert summary.resends == 0
    assert summary.failed_rows == 300
    assert "not resent" in summary.errors[0]


def test_keyed_rows_keep_their_order_when_a_request_fails_and_is_resent() -> None:
    # The very first request (of some queue) fails once, after the client's retries.
    producer = StandInProducer(fail=lambda s: busy() if s.n == 0 else None)
    summary = run(producer, _batches(900, 300, sharded=True), make_job(max_request_bytes=400, sharded=True))
    assert (summary.messages, summary.failed_rows, summary.resends) == (900, 0, 1)
    assert producer.overtaking == []  # never two requests of one queue at once
    first = producer.sent[0]
    assert not first.ok and first.queue is not None
    resent = [s for s in producer.sent if s.queue == first.queue and s.bodies == first.bodies]
    assert len(resent) == 2 and resent[1].ok  # resent on its own queue
    per_queue: dict[MessageQueue, list[bytes]] = {}
    for s in producer.delivered():
        assert s.queue is not None
        per_queue.setdefault(s.queue, []).extend(s.bodies)
    for bodies in per_queue.values():
        assert bodies == sorted(bodies)  # row order, the resent request first
    assert sorted(b for bodies in per_queue.values() for b in bodies) == _all_bodies(900)


def test_a_keyed_request_undelivered_at_the_deadline_holds_back_the_rest_of_its_queue() -> None:
    failing: list[MessageQueue] = []

    def fail(s: Sent) -> BaseException | None:
        if not failing:
            assert s.queue is not None
            failing.append(s.queue)
        return busy() if s.queue == failing[0] else None

    producer = StandInProducer(fail)
    job = make_job(max_request_bytes=400, sharded=True, delivery_timeout_ms=200)
    summary = run(producer, _batches(900, 300, sharded=True), job)
    to_queue = [s for s in producer.sent if s.queue == failing[0]]
    assert len(to_queue) > 1  # resent until the deadline ...
    assert all(s.bodies == to_queue[0].bodies for s in to_queue)  # ... and nothing later of that queue went out
    assert summary.failed_rows > 0 and summary.messages + summary.failed_rows == 900
    assert summary.failed_topics == {"T": summary.failed_rows}
    q = failing[0]
    assert any(f"not sent: an earlier request of queue {q.broker_name}/{q.queue_id}" in e for e in summary.errors)


def test_delayed_rows_are_sent_one_by_one_with_their_ids() -> None:
    producer = StandInProducer()
    rb = pa.RecordBatch.from_pydict({"body": [b"now", b"later", b"now2"], "delay_level": [0, 4, None]})
    summary = run(producer, [rb], make_job(delay=True))
    assert summary.messages == 3
    (single,) = producer.singles
    assert (single.body, single.delay_level, single.topic) == (b"later", 4, "T")
    assert single.uniq_key is not None and len(single.uniq_key) == 32
    assert [b for s in producer.sent for b in s.bodies] == [b"now", b"now2"]


def test_a_topic_without_route_fails_its_keyed_rows_without_crashing_the_task() -> None:
    class NoRoute(StandInProducer):
        def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
            raise RuntimeError(f"No route info of topic {topic!r}")

    summary = run(NoRoute(), _batches(30, 10, sharded=True), make_job(sharded=True))
    assert (summary.rows, summary.messages, summary.failed_rows) == (30, 0, 30)
    assert "No route info" in summary.errors[0]


def test_a_producer_that_cannot_be_created_fails_every_row() -> None:
    def refuse(config: ProducerConfig) -> StandInProducer:
        raise OSError("no route to host")

    summary = write_partition(_batches(30, 10), make_job(), partition=0, pool=ProducerPool(refuse))
    assert (summary.rows, summary.failed_rows, summary.failed_topics) == (30, 30, {"T": 30})
    assert "creating the producer failed: OSError: no route to host" in summary.errors[0]


def test_a_producer_closed_under_the_writer_is_replaced_for_the_resend() -> None:
    made: list[StandInProducer] = []

    def factory(config: ProducerConfig) -> StandInProducer:
        def fail(s: Sent) -> BaseException | None:
            if len(made) == 1:
                made[0].close()  # broken mid-task
                return busy()
            return None

        made.append(StandInProducer(fail))
        return made[-1]

    pool = ProducerPool(factory)
    summary = write_partition(_batches(100, 100), make_job(), partition=0, pool=pool)
    assert (summary.messages, summary.failed_rows, summary.resends) == (100, 0, 1)
    assert len(made) == 2 and summary.producers_created == 2
    assert pool.uses() == {make_job().producer_config.fingerprint(): 0}


def test_abort_stops_resending_and_gives_the_producer_back() -> None:
    producer = StandInProducer(fail=lambda s: busy())
    pool = ProducerPool(lambda config: producer)
    job = make_job(max_request_bytes=1000, max_in_flight_requests_per_task=100)  # write() never waits
    writer = PartitionWriter(job, partition=0, pool=pool)
    for rb in _batches(300, 100):
        writer.write(rb)
    summary = writer.abort()
    assert (summary.messages, summary.failed_rows, summary.failed_topics) == (0, 300, {"T": 300})
    assert "aborted" in summary.errors[0]
    assert pool.uses() == {job.producer_config.fingerprint(): 0}
    with pytest.raises(RuntimeError, match="after commit"):
        writer.write(_batches(1, 1)[0])


def test_a_cluster_configuration_error_fails_the_rest_of_the_partition_unsent() -> None:
    error = ClusterConfigError("no NameServer of namesrv_addr=127.0.0.1:1 has ever answered this producer")
    producer = StandInProducer(fail=lambda s: error)
    summary = run(producer, _batches(500, 100), make_job(max_request_bytes=1000, max_in_flight_requests_per_task=1))
    assert len(producer.sent) == 1  # the first request's error ends the sending; the rows after it are not sent
    assert (summary.rows, summary.messages, summary.failed_rows, summary.resends) == (500, 0, 500, 0)
    assert summary.config_errors == [str(error)]
    report = DeliveryReport.from_summaries([summary, summary], batch_id=2, seconds=1.0, on_invalid_row="fail")
    assert report.config_errors == [str(error)]  # one line however many partitions met it
    with pytest.raises(ClusterConfigDeliveryError, match=r"^batch 2: 1000 of 1000 rows were not delivered: no Name"):
        report.raise_for_failures()


def test_unsettled_requests_per_task_by_mode(tmp_path) -> None:
    """Batch bodies (up to max_request_bytes each) are bounded for memory; exactly_once rows go one a
    request, as many as the producer keeps in flight; an explicit option wins in both."""
    assert make_job().max_unsettled == 16
    once = {"delivery_guarantee": "exactly_once", "transaction_log_dir": str(tmp_path)}
    assert make_job(**once).max_unsettled == ProducerConfig().max_in_flight == 256
    assert make_job(**once, max_in_flight_requests_per_task=8).max_unsettled == 8
