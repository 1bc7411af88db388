"""The producer's send paths against a real RocketMQ, each topic read back by the kit's Java consumer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spark_rocketmq import Message, Producer, SendStatus

from .kit import Kit
from .readback import assert_each_body_once, sha256

GROUP = "spark_rocketmq_real_tier"


@pytest.fixture(scope="module")
def producer(real_addr: str) -> Iterator[Producer]:
    with Producer(namesrv_addr=real_addr, group=GROUP) as p:
        yield p


def by_uniq(stored: list[dict]) -> dict[str, dict]:
    return {m["uniq"]: m for m in stored}


def test_sync_send_stores_fields_and_ids(producer: Producer, kit: Kit, real_topic: str) -> None:
    r = producer.send(Message(real_topic, b"real-sync", tags="TagA", keys=["k1", "k2"], properties={"p": "v"}))
    assert r.status is SendStatus.SEND_OK and r.queue.topic == real_topic and r.queue_offset >= 0
    (m,) = kit.dump(real_topic, at_least=1)
    assert (m["uniq"], m["tags"], m["keys"]) == (r.msg_id, "TagA", "k1 k2")
    # offset_msg_id is the broker's id: its store address (IPv4, port) and the message's commit-log offset
    assert r.offset_msg_id[:16] == f"7F000001{kit.broker_port(r.queue.broker_name[-1]):08X}"
    assert (m["broker"], m["queue"], m["offset"]) == (r.queue.broker_name, r.queue.queue_id, r.queue_offset)
    assert m["props"]["p"] == "v" and m["props"]["KEYS"] == "k1 k2" and m["props"]["TAGS"] == "TagA"
    assert m["bodySha256"] == sha256(b"real-sync") and m["sysFlag"] == 0


def test_compressed_body_reads_back_whole(producer: Producer, kit: Kit, real_topic: str) -> None:
    body = bytes(i % 251 for i in range(10_000))
    r = producer.send(Message(real_topic, body))
    (m,) = kit.dump(real_topic, at_least=1)
    # MessageSysFlag: zlib in the compression-type bits; a 5.x consumer clears COMPRESSED_FLAG once it inflated
    assert m["uniq"] == r.msg_id and m["sysFlag"] & 0x700 == 0x300
    assert (m["bodyLen"], m["bodySha256"]) == (len(body), sha256(body))  # the consumer inflates it


def test_async_sends_each_stored_once(producer: Producer, kit: Kit, real_topic: str) -> None:
    bodies = [f"real-async-{i}".encode() for i in range(200)]
    results = [f.result(timeout=30) for f in [producer.send_async(Message(real_topic, b)) for b in bodies]]
    stored = kit.dump(real_topic, at_least=len(bodies))
    assert_each_body_once(stored, bodies)
    assert {m["uniq"] for m in stored} == {r.msg_id for r in results}


def test_batch_split_into_requests_under_the_size_limit(real_addr: str, kit: Kit, real_topic: str) -> None:
    bodies = [f"real-batch-{i:05d}".encode() * 60 for i in range(2000)]  # ~1.2 MB: several 256 KiB requests
    with Producer(namesrv_addr=real_addr, group=GROUP, max_message_size=256 * 1024) as p:
        results = p.send_batch([Message(real_topic, b, keys=f"b{i}", tags="batch") for i, b in enumerate(bodies)])
    assert len(results) >= 5 and sum(r.count for r in results) == len(bodies)
    stored = kit.dump(real_topic, at_least=len(bodies))
    assert_each_body_once(stored, bodies)
    assert {m["uniq"] for m in stored} == {uniq for r in results for uniq in r.msg_id.split(",")}
    keys = {m["bodySha256"]: m["keys"] for m in stored}
    assert all(keys[sha256(b)] == f"b{i}" for i, b in enumerate(bodies))
    assert {m["tags"] for m in stored} == {"batch"}


def test_sharding_key_keeps_one_queue_in_send_order(producer: Producer, kit: Kit, real_topic: str) -> None:
    kit.topic(real_topic)  # a route of its own from the first send: the key's queue never moves
    results = [producer.send(Message(real_topic, f"{i:03d}".encode()), sharding_key="user-42") for i in range(20)]
    assert len({r.queue for r in results}) == 1
    stored = sorted(kit.dump(real_topic, at_least=20), key=lambda m: m["offset"])
    assert [m["bodySha256"] for m in stored] == [sha256(f"{i:03d}") for i in range(20)]
    assert len({(m["broker"], m["queue"]) for m in stored}) == 1


def test_oneway_is_stored(producer: Producer, kit: Kit, real_topic: str) -> None:
    producer.send_oneway(Message(real_topic, b"real-oneway"))
    (m,) = kit.dump(real_topic, at_least=1)
    assert m["bodySha256"] == sha256(b"real-oneway")


def test_delay_level_is_held_then_delivered(producer: Producer, kit: Kit, real_topic: str) -> None:
    r = producer.send(Message(real_topic, b"real-delayed", delay_level=2))  # level 2: 5 s
    (m,) = kit.dump(real_topic, at_least=1)
    assert m["uniq"] == r.msg_id and m["delay"] == 2
    assert m["storeTimestamp"] - m["bornTimestamp"] >= 4000  # stored again in the topic once due


def test_auto_batch_gives_each_message_its_own_result(real_addr: str, kit: Kit, real_topic: str) -> None:
    bodies = [f"real-auto-{i:04d}".encode() * 8 for i in range(300)]
    with Producer(namesrv_addr=real_addr, group=GROUP, auto_batch=True, batch_max_bytes=2000) as p:
        results = [f.result(timeout=30) for f in [p.send_async(Message(real_topic, b)) for b in bodies]]
    assert all(r.status is SendStatus.SEND_OK and r.count == 1 for r in results)
    stored = kit.dump(real_topic, at_least=len(bodies))
    assert_each_body_once(stored, bodies)
    assert {m["uniq"] for m in stored} == {r.msg_id for r in results}
    assert len({r.offset_msg_id for r in results}) == len(bodies)  # one commit-log offset each


def test_auto_batch_keeps_a_keys_messages_on_its_queue_in_order(real_addr: str, kit: Kit, real_topic: str) -> None:
    kit.topic(real_topic)
    with Producer(namesrv_addr=real_addr, group=GROUP, auto_batch=True) as p:
        futures = [
            p.send_async(Message(real_topic, f"real-keyed-{i:03d}".encode()), sharding_key="key-7") for i in range(60)
        ]
        results = [f.result(timeout=30) for f in futures]
    assert len({r.queue for r in results}) == 1
    stored = sorted(kit.dump(real_topic, at_least=60), key=lambda m: m["offset"])
    assert [m["bodySha256"] for m in stored] == [sha256(f"real-keyed-{i:03d}") for i in range(60)]


def test_send_without_a_kit(real_addr: str) -> None:
    """The one check that needs no kit: a send to the cluster named by ROCKETMQ_NAMESRV_ADDR is stored."""
    with Producer(namesrv_addr=real_addr, group=GROUP) as p:
        r = p.send(Message("SparkRocketMQRealTier", b"hello"))
    assert r.status is SendStatus.SEND_OK and len(r.msg_id) == 32
