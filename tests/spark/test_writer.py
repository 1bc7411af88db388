"""The partition writer with a stand-in producer: requests, in-flight bound, sharded order, failures."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pyarrow as pa
import pytest

from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.errors import BrokerError
from spark_rocketmq.protocol.message import decode_batch_body
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.spark import writer as writer_module
from spark_rocketmq.spark.ids import batch_context
from spark_rocketmq.spark.options import SinkOptions
from spark_rocketmq.spark.schema import MessageColumns
from spark_rocketmq.spark.writer import WriteJob, write_partition


class StandInProducer:
    """Answers each request from a background thread; can fail chosen requests."""

    def __init__(self, fail_requests: set[int] = frozenset()) -> None:
        self.sent: list[tuple[str, bytes, int, MessageQueue | None]] = []
        self.fail_requests = set(fail_requests)
        self.in_flight = 0
        self.max_seen = 0
        self._lock = threading.Lock()
        self.singles: list = []

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(topic, b, q) for b in ("broker-a", "broker-b") for q in range(2)]

    def send_batch_body_async(self, topic, body, count, *, uniq_keys=None, queue=None) -> Future:
        fut: Future = Future()
        with self._lock:
            n = len(self.sent)
            self.sent.append((topic, bytes(body), count, queue))
            self.in_flight += 1
            self.max_seen = max(self.max_seen, self.in_flight)

        def answer() -> None:
            with self._lock:
                self.in_flight -= 1
            if n in self.fail_requests:
                fut.set_exception(BrokerError(14, "[REJECTREQUEST]system busy", "127.0.0.1:1", "SEND_BATCH_MESSAGE"))
            else:
                fut.set_result(object())

        threading.Timer(0.001, answer).start()
        return fut

    def send_async(self, message, *, sharding_key=None, queue=None) -> Future:
        self.singles.append(message)
        fut: Future = Future()
        fut.set_result(object())
        return fut

    def close(self) -> None:
        pass


@pytest.fixture
def job_for(monkeypatch):
    def make(producer: StandInProducer, **options) -> WriteJob:
        config = ProducerConfig(namesrv_addr="127.0.0.1:1", group=f"writer-{id(producer)}")
        monkeypatch.setitem(writer_module._producers, config.fingerprint(), producer)
        cols = MessageColumns(body="body", sharding_key="sharding_key" if options.pop("sharded", False) else None)
        return WriteJob(config, SinkOptions(topic="T", **options), cols, batch_context("q", 1))

    return make


def _batches(n: int, per_batch: int, sharded: bool = False) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, n, per_batch):
        ids = range(start, min(n, start + per_batch))
        cols = {"body": pa.array([f"{i:06d}".encode() * 10 for i in ids])}
        if sharded:
            cols["sharding_key"] = pa.array([f"k{i % 3}" for i in ids])
        out.append(pa.RecordBatch.from_pydict(cols))
    return out


def test_every_row_sent_once_within_the_in_flight_bound(job_for) -> None:
    producer = StandInProducer()
    job = job_for(producer, max_request_bytes=1000, max_in_flight_requests=3)
    summary = write_partition(_batches(1000, 300), job, partition=2)
    assert (summary.rows, summary.messages, summary.failed_rows) == (1000, 1000, 0)
    assert summary.requests == len(producer.sent) > 50
    assert 1 <= producer.max_seen <= 3
    bodies = [r.body for _t, body, _c, _q in producer.sent for r in decode_batch_body(body)]
    assert bodies == [f"{i:06d}".encode() * 10 for i in range(1000)]
    assert all(len(body) <= 1000 for _t, body, _c, _q in producer.sent)
    assert summary.topics == {"T": 1000}
    assert summary.producers_created == 0  # the stand-in was not created by the writer


def test_rows_of_one_sharding_key_go_to_one_queue_in_order(job_for) -> None:
    producer = StandInProducer()
    job = job_for(producer, max_request_bytes=500, sharded=True)
    write_partition(_batches(600, 100, sharded=True), job, partition=0)
    per_queue: dict[MessageQueue, list[bytes]] = {}
    for _t, body, _c, queue in producer.sent:
        assert queue is not None
        per_queue.setdefault(queue, []).extend(r.body for r in decode_batch_body(body))
    for bodies in per_queue.values():
        assert bodies == sorted(bodies)
    assert sum(len(b) for b in per_queue.values()) == 600


def test_failed_requests_are_counted_not_raised(job_for) -> None:
    producer = StandInProducer(fail_requests={1})
    job = job_for(producer, max_request_bytes=1000)
    summary = write_partition(_batches(500, 100), job, partition=0)
    assert summary.failed_rows > 0
    assert summary.messages + summary.failed_rows == 500
    assert "system busy" in summary.errors[0]


def test_delayed_rows_are_sent_one_by_one_with_their_ids(monkeypatch) -> None:
    producer = StandInProducer()
    config = ProducerConfig(namesrv_addr="127.0.0.1:1", group="writer-delay")
    monkeypatch.setitem(writer_module._producers, config.fingerprint(), producer)
    cols = MessageColumns(body="body", delay_level="delay_level")
    job = WriteJob(config, SinkOptions(topic="T"), cols, batch_context("q", 1))
    rb = pa.RecordBatch.from_pydict({"body": [b"now", b"later", b"now2"], "delay_level": [0, 4, None]})
    summary = write_partition([rb], job, partition=0)
    assert summary.messages == 3
    (single,) = producer.singles
    assert (single.body, single.delay_level, single.topic) == (b"later", 4, "T")
    assert single.uniq_key is not None and len(single.uniq_key) == 32
    assert [r.body for _t, body, _c, _q in producer.sent for r in decode_batch_body(body)] == [b"now", b"now2"]


def test_a_topic_without_route_fails_its_rows_without_crashing_the_task(job_for) -> None:
    class NoRoute(StandInProducer):
        def fetch_publish_queues(self, topic):
            raise RuntimeError(f"No route info of topic {topic!r}")

    producer = NoRoute()
    job = job_for(producer, sharded=True)
    summary = write_partition(_batches(30, 10, sharded=True), job, partition=0)
    assert (summary.rows, summary.messages, summary.failed_rows) == (30, 0, 30)
    assert "No route info" in summary.errors[0]
