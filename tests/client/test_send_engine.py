"""The send engine's rules, each against a local cluster: what sendDefaultImpl does, and where we differ."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from spark_rocketmq import BrokerError, Message, Producer, SendFailedError, SendStatus
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.message import encode_batch_body, encode_properties


def producer(cluster: LocalCluster, **options: object) -> Producer:
    return Producer(namesrv_addr=cluster.namesrv_addr, group="engine_tests", **options)


def test_an_error_answer_marks_the_broker_that_gave_it(make_cluster: Callable[..., LocalCluster]) -> None:
    c = make_cluster()
    c.create_topic("Orders", queues=2)
    for name in ("broker-a", "broker-b"):
        c.broker(name).inject(code=ResponseCode.MESSAGE_ILLEGAL)
    with producer(c) as p:
        with pytest.raises(BrokerError) as err:
            p.send(Message("Orders", b"refused"))
        assert err.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert p.stats().retries == 0  # not an answer another broker would take better
        refused_by = "broker-a" if c.broker("broker-a").addr == err.value.addr else "broker-b"
        # DefaultMQProducerImpl: updateFaultItem(broker, latency, isolation=true) for every MQBrokerException.
        assert not p.fault_strategy.is_available(refused_by)


def test_pre_encoded_batches_take_the_async_retry_count(make_cluster: Callable[..., LocalCluster]) -> None:
    """send_batch_body_async is an async send: retry_times_when_send_async_failed, as the sink's single
    rows (send_async); the sync form keeps retry_times_when_send_failed. Fault avoidance is off so that
    round-robin over the two brokers' queues surely reaches the stopped one within four sends (its failure
    has the route asked for again, without it); then broker-b answers SYSTEM_ERROR, which a sync send
    retries only within retry_times_when_send_failed."""
    c = make_cluster()
    c.create_topic("Orders", queues=2)
    props = encode_properties({"WAIT": "true", "UNIQ_KEY": "0" * 32}).encode()
    body = encode_batch_body([(0, b"one", props)])
    options = {"retry_times_when_send_failed": 0, "retry_times_when_send_async_failed": 2}
    with producer(c, send_latency_fault_enable=False, **options) as p:
        p.fetch_publish_queues("Orders")  # the route, with both brokers, before one stops
        c.broker("broker-a").stop()
        results = [p.send_batch_body_async("Orders", body, 1).result(timeout=10) for _ in range(4)]
        assert all(r.queue.broker_name == "broker-b" for r in results)
        assert p.stats().retries >= 1
        c.broker("broker-b").inject(code=ResponseCode.SYSTEM_ERROR, times=4)
        with pytest.raises(SendFailedError, match="after 1 attempt"):
            p.send_batch_body("Orders", body, 1)


def test_an_async_send_hands_an_error_answer_to_its_future(make_cluster: Callable[..., LocalCluster]) -> None:
    """Java's sendMessageAsync retries only failures to reach a broker; a sync send retries the answers
    sendDefaultImpl retries (SYSTEM_ERROR, ...) on another broker."""
    c = make_cluster()
    c.create_topic("Orders", queues=2)
    with producer(c) as p:
        for name in ("broker-a", "broker-b"):
            c.broker(name).inject(code=ResponseCode.SYSTEM_ERROR, times=1)
        with pytest.raises(BrokerError) as err:
            p.send_async(Message("Orders", b"async")).result(timeout=10)
        assert err.value.code == ResponseCode.SYSTEM_ERROR and p.stats().retries == 0
        other = "broker-b" if c.broker("broker-a").addr == err.value.addr else "broker-a"
        c.broker(other).inject(code=ResponseCode.SYSTEM_ERROR, times=1)
        assert p.send(Message("Orders", b"sync")).status is SendStatus.SEND_OK
        assert p.stats().retries >= 1


def test_a_batch_carries_its_messages_wait_property(make_cluster: Callable[..., LocalCluster]) -> None:
    c = make_cluster(brokers=1)
    c.create_topic("Orders", queues=1)
    with producer(c) as p:
        p.send_batch([Message("Orders", b"x", wait_store_msg_ok=False) for _ in range(3)])
        p.send_batch([Message("Orders", b"y") for _ in range(2)])
    stored = c.messages("Orders")
    assert [m.properties.get("WAIT") for m in stored] == ["false"] * 3 + ["true"] * 2


def test_a_hung_broker_holds_a_sync_send_no_longer_than_its_timeout(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    c = make_cluster(brokers=1)
    c.create_topic("Orders", queues=2)
    p = producer(c, send_msg_timeout_ms=800)
    try:
        p.send(Message("Orders", b"before"))
        c.broker("broker-a").hang()
        big = Message("Orders", b"x" * (3 * 1024 * 1024), keys="big")  # more than the socket buffers take
        begin = time.monotonic()
        with pytest.raises(SendFailedError):
            p.send(big)
        with pytest.raises(SendFailedError):
            p.send(Message("Orders", b"after"))
        # Each ends at its deadline (the scanner's 20 ms tick aside), whatever the socket does.
        assert time.monotonic() - begin < 2 * 0.8 + 1.0
    finally:
        begin = time.monotonic()
        p.close(timeout_s=1.0)
        assert time.monotonic() - begin < 1.0 + 1.0, "close() waited on a hung broker past its timeout"
        c.broker("broker-a").resume()


def test_a_full_speed_pipeline_rides_over_a_busy_broker(make_cluster: Callable[..., LocalCluster]) -> None:
    """Brokers with a 4.9.8 broker's 200 ms send-queue rule, made slow enough to build a queue: a producer
    with default options pipelining as fast as it can gets busy answers, never a failure, and every
    message is stored once."""
    c = make_cluster()
    c.create_topic("Orders", queues=4)
    for name in ("broker-a", "broker-b"):
        c.broker(name).inject(latency_ms=20)  # each send takes 20 ms on the broker's one send thread
    body = encode_batch_body([(0, b"m%05d" % i, b"") for i in range(100)])
    with producer(c) as p:
        futures = [p.send_batch_body_async("Orders", body, 100) for _ in range(120)]
        results = [f.result(timeout=60) for f in futures]
        stats = p.stats()
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert stats.failures == 0 and stats.busy_answers > 0
    assert len(c.messages("Orders")) == 120 * 100
