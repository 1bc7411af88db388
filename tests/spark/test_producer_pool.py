"""The executor producer pool: one producer per configuration, use counts, idle expiry, closed ones replaced."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

import pytest

from spark_rocketmq.client import ProducerStats, SendResult
from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.client.transaction import TransactionHandle
from spark_rocketmq.protocol.message import Message
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.spark.contract import SinkProducer
from spark_rocketmq.spark.pool import ProducerPool


class IdleProducer:
    """Honours SinkProducer; sends nothing (the pool never sends)."""

    def __init__(self, config: ProducerConfig) -> None:
        self.config = config
        self.closes = 0
        self.closed_event = threading.Event()

    @property
    def closed(self) -> bool:
        return self.closes > 0

    def close(self, timeout_s: float | None = None) -> None:
        self.closes += 1
        self.closed_event.set()

    def stats(self) -> ProducerStats:
        return ProducerStats(requests=0, messages=0, retries=0, failures=0, bytes_sent=0, in_flight=0)

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return []

    def send_half_async(
        self, message: Message, *, queue: MessageQueue | None = None, check_immunity_s: int | None = None
    ) -> Future[TransactionHandle]:
        raise AssertionError("the pool never sends")

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
        raise NotImplementedError

    def send_async(
        self, message: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None
    ) -> Future[SendResult]:
        raise NotImplementedError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CONFIG_A = ProducerConfig(namesrv_addr="127.0.0.1:1", group="pool-a")
CONFIG_B = ProducerConfig(namesrv_addr="127.0.0.1:1", group="pool-b")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pool(clock: Clock):
    p = ProducerPool(IdleProducer, clock=clock)
    yield p
    p.reset()


def test_one_producer_per_configuration_with_counted_uses(pool: ProducerPool) -> None:
    a1 = pool.acquire(CONFIG_A)
    a2 = pool.acquire(ProducerConfig(namesrv_addr="127.0.0.1:1", group="pool-a"))  # equal configuration
    b = pool.acquire(CONFIG_B)
    assert a1.client is a2.client is not b.client
    assert isinstance(a1.client, SinkProducer)
    assert pool.uses() == {CONFIG_A.fingerprint(): 2, CONFIG_B.fingerprint(): 1}
    assert (a1.created, b.created) == (1, 1)
    pool.release(a1)
    pool.release(a1)  # a lease is given back once, however often release is called
    assert pool.uses()[CONFIG_A.fingerprint()] == 1
    pool.release(a2)
    pool.release(b)
    assert pool.uses() == {CONFIG_A.fingerprint(): 0, CONFIG_B.fingerprint(): 0}
    assert pool.acquire(CONFIG_A).client is a1.client  # idle, not expired: reused
    assert pool.created() == {CONFIG_A.fingerprint(): 1, CONFIG_B.fingerprint(): 1}


def test_an_idle_producer_is_closed_after_its_idle_timeout(pool: ProducerPool, clock: Clock) -> None:
    lease = pool.acquire(CONFIG_A, idle_timeout_s=60)
    producer = lease.client
    assert isinstance(producer, IdleProducer)
    clock.now += 3600  # in use: never expires
    assert pool.expire_idle() == 0 and not producer.closed
    pool.release(lease)
    clock.now += 59
    assert pool.expire_idle() == 0 and not producer.closed
    clock.now += 1
    assert pool.expire_idle() == 1
    assert producer.closes == 1 and len(pool) == 0
    again = pool.acquire(CONFIG_A, idle_timeout_s=60)
    assert again.client is not producer and again.created == 2


def test_acquire_and_release_close_what_has_expired(pool: ProducerPool, clock: Clock) -> None:
    a = pool.acquire(CONFIG_A, idle_timeout_s=10)
    pool.release(a)
    clock.now += 10
    b = pool.acquire(CONFIG_B)  # the pass at acquire closes A's idle producer
    assert a.client.closed and not b.client.closed
    assert pool.uses() == {CONFIG_B.fingerprint(): 1}


def test_idle_timeout_zero_closes_at_release(pool: ProducerPool) -> None:
    lease = pool.acquire(CONFIG_A, idle_timeout_s=0)
    pool.release(lease)
    assert lease.client.closed and len(pool) == 0


def test_a_closed_producer_is_never_handed_out_again(pool: ProducerPool) -> None:
    first = pool.acquire(CONFIG_A)
    first.client.close()  # closed or broken while in use
    second = pool.acquire(CONFIG_A)
    assert second.client is not first.client and not second.client.closed
    assert second.created == 2
    pool.release(first)  # the old lease's release leaves the new producer alone
    assert pool.uses() == {CONFIG_A.fingerprint(): 1}
    pool.release(second)
    assert pool.acquire(CONFIG_A).client is second.client


def test_reset_closes_every_producer(pool: ProducerPool) -> None:
    a, b = pool.acquire(CONFIG_A), pool.acquire(CONFIG_B)
    pool.release(b)
    pool.reset()
    assert a.client.closed and b.client.closed
    assert len(pool) == 0 and pool.created() == {}


def test_the_reaper_closes_idle_producers_of_a_worker_that_runs_no_more_tasks() -> None:
    pool = ProducerPool(IdleProducer, reaper_interval_s=0.05)
    try:
        lease = pool.acquire(CONFIG_A, idle_timeout_s=0.1)
        pool.release(lease)
        producer = lease.client
        assert isinstance(producer, IdleProducer)
        assert producer.closed_event.wait(10), "the reaper did not close the idle producer"
        assert len(pool) == 0
    finally:
        pool.reset()


def test_a_factory_error_reaches_the_caller_and_pools_nothing(pool: ProducerPool) -> None:
    def refuse(config: ProducerConfig) -> SinkProducer:
        raise OSError("no route to host")

    failing = ProducerPool(refuse)
    with pytest.raises(OSError, match="no route to host"):
        failing.acquire(CONFIG_A)
    assert len(failing) == 0 and failing.created() == {}
