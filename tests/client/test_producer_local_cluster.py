"""The producer against the project's local NameServer + brokers (spark_rocketmq.local).

Uses the fixtures of tests/conftest.py: ``make_cluster(**kw)`` (2 brokers, 1 NameServer by
default); the brokers keep a log of the requests they read (``broker.received(code)``).
"""

from __future__ import annotations

import gc
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_rocketmq import (
    BrokerError,
    ConfigError,
    InvalidMessageError,
    Message,
    Producer,
    RemotingTimeoutError,
    SendFailedError,
    SendStatus,
    TopicNotFoundError,
)
from spark_rocketmq.client import batch_sends
from spark_rocketmq.client.collector import YOUNG_THRESHOLD
from spark_rocketmq.client.producer import sharding_queue_index
from spark_rocketmq.client.send_failures import is_final
from spark_rocketmq.errors import NoBrokerRegisteredError, RemotingTooMuchRequestError
from spark_rocketmq.local import Faults, LocalCluster
from spark_rocketmq.protocol.codes import Perm, RequestCode, ResponseCode
from spark_rocketmq.protocol.javamap import hashmap_order
from spark_rocketmq.protocol.message import (
    decode_batch_body,
    decode_properties,
    encode_batch_body,
    encode_properties,
)

#: Requests each broker keeps for the tests to read back.
REQUEST_LOG = 2000


@pytest.fixture
def cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    """Brokers broker-a and broker-b with topic Orders (4 queues on each), one NameServer."""
    c = make_cluster(request_log=REQUEST_LOG)
    c.create_topic("Orders", queues=4)
    return c


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


def send_requests(cluster: LocalCluster) -> list[Any]:
    """The send requests every broker read, broker by broker, oldest first."""
    codes = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    return [r for b in cluster.brokers.values() for r in b.received(*codes)]


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


def test_send_batch_runs_the_collector_less_often_while_it_runs(cluster, producer, monkeypatch) -> None:
    """send_batch holds fewer_collections(): the young generation's threshold is raised while its
    bodies are encoded and sent, and is as the caller set it once it returns."""
    seen: list[int] = []
    real = batch_sends.batch_bodies

    def watching(*args: Any, **kw: Any) -> Any:
        seen.append(gc.get_threshold()[0])
        return real(*args, **kw)

    monkeypatch.setattr(batch_sends, "batch_bodies", watching)
    before, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(700, *before[1:])
    gc.enable()
    try:
        [r] = producer.send_batch([Message("Orders", b"gc") for _ in range(10)])
        assert seen == [YOUNG_THRESHOLD] and r.count == 10
        assert gc.get_threshold()[0] == 700
    finally:
        gc.set_threshold(*before)
        if not enabled:
            gc.disable()


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
    broker_a = cluster.broker("broker-a")
    assert producer.stats().retries >= 1 or not broker_a.received(RequestCode.SEND_MESSAGE_V2)


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


def test_non_retryable_error_is_raised_at_once_with_code_remark_and_address(cluster, producer) -> None:
    for name in ("broker-a", "broker-b"):
        cluster.broker(name).inject(code=ResponseCode.MESSAGE_ILLEGAL, times=1000)
    with pytest.raises(BrokerError) as info:
        producer.send(Message("Orders", b"bad"))
    assert info.value.code == ResponseCode.MESSAGE_ILLEGAL and "injected fault" in info.value.remark
    assert info.value.addr in {b.addr for b in cluster.brokers.values()}
    assert len(send_requests(cluster)) == 1
    with pytest.raises(BrokerError):
        producer.send_async(Message("Orders", b"bad")).result(timeout=10)


def test_every_broker_busy_exhausts_retries(cluster) -> None:
    for name in ("broker-a", "broker-b"):
        cluster.broker(name).inject(code=ResponseCode.SYSTEM_BUSY, times=1000)
    with Producer(namesrv_addr=cluster.namesrv_addr, send_msg_timeout_ms=2000) as p:
        with pytest.raises(SendFailedError) as info:
            p.send(Message("Orders", b"x"))
        # Busy answers are resent while time lasts; on a loaded machine the last resend may time out instead.
        assert "busy answer(s)" in str(info.value), info.value
        assert isinstance(info.value.last_error, BrokerError | RemotingTimeoutError)
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
        assert p.namesrv.current == c.namesrv(1).addr


def test_route_refresh_picks_up_a_new_broker_and_drops_a_gone_one(cluster) -> None:
    cluster.create_topic("Placed", queues=4, brokers=["broker-a"])
    with Producer(namesrv_addr=cluster.namesrv_addr, poll_name_server_interval_ms=100) as p:
        assert p.send(Message("Placed", b"1")).queue.broker_name == "broker-a"
        broker_c = cluster.add_broker("broker-c")
        cluster.create_topic("Placed", queues=4, brokers=["broker-c"])

        def reached_broker_c() -> bool:
            return p.send(Message("Placed", b"2")).queue.broker_name == "broker-c"

        wait_for(reached_broker_c, what="a send to the new broker-c")
        assert broker_c.received(RequestCode.HEART_BEAT)
        assert cluster.broker("broker-a").addr in p.connections()
        cluster.delete_topic("Placed", brokers=["broker-a"])
        wait_for(lambda: {q.broker_name for q in p.fetch_publish_queues("Placed")} == {"broker-c"})
        assert {p.send(Message("Placed", b"3")).queue.broker_name for _ in range(6)} == {"broker-c"}
        # No route of this producer names broker-a any more: the refresh closed its connection.
        wait_for(lambda: cluster.broker("broker-a").addr not in p.connections(), what="broker-a's connection closed")


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


def test_sync_send_is_stored_with_metadata_and_ids(cluster, producer) -> None:
    msg = Message("Orders", b"payload", tags="created", keys=["o-1", "o-2"], properties={"k": "v"})
    r = producer.send(msg)
    assert r.status is SendStatus.SEND_OK
    [stored] = cluster.messages("Orders")
    assert stored.body == b"payload"
    assert stored.properties["TAGS"] == "created" and stored.properties["KEYS"] == "o-1 o-2"
    assert stored.properties["k"] == "v" and stored.properties["CLUSTER"] == "DefaultCluster"
    assert "WAIT" not in stored.properties  # a broker does not store a single message's WAIT
    assert stored.uniq_key == r.msg_id and len(r.msg_id) == 32
    assert (r.queue.topic, r.queue.broker_name, r.queue.queue_id, r.queue_offset) == (
        "Orders", stored.broker_name, stored.queue_id, stored.queue_offset
    )  # fmt: skip
    assert len(r.offset_msg_id) == 32


def test_send_v2_header_matches_the_java_client(cluster, producer) -> None:
    r = producer.send(Message("Orders", b"x", tags="t"))
    [req] = send_requests(cluster)
    assert req.code == RequestCode.SEND_MESSAGE_V2
    assert list(req.ext_fields) == hashmap_order(list("abcdefghijkmn"))
    f = req.ext_fields
    assert (f["a"], f["b"], f["c"], f["d"], f["f"], f["m"], f["n"]) == (
        "orders-writer", "Orders", "TBW102", "4", "0", "false", r.queue.broker_name
    )  # fmt: skip
    assert decode_properties(f["i"])["UNIQ_KEY"] == r.msg_id
    assert abs(int(f["g"]) - time.time() * 1000) < 60_000


def test_large_single_body_is_zlib_compressed(cluster, producer) -> None:
    body = bytes(i % 251 for i in range(10_000))
    producer.send(Message("Orders", body))
    [req] = send_requests(cluster)
    assert req.ext_fields["f"] == str(0x301)
    assert req.body[:2] == b"\x78\x5e" and zlib.decompress(req.body) == body
    producer.send(Message("Orders", b"y" * 4095))
    [plain] = [r for r in send_requests(cluster) if r.body == b"y" * 4095]
    assert plain.ext_fields["f"] == "0"


def test_async_sends_complete_in_order_of_nothing_but_all_arrive(cluster, producer) -> None:
    futures = [producer.send_async(Message("Orders", f"m{i}".encode())) for i in range(200)]
    results = [f.result(timeout=10) for f in futures]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    stored = {m.uniq_key: m.body for m in cluster.messages("Orders")}
    assert {r.msg_id: f"m{i}".encode() for i, r in enumerate(results)} == stored
    assert producer.stats().messages == 200 and producer.stats().in_flight == 0


def test_async_is_bounded_by_max_in_flight(cluster) -> None:
    cluster.broker("broker-a").inject(latency_ms=200, times=1, then=Faults())
    with Producer(namesrv_addr=cluster.namesrv_addr, max_in_flight=2) as p:
        futures = [p.send_async(Message("Orders", b"x")) for _ in range(6)]
        assert p.stats().in_flight <= 2
        assert all(f.result(timeout=10).status is SendStatus.SEND_OK for f in futures)


def test_oneway_send_arrives(cluster, producer) -> None:
    producer.send_oneway(Message("Orders", b"fire"))
    stored = wait_for(lambda: cluster.messages("Orders"), what="the oneway message")
    assert stored[0].body == b"fire"
    assert send_requests(cluster)[0].flag & 2


def test_batch_carries_each_message_metadata_and_wrapper_only_wait(cluster, producer) -> None:
    msgs = [Message("Orders", f"b{i}".encode(), tags="T", keys=f"k{i}", properties={"n": str(i)}) for i in range(5)]
    [r] = producer.send_batch(msgs)
    [req] = send_requests(cluster)
    assert req.code == RequestCode.SEND_BATCH_MESSAGE
    assert req.ext_fields["m"] == "true" and req.ext_fields["i"] == "WAIT\x01true" and req.ext_fields["f"] == "0"
    records = decode_batch_body(req.body)
    assert [rec.body for rec in records] == [m.body for m in msgs]
    assert [rec.properties["KEYS"] for rec in records] == [f"k{i}" for i in range(5)]
    assert all(rec.properties["WAIT"] == "true" and rec.properties["TAGS"] == "T" for rec in records)
    assert r.count == 5 and r.msg_id.split(",") == [rec.properties["UNIQ_KEY"] for rec in records]
    assert [m.uniq_key for m in cluster.messages("Orders")] == r.msg_id.split(",")


def test_batch_is_split_at_max_message_size(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, max_message_size=1000) as p:
        msgs = [Message("Orders", bytes([65 + i % 26]) * 100) for i in range(30)]
        results = p.send_batch(msgs)
    assert len(results) > 1 and sum(r.count for r in results) == 30
    assert all(len(req.body) <= 1000 for req in send_requests(cluster))
    ids = [i for r in results for i in r.msg_id.split(",")]
    assert sorted(m.uniq_key for m in cluster.messages("Orders")) == sorted(ids)


def test_send_batch_body_fast_path(cluster, producer) -> None:
    import pyarrow as pa

    ids = ["C0000202000000000000000000000001", "C0000202000000000000000000000002"]
    body = encode_batch_body(
        (0, f"fast{i}".encode(), encode_properties({"UNIQ_KEY": u, "WAIT": "true"}).encode()) for i, u in enumerate(ids)
    )
    queue = producer.fetch_publish_queues("Orders")[5]
    r = producer.send_batch_body_async("Orders", body, 2, uniq_keys=ids, queue=queue).result(timeout=10)
    assert r.msg_id == ",".join(ids) and r.queue == queue and r.count == 2
    assert [m.uniq_key for m in cluster.messages("Orders")] == ids
    r2 = producer.send_batch_body("Orders", body, 2)
    assert r2.msg_id == "" and r2.count == 2
    r3 = producer.send_batch_body("Orders", pa.py_buffer(b"--" + body)[2:], 2)
    where = (r3.queue.broker_name, r3.queue.queue_id)
    third = [m for m in cluster.messages("Orders") if (m.broker_name, m.queue_id) == where]
    assert r3.count == 2 and [m.body for m in third if m.queue_offset >= r3.queue_offset] == [b"fast0", b"fast1"]
    assert [r.body for r in send_requests(cluster)] == [body] * 3
    with pytest.raises(InvalidMessageError, match="empty"):
        producer.send_batch_body("Orders", b"", 1)
    with pytest.raises(InvalidMessageError, match="bytes or a buffer"):
        producer.send_batch_body("Orders", "text", 1)


def test_sharding_key_pins_one_queue(cluster, producer) -> None:
    results = [producer.send(Message("Orders", f"{i}".encode()), sharding_key="user-42") for i in range(10)]
    assert len({r.queue for r in results}) == 1
    queues = producer.fetch_publish_queues("Orders")
    assert results[0].queue == queues[sharding_queue_index("user-42", len(queues))]
    assert [r.queue_offset for r in results] == list(range(10))


def test_sharding_queue_index_is_java_hash_mod_count() -> None:
    # "user-42".hashCode() == -147182656 in Java (sum of c * 31^(n-1-i), wrapped to int32)
    assert sharding_queue_index("user-42", 8) == 147182656 % 8
    assert sharding_queue_index("user-42", 5) == 147182656 % 5
    assert sharding_queue_index("", 3) == 0


def test_explicit_queue(cluster, producer) -> None:
    queues = producer.fetch_publish_queues("Orders")
    assert {q.broker_name for q in queues} == {"broker-a", "broker-b"} and len(queues) == 8
    r = producer.send(Message("Orders", b"q"), queue=queues[6])
    assert r.queue == queues[6]


def test_busy_broker_is_retried_after_backoff(cluster, producer) -> None:
    for b in cluster.brokers.values():
        b.inject(code=ResponseCode.SYSTEM_BUSY, times=1)
    r = producer.send(Message("Orders", b"busy"))
    assert r.status is SendStatus.SEND_OK and producer.stats().retries >= 1


def test_retries_exhausted_raise_send_failed_with_the_cause(cluster) -> None:
    for b in cluster.brokers.values():
        b.inject(code=ResponseCode.SERVICE_NOT_AVAILABLE)
    with Producer(namesrv_addr=cluster.namesrv_addr, retry_times_when_send_failed=2) as p:
        with pytest.raises(SendFailedError) as info:
            p.send(Message("Orders", b"x"))
        assert info.value.attempts == 3 and isinstance(info.value.last_error, BrokerError)
        with pytest.raises(BrokerError):  # an async send hands the broker's answer over (sendMessageAsync)
            p.send_async(Message("Orders", b"x")).result(timeout=10)
        assert p.stats().failures == 2


def test_whole_send_is_bounded_by_send_msg_timeout(cluster) -> None:
    for b in cluster.brokers.values():
        b.inject(latency_ms=1500)  # every broker would answer SUCCESS, but only after 1.5 s
    with Producer(namesrv_addr=cluster.namesrv_addr, send_msg_timeout_ms=300) as p:
        p.fetch_publish_queues("Orders")
        with pytest.raises(SendFailedError, match="Orders") as info:
            p.send(Message("Orders", b"slow"))
        assert isinstance(info.value.last_error, RemotingTimeoutError)
        with pytest.raises(SendFailedError):
            p.send_async(Message("Orders", b"slow")).result(timeout=10)
        for b in cluster.brokers.values():
            b.clear_faults()


def test_unknown_topic_uses_tbw102_with_default_queue_nums(cluster, producer) -> None:
    r = producer.send(Message("NewTopic", b"auto"))  # no route for NewTopic at the NameServer yet
    assert r.queue.queue_id < 4
    assert len(producer.fetch_publish_queues("NewTopic")) == 8  # 4 per broker, not TBW102's 8


def test_topic_not_found_when_nothing_can_create_it(make_cluster) -> None:
    c = make_cluster(auto_create_topic=False)  # no TBW102 on any broker
    with Producer(namesrv_addr=c.namesrv_addr) as p:
        with pytest.raises(TopicNotFoundError, match="Nowhere"):
            p.send(Message("Nowhere", b"x"))
        c.create_topic("ReadOnly", queues=4, perm=Perm.READ)  # read-only everywhere: no writable queue
        with pytest.raises(TopicNotFoundError, match="writable"):
            p.send(Message("ReadOnly", b"x"))


def test_a_restarted_namesrv_that_knows_no_broker_yet_is_an_outage_not_a_missing_topic(make_cluster) -> None:
    """A restarted NameServer answers TOPIC_NOT_EXIST for every topic, TBW102 too, until the brokers
    register again (every 30 s): a producer without a cached route must not take that for a topic that
    does not exist (final), but for an outage that a resend rides over."""
    c = make_cluster()
    c.create_topic("Orders", queues=4)
    c.namesrvs[0].stop()
    c.namesrvs[0].start()  # same port, no broker registered
    with Producer(namesrv_addr=c.namesrv_addr, group="restart") as p:
        with pytest.raises(SendFailedError) as info:
            p.send(Message("Orders", b"x"))
        assert isinstance(info.value.last_error, NoBrokerRegisteredError), info.value
        assert "knows no broker yet" in str(info.value) and "'Orders'" in str(info.value)
        assert not is_final(info.value)  # the sink resends it until delivery_timeout_ms
        for broker in c.brokers.values():
            broker.register_all()  # what their next 30-second registration does
        assert p.send(Message("Orders", b"y")).status == SendStatus.SEND_OK


def test_a_namesrv_back_from_an_outage_knows_routes_only_as_brokers_register_again(make_cluster) -> None:
    """A NameServer that answers again after an outage this producer saw knows only the brokers that have
    registered since: a topic of a broker not registered yet is an outage for up to a registration period,
    not a missing topic. A producer that never saw the outage has no reason to doubt the same answer."""
    c = make_cluster(auto_create_topic=False)
    c.create_topic("Orders", queues=4, brokers=["broker-b"])
    c.create_topic("Other", queues=4)
    with Producer(namesrv_addr=c.namesrv_addr, group="restart") as p:
        p.fetch_publish_queues("Other")  # a first answer, before the outage
        c.namesrvs[0].stop()
        with pytest.raises(SendFailedError, match="no NameServer"):
            p.send(Message("Orders", b"x"))
        c.namesrvs[0].start()
        c.broker("broker-a").register_all()  # broker-b's registration is still to come
        with pytest.raises(SendFailedError) as info:
            p.send(Message("Orders", b"x"))
        assert isinstance(info.value.last_error, NoBrokerRegisteredError), info.value
        assert "answers again since" in str(info.value) and "'Orders'" in str(info.value)
        assert not is_final(info.value)
        with Producer(namesrv_addr=c.namesrv_addr, group="fresh") as fresh, pytest.raises(TopicNotFoundError):
            fresh.send(Message("Orders", b"x"))
        c.broker("broker-b").register_all()
        assert p.send(Message("Orders", b"y")).status == SendStatus.SEND_OK


def test_a_broker_registering_during_the_lookup_is_found(make_cluster, monkeypatch) -> None:
    """The route lookups and the broker list are separate requests: a broker that registers between them
    (its topics with it) must not turn into a topic that does not exist."""
    c = make_cluster(auto_create_topic=False)
    c.create_topic("Orders", queues=4)
    c.namesrvs[0].stop()
    c.namesrvs[0].start()  # knows no broker
    with Producer(namesrv_addr=c.namesrv_addr, group="race") as p:
        namesrv = p._routes.namesrv
        registered_brokers = namesrv.registered_brokers

        def registers_first() -> list[str]:
            c.broker("broker-a").register_all()  # lands after the route lookups found nothing
            return registered_brokers()

        monkeypatch.setattr(namesrv, "registered_brokers", registers_first)
        assert p.send(Message("Orders", b"x")).queue.broker_name == "broker-a"


def test_brokers_refusing_the_topic_give_topic_not_found(cluster, producer) -> None:
    for b in cluster.brokers.values():
        b.inject(code=ResponseCode.TOPIC_NOT_EXIST)
    with pytest.raises(TopicNotFoundError, match="Orders"):
        producer.send(Message("Orders", b"x"))


def test_namespace_prefixes_topic_and_group_on_the_wire_only(cluster) -> None:
    cluster.create_topic("ns1%Orders", queues=4)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="g", namespace="ns1") as p:
        r = p.send(Message("Orders", b"x"))
        p.send_batch([Message("Orders", b"y")])
    assert r.queue.topic == "Orders"
    reqs = send_requests(cluster)
    assert {(q.ext_fields["a"], q.ext_fields["b"]) for q in reqs} == {("ns1%g", "ns1%Orders")}
    # As DefaultMQProducerImpl: INSTANCE_ID=<namespace> on the message, and on a batch's wrapper.
    single, batch = sorted(reqs, key=lambda q: q.code)
    assert decode_properties(single.ext_fields["i"])["INSTANCE_ID"] == "ns1"
    assert batch.ext_fields["i"] == "WAIT\x01true\x02INSTANCE_ID\x01ns1"


def test_heartbeat_at_first_use_and_unregister_at_close(cluster) -> None:
    brokers = list(cluster.brokers.values())
    with Producer(namesrv_addr=cluster.namesrv_addr, group="hb") as p:
        p.send_batch([Message("Orders", b"x")])
        p.fetch_publish_queues("Orders")
        wait_for(lambda: all(b.received(RequestCode.HEART_BEAT) for b in brokers), what="heartbeats")
        client_id = p.client_id
    for b in brokers:
        heartbeat = b.received(RequestCode.HEART_BEAT)[0].body
        assert b"hb" in heartbeat and b"CLIENT_INNER_PRODUCER" in heartbeat
        unregisters = b.received(RequestCode.UNREGISTER_CLIENT)
        assert sorted(u.ext_fields["producerGroup"] for u in unregisters) == ["CLIENT_INNER_PRODUCER", "hb"]
        assert {u.ext_fields["clientID"] for u in unregisters} == {client_id}


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Message("Orders", b""), "empty"),
        (Message("Orders", b"x" * 2000), "max_message_size"),
        (Message("bad topic", b"x"), "illegal characters"),
        (Message("T" * 128, b"x"), "127"),
        (Message("SCHEDULE_TOPIC_XXXX", b"x"), "system topic"),
        (Message("Orders", b"x", properties={"a\x01": "v"}), "separators"),
        (Message("Orders", b"x", properties={"UNIQ_KEY": "v"}), "reserved"),
        (Message("Orders", b"x", delay_level=19), "delay level"),
        (Message("Orders", b"x", properties={"big": "v" * 40000}), "32767"),
    ],
)
def test_bad_input_is_refused_before_sending(cluster, message, error) -> None:
    with (
        Producer(namesrv_addr=cluster.namesrv_addr, max_message_size=1000) as p,
        pytest.raises(InvalidMessageError, match=error),
    ):
        p.send(message)
    assert send_requests(cluster) == []


def test_bad_batches_are_refused(cluster, producer) -> None:
    with pytest.raises(InvalidMessageError, match="one topic"):
        producer.send_batch([Message("A", b"x"), Message("B", b"x")])
    with pytest.raises(InvalidMessageError, match="delayed"):
        producer.send_batch([Message("A", b"x", delay_level=3)])
    with pytest.raises(InvalidMessageError, match="wait_store_msg_ok"):
        producer.send_batch([Message("A", b"x"), Message("A", b"y", wait_store_msg_ok=False)])
    with pytest.raises(InvalidMessageError, match="no messages"):
        producer.send_batch([])
    with pytest.raises(InvalidMessageError, match="not both"):
        producer.send(Message("A", b"x"), sharding_key="k", queue=producer.fetch_publish_queues("A")[0])
    assert send_requests(cluster) == []


def test_bad_options_and_closed_producer(cluster) -> None:
    with pytest.raises(ConfigError, match="valid options"):
        Producer(namesrv_addr=cluster.namesrv_addr, no_such_option=1)
    p = Producer(namesrv_addr=cluster.namesrv_addr)
    p.close()
    with pytest.raises(Exception, match="closed"):
        p.send(Message("Orders", b"x"))


def test_close_leaves_no_threads_behind(cluster) -> None:
    def ours() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("rocketmq")]

    wait_for(lambda: not ours(), what="threads of earlier producers to end")
    with Producer(namesrv_addr=cluster.namesrv_addr) as p:
        p.send(Message("Orders", b"x"))
        p.send_async(Message("Orders", b"y")).result(timeout=10)
        assert ours()
    wait_for(lambda: not ours(), what="the closed producer's threads to end")


def test_dropped_connection_mid_flight_is_retried_elsewhere(cluster, producer) -> None:
    broker_a = cluster.broker("broker-a")
    broker_a.inject(latency_ms=300, times=1, then=Faults())  # keeps requests in flight on broker-a
    producer.fetch_publish_queues("Orders")
    futures = [producer.send_async(Message("Orders", f"d{i}".encode())) for i in range(40)]
    wait_for(lambda: broker_a.received(RequestCode.SEND_MESSAGE_V2), what="a request on broker-a")
    broker_a.drop_connections()
    results = [f.result(timeout=10) for f in futures]
    stored = {m.uniq_key for m in cluster.messages("Orders")}
    assert all(r.msg_id in stored for r in results)
    assert producer.stats().retries >= 1


def test_close_waits_for_sends_in_flight_including_their_retries(cluster) -> None:
    p = Producer(namesrv_addr=cluster.namesrv_addr, send_latency_fault_enable=False)
    p.fetch_publish_queues("Orders")
    for b in cluster.brokers.values():  # the first send on each broker: 100 ms, then SYSTEM_BUSY
        b.inject(code=ResponseCode.SYSTEM_BUSY, latency_ms=100, times=1, then=Faults())
    futures = [p.send_async(Message("Orders", f"c{i}".encode())) for i in range(4)]
    p.close()
    assert all(f.result(timeout=1).status is SendStatus.SEND_OK for f in futures)
    assert len(cluster.messages("Orders")) == 4


@pytest.mark.parametrize("retry_not_ok", [False, True])
def test_stored_but_not_ok_answers(cluster, retry_not_ok) -> None:
    cluster.broker("broker-a").inject(code=ResponseCode.FLUSH_DISK_TIMEOUT)
    queues_on_a = 4
    with Producer(
        namesrv_addr=cluster.namesrv_addr,
        retry_another_broker_when_not_store_ok=retry_not_ok,
        send_latency_fault_enable=False,
    ) as p:
        results = [p.send(Message("Orders", b"x")) for _ in range(2 * queues_on_a)]
    statuses = {r.status for r in results}
    if retry_not_ok:
        assert statuses == {SendStatus.SEND_OK}  # each FLUSH_DISK_TIMEOUT was sent again to broker-b
        assert len(cluster.messages("Orders")) > len(results)
    else:
        assert SendStatus.FLUSH_DISK_TIMEOUT in statuses
        assert len(cluster.messages("Orders")) == len(results)


def test_send_from_a_callback_does_not_block_the_reader(cluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, max_in_flight=1) as p:
        p.fetch_publish_queues("Orders")
        outcome: list[object] = []
        done = threading.Event()

        def chain(f) -> None:
            try:
                outcome.append(p.send_async(Message("Orders", b"from-callback")))
            except RemotingTooMuchRequestError as exc:
                outcome.append(exc)
            done.set()

        first = p.send_async(Message("Orders", b"first"))
        first.add_done_callback(chain)
        assert done.wait(10)
        assert first.result(timeout=10).status is SendStatus.SEND_OK
        # Either room was already free (the first send had released it) or a clear error, never a hang.
        assert isinstance(outcome[0], RemotingTooMuchRequestError) or outcome[0].result(timeout=10)


def test_queue_of_another_topic_is_refused(cluster, producer) -> None:
    other = producer.fetch_publish_queues("Other")[0]
    with pytest.raises(InvalidMessageError, match="belongs to topic 'Other'"):
        producer.send(Message("Orders", b"x"), queue=other)


def test_a_stored_answer_wins_over_a_later_failure(make_cluster) -> None:
    """sendDefaultImpl returns the FLUSH_DISK_TIMEOUT result an earlier attempt stored when a later
    attempt (retry_another_broker_when_not_store_ok) is refused."""
    c = make_cluster(brokers=1)
    c.create_topic("Orders", queues=4)
    broker = c.broker("broker-a")
    broker.inject(code=ResponseCode.FLUSH_DISK_TIMEOUT, times=1, then=Faults(code=ResponseCode.MESSAGE_ILLEGAL))
    with Producer(namesrv_addr=c.namesrv_addr, retry_another_broker_when_not_store_ok=True) as p:
        result = p.send(Message("Orders", b"stored once"))
        assert result.status is SendStatus.FLUSH_DISK_TIMEOUT
        assert p.stats().retries == 1
    assert [m.body for m in c.messages("Orders")] == [b"stored once"]
