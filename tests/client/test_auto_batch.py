"""auto_batch (DefaultMQProducer.autoBatch): single sends gathered into MessageBatch requests.

Against the local cluster of tests/conftest.py; the brokers log the requests they read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from spark_rocketmq import (
    BrokerError,
    ConfigError,
    InvalidMessageError,
    Message,
    Producer,
    ProducerConfig,
    RocketMQError,
    SendFailedError,
    SendStatus,
)
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.codes import RequestCode, ResponseCode
from spark_rocketmq.protocol.javamap import java_string_hash


@pytest.fixture
def cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    c = make_cluster(request_log=2000)
    c.create_topic("Orders", queues=4)
    return c


def requests(cluster: LocalCluster, code: int) -> list[Any]:
    return [r for b in cluster.brokers.values() for r in b.received(code)]


def stored_by_id(cluster: LocalCluster) -> dict[str, Any]:
    return {m.uniq_key: m for m in cluster.messages("Orders")}


def test_async_sends_go_as_batches_and_each_future_gets_its_own_result(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_bytes=2000) as p:
        futures = [p.send_async(Message("Orders", f"m{i:04d}".encode() * 20)) for i in range(500)]
        results = [f.result(timeout=30) for f in futures]
    batches = requests(cluster, RequestCode.SEND_BATCH_MESSAGE)
    assert not requests(cluster, RequestCode.SEND_MESSAGE_V2)
    # 100-byte bodies, sent once a batch passes 2000 bytes: 21 messages a request, the rest at close
    assert 500 / 21 <= len(batches) <= 500 / 21 + 8
    stored = stored_by_id(cluster)
    assert len(stored) == 500 and len({r.msg_id for r in results}) == 500
    for i, r in enumerate(results):
        m = stored[r.msg_id]
        assert m.body == f"m{i:04d}".encode() * 20
        assert r.status is SendStatus.SEND_OK and r.count == 1
        assert (r.queue.broker_name, r.queue.queue_id, r.queue_offset) == (m.broker_name, m.queue_id, m.queue_offset)
        assert r.offset_msg_id and "," not in r.offset_msg_id


def test_a_batch_waits_at_most_batch_max_delay_ms(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=50) as p:
        p.send(Message("Orders", b"warm"))  # route known, connection open
        begin = time.monotonic()
        futures = [p.send_async(Message("Orders", b"a")) for _ in range(3)]
        results = [f.result(timeout=10) for f in futures]
        took = time.monotonic() - begin
    assert took >= 0.04  # held for the delay (nowhere near batch_max_bytes) ...
    assert len({(r.queue, r.queue_offset) for r in results}) == 3
    assert len({r.queue for r in results}) == 1  # ... and sent as one request
    assert len(requests(cluster, RequestCode.SEND_BATCH_MESSAGE)) == 2


def test_sync_send_returns_its_own_result_from_the_batch(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=5) as p:
        r = p.send(Message("Orders", b"sync-body", tags="T", keys="k1"))
    m = stored_by_id(cluster)[r.msg_id]
    assert (m.body, m.tags, m.keys, m.queue_offset) == (b"sync-body", "T", ["k1"], r.queue_offset)
    assert len(requests(cluster, RequestCode.SEND_BATCH_MESSAGE)) == 1


def test_close_sends_what_is_accumulated(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=30_000) as p:
        futures = [p.send_async(Message("Orders", f"c{i}".encode())) for i in range(5)]
        assert not any(f.done() for f in futures)
    results = [f.result(timeout=10) for f in futures]
    assert sorted(m.body for m in cluster.messages("Orders")) == sorted(f"c{i}".encode() for i in range(5))
    assert len({r.msg_id for r in results}) == 5


def test_messages_that_cannot_be_batched_go_alone(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=5) as p:
        delayed = p.send_async(Message("Orders", b"later", delay_level=3))
        retry = p.send_async(Message("%RETRY%group", b"again"))
        plain = p.send_async(Message("Orders", b"plain"))
        delayed.result(timeout=10), retry.result(timeout=10), plain.result(timeout=10)
    singles = requests(cluster, RequestCode.SEND_MESSAGE_V2)
    assert len(singles) == 2 and len(requests(cluster, RequestCode.SEND_BATCH_MESSAGE)) == 1


def test_keyed_sends_are_batched_on_their_keys_queue_in_order(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=20) as p:
        queues = p.fetch_publish_queues("Orders")
        keys = ["user-1", "user-2", "user-3"]
        futures = {
            k: [p.send_async(Message("Orders", f"{k}/{i}".encode()), sharding_key=k) for i in range(30)] for k in keys
        }
        results = {k: [f.result(timeout=10) for f in fs] for k, fs in futures.items()}
    assert not requests(cluster, RequestCode.SEND_MESSAGE_V2)
    assert len(requests(cluster, RequestCode.SEND_BATCH_MESSAGE)) < 90
    stored = stored_by_id(cluster)
    for k in keys:  # SelectMessageQueueByHash's queue, and the key's messages stored in send order
        expected = queues[abs(java_string_hash(k)) % len(queues)]
        assert {(r.queue.broker_name, r.queue.queue_id) for r in results[k]} == {
            (expected.broker_name, expected.queue_id)
        }
        by_offset = sorted((stored[r.msg_id].queue_offset, stored[r.msg_id].body) for r in results[k])
        assert [body for _offset, body in by_offset] == [f"{k}/{i}".encode() for i in range(30)]


def test_a_keyed_send_to_a_topic_without_a_route_gets_the_single_send_error(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    bare = make_cluster(auto_create_topic=False)
    errors = []
    for auto_batch in (False, True):
        with Producer(namesrv_addr=bare.namesrv_addr, auto_batch=auto_batch, send_msg_timeout_ms=2000) as p:
            with pytest.raises(RocketMQError) as info:
                p.send(Message("NoSuchTopic", b"x"), sharding_key="k")
            errors.append(info.value)
    assert type(errors[1]) is type(errors[0]) and str(errors[1]) == str(errors[0])
    assert "NoSuchTopic" in str(errors[1])


def test_past_total_batch_max_bytes_messages_go_alone(cluster) -> None:
    with Producer(
        namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=30_000, total_batch_max_bytes=150
    ) as p:
        held = [p.send_async(Message("Orders", b"h" * 100)) for _ in range(2)]  # 100, then 200 bytes held
        alone = p.send_async(Message("Orders", b"a" * 100))
        assert alone.result(timeout=10).status is SendStatus.SEND_OK and not any(f.done() for f in held)
    assert len({f.result(timeout=10).queue_offset for f in held}) == 2
    assert len(requests(cluster, RequestCode.SEND_MESSAGE_V2)) == 1
    assert len(requests(cluster, RequestCode.SEND_BATCH_MESSAGE)) == 1


def test_bad_message_is_refused_with_the_single_send_error(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True) as p, pytest.raises(InvalidMessageError) as e:
        p.send_async(Message("Orders", b"x", properties={"bad": "a\x01b"}))
    assert "Orders" in str(e.value) and "batch item" not in str(e.value)


def test_a_refused_batch_fails_every_message_of_it(cluster) -> None:
    for broker in cluster.brokers.values():
        broker.inject(code=ResponseCode.MESSAGE_ILLEGAL, remark="refused by test", times=1)
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=20) as p:
        futures = [p.send_async(Message("Orders", b"r")) for _ in range(4)]
        errors = [f.exception(timeout=10) for f in futures]
    assert all(isinstance(e, BrokerError) and e.code == ResponseCode.MESSAGE_ILLEGAL for e in errors)
    assert len({id(e) for e in errors}) == 1  # the batch's error, given to each of its messages


def test_batches_are_kept_apart_by_tags_and_wait(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=20) as p:
        futures = [
            p.send_async(Message("Orders", b"1", tags="A")),
            p.send_async(Message("Orders", b"2", tags="B")),
            p.send_async(Message("Orders", b"3", tags="A", wait_store_msg_ok=False)),
            p.send_async(Message("Orders", b"4", tags="A")),
        ]
        results = [f.result(timeout=10) for f in futures]
    assert len(requests(cluster, RequestCode.SEND_BATCH_MESSAGE)) == 3
    assert results[0].queue == results[3].queue and results[3].queue_offset == results[0].queue_offset + 1
    stored = stored_by_id(cluster)
    assert [stored[r.msg_id].tags for r in results] == ["A", "B", "A", "A"]


@pytest.mark.parametrize(
    ("option", "value"),
    [("batch_max_delay_ms", 0), ("batch_max_delay_ms", 30_001), ("batch_max_bytes", 2 * 1024 * 1024 + 1)],
)
def test_batch_limits_are_checked(option: str, value: int) -> None:
    with pytest.raises(ConfigError, match=option):
        ProducerConfig(namesrv_addr="127.0.0.1:9876", **{option: value})


def test_camel_case_names_of_java_are_accepted() -> None:
    config = ProducerConfig.from_mapping({"namesrvAddr": "127.0.0.1:9876", "autoBatch": "true", "batchMaxDelayMs": "7"})
    assert (config.auto_batch, config.batch_max_delay_ms) == (True, 7)


def test_a_hung_broker_fails_its_batches_in_time_and_later_ones_go_elsewhere(cluster) -> None:
    """One broker frozen (connections open, nothing read or answered): a batch sent to it fails at
    send_msg_timeout_ms, naming it (none waits for ever); the broker is then avoided, and later
    batches are stored on the other one."""
    with Producer(
        namesrv_addr=cluster.namesrv_addr, auto_batch=True, batch_max_delay_ms=5, send_msg_timeout_ms=1000
    ) as p:
        p.send(Message("Orders", b"warm"))
        cluster.broker("broker-a").hang()
        try:
            # Queue choice goes round the 8 queues from a random start, 4 of broker-a's in a row: send
            # waves (one batch each) until one meets the hung broker, then one wave more.
            waves = []
            hit: int | None = None  # the first wave with a failed batch
            while len(waves) < 10 and (hit is None or len(waves) == hit + 1):
                begin = time.monotonic()
                futures = [p.send_async(Message("Orders", f"w{len(waves)}-{i}".encode())) for i in range(50)]
                errors = [f.exception(timeout=10) for f in futures]
                assert time.monotonic() - begin < 1.0 + 2.0
                waves.append((futures, errors))
                if hit is None and any(errors):
                    hit = len(waves) - 1
        finally:
            cluster.broker("broker-a").resume()
    hung_addr = cluster.broker("broker-a").addr
    failed = [e for _, errors in waves for e in errors if e is not None]
    assert failed, "no batch went to the hung broker"
    assert all(isinstance(e, SendFailedError) and hung_addr in str(e) for e in failed)
    last_futures, last_errors = waves[-1]
    assert last_errors == [None] * 50
    assert {f.result().queue.broker_name for f in last_futures} == {"broker-b"}
    stored = stored_by_id(cluster)
    assert all(f.result().msg_id in stored for f in last_futures)
