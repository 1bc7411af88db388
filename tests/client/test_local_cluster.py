"""The producer against the project's local NameServer + brokers (spark_rocketmq.local).

Uses the fixtures of tests/conftest.py: ``local_cluster`` (2 brokers, 1 NameServer) and
``make_cluster(**kw)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_rocketmq import (
    BrokerError,
    Message,
    Producer,
    SendFailedError,
    SendStatus,
)
from spark_rocketmq.protocol.codes import ResponseCode


@pytest.fixture
def cluster(local_cluster: Any) -> Any:
    local_cluster.create_topic("Orders", queues=4)
    return local_cluster


@pytest.fixture
def producer(cluster: Any) -> Iterator[Producer]:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="orders-writer") as p:
        yield p


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def by_id(cluster: Any, topic: str) -> dict[str, Any]:
    return {m.uniq_key: m for m in cluster.messages(topic)}


def test_sync_send_stores_every_field(cluster, producer) -> None:
    r = producer.send(Message("Orders", b"body-1", tags="created", keys=["o-1", "o-2"], properties={"k": "v"}))
    assert r.status is SendStatus.SEND_OK
    m = by_id(cluster, "Orders")[r.msg_id]
    assert (m.topic, m.body, m.tags, m.properties["k"]) == ("Orders", b"body-1", "created", "v")
    assert "o-1" in str(m.keys) and "o-2" in str(m.keys)
    assert (m.broker_name, m.queue_id, m.queue_offset) == (r.queue.broker_name, r.queue.queue_id, r.queue_offset)


def test_compressed_body_reads_back(cluster, producer) -> None:
    body = bytes(i % 251 for i in range(10_000))
    r = producer.send(Message("Orders", body))
    stored = by_id(cluster, "Orders")[r.msg_id]
    assert stored.body == body or __import__("zlib").decompress(stored.body) == body


def test_async_and_oneway(cluster, producer) -> None:
    futures = [producer.send_async(Message("Orders", f"a{i}".encode())) for i in range(300)]
    results = [f.result(timeout=30) for f in futures]
    stored = by_id(cluster, "Orders")
    assert [stored[r.msg_id].body for r in results] == [f"a{i}".encode() for i in range(300)]
    producer.send_oneway(Message("Orders", b"oneway-body"))
    wait_for(lambda: any(m.body == b"oneway-body" for m in cluster.messages("Orders")), what="the oneway message")


def test_batch_with_splitting(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, max_message_size=4000) as p:
        msgs = [Message("Orders", f"batch-{i:03d}".encode() * 8, tags="B", keys=f"k{i}") for i in range(100)]
        results = p.send_batch(msgs)
    assert len(results) > 1 and sum(r.count for r in results) == 100
    stored = by_id(cluster, "Orders")
    ids = [i for r in results for i in r.msg_id.split(",")]
    assert [stored[i].body for i in ids] == [m.body for m in msgs]
    assert all(stored[i].tags == "B" for i in ids)
    for r in results:  # one request: consecutive offsets on one queue
        offsets = [stored[i].queue_offset for i in r.msg_id.split(",")]
        assert offsets == list(range(r.queue_offset, r.queue_offset + r.count))


def test_sharding_key_keeps_order_on_one_queue(cluster, producer) -> None:
    results = [producer.send(Message("Orders", f"{i}".encode()), sharding_key="user-42") for i in range(30)]
    assert len({r.queue for r in results}) == 1
    stored = by_id(cluster, "Orders")
    offsets = [stored[r.msg_id].queue_offset for r in results]
    assert offsets == sorted(offsets)


def test_retry_onto_the_other_broker_when_one_errors(cluster, producer) -> None:
    cluster.broker("broker-a").inject(code=ResponseCode.SYSTEM_ERROR, times=1000)
    results = [producer.send(Message("Orders", b"r")) for _ in range(20)]
    assert {r.queue.broker_name for r in results} == {"broker-b"}
    assert len(cluster.messages("Orders")) == 20


def test_retry_onto_the_other_broker_when_one_is_stopped(cluster, producer) -> None:
    producer.send_batch([Message("Orders", b"warm")] * 4)
    cluster.broker("broker-a").stop()
    results = [producer.send(Message("Orders", b"s")) for _ in range(10)]
    futures = [producer.send_async(Message("Orders", b"a")) for _ in range(10)]
    results += [f.result(timeout=30) for f in futures]
    assert {r.queue.broker_name for r in results} == {"broker-b"}


def test_dropped_connections_fail_over_without_losing_sends(cluster, producer) -> None:
    producer.send(Message("Orders", b"warm"))
    futures = [producer.send_async(Message("Orders", f"d{i}".encode())) for i in range(200)]
    cluster.broker("broker-a").drop_connections()
    results = [f.result(timeout=30) for f in futures]
    stored = by_id(cluster, "Orders")
    assert all(r.msg_id in stored for r in results)


def test_slow_broker_is_avoided(cluster, producer) -> None:
    cluster.broker("broker-a").inject(latency_ms=600, times=1)

    def sent_to_broker_a() -> bool:
        return producer.send(Message("Orders", b"w")).queue.broker_name == "broker-a"

    wait_for(sent_to_broker_a, what="a send to broker-a")
    results = [producer.send(Message("Orders", b"after")) for _ in range(12)]
    assert {r.queue.broker_name for r in results} == {"broker-b"}


def test_non_retryable_error_carries_code_remark_and_address(cluster, producer) -> None:
    for name in ("broker-a", "broker-b"):
        cluster.broker(name).inject(code=ResponseCode.MESSAGE_ILLEGAL, times=1000)
    with pytest.raises(BrokerError) as info:
        producer.send(Message("Orders", b"x"))
    assert info.value.code == ResponseCode.MESSAGE_ILLEGAL and info.value.addr


def test_every_broker_busy_exhausts_retries(cluster) -> None:
    for name in ("broker-a", "broker-b"):
        cluster.broker(name).inject(code=ResponseCode.SYSTEM_BUSY, times=1000)
    with Producer(namesrv_addr=cluster.namesrv_addr, send_msg_timeout_ms=2000) as p:
        with pytest.raises(SendFailedError) as info:
            p.send(Message("Orders", b"x"))
        assert isinstance(info.value.last_error, BrokerError)
        for name in ("broker-a", "broker-b"):
            cluster.broker(name).clear_faults()
        assert p.send(Message("Orders", b"x")).status is SendStatus.SEND_OK


def test_namesrv_failover(make_cluster) -> None:
    c = make_cluster(brokers=2, namesrvs=2)
    c.create_topic("Orders", queues=4)
    c.namesrv(0).stop()
    with Producer(namesrv_addr=c.namesrv_addr) as p:
        p.namesrv.use(p.namesrv.addrs[0])  # begin with the stopped one
        assert p.send(Message("Orders", b"x")).status is SendStatus.SEND_OK


def test_route_refresh_picks_up_a_new_broker(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, poll_name_server_interval_ms=200) as p:
        p.send(Message("Orders", b"before"))
        cluster.add_broker("broker-c")
        cluster.create_topic("Orders", queues=4)

        def reached_broker_c() -> bool:
            return p.send(Message("Orders", b"after")).queue.broker_name == "broker-c"

        wait_for(reached_broker_c, what="a send to the new broker-c")


def test_topic_auto_created_from_tbw102(cluster, producer) -> None:
    r = producer.send(Message("AutoCreated", b"auto"))
    assert r.status is SendStatus.SEND_OK
    assert by_id(cluster, "AutoCreated")[r.msg_id].body == b"auto"


def test_a_broker_leaving_the_route_stops_being_chosen(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, poll_name_server_interval_ms=200) as p:
        assert {q.broker_name for q in p.fetch_publish_queues("Orders")} == {"broker-a", "broker-b"}
        cluster.broker("broker-a").stop()  # the NameServer drops it when its registrations stop

        def only_broker_b() -> bool:
            return {q.broker_name for q in p.fetch_publish_queues("Orders")} == {"broker-b"}

        wait_for(only_broker_b, what="the route refresh to drop broker-a")
        assert {p.send(Message("Orders", b"x")).queue.broker_name for _ in range(6)} == {"broker-b"}


def test_read_only_broker_is_not_written_to(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, poll_name_server_interval_ms=200) as p:
        p.fetch_publish_queues("Orders")
        cluster.broker("broker-a").set_writable(False)
        wait_for(
            lambda: {q.broker_name for q in p.fetch_publish_queues("Orders")} == {"broker-b"},
            what="broker-a's write permission to leave the route",
        )
        assert {p.send(Message("Orders", b"x")).queue.broker_name for _ in range(6)} == {"broker-b"}
