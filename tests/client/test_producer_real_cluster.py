"""The essential checks against a real Apache RocketMQ cluster, when one is named.

    ROCKETMQ_NAMESRV_ADDR=127.0.0.1:9876 [ROCKETMQ_TEST_TOPIC=PyClientTest] \\
        .venv/bin/pytest tests/client/test_producer_real_cluster.py

The topic must exist, or the brokers must have autoCreateTopicEnable=true.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from spark_rocketmq import Message, Producer, SendStatus

ADDR = os.environ.get("ROCKETMQ_NAMESRV_ADDR")
TOPIC = os.environ.get("ROCKETMQ_TEST_TOPIC", "SparkRocketMQClientTest")

pytestmark = pytest.mark.skipif(
    not ADDR, reason="set ROCKETMQ_NAMESRV_ADDR=host:port to run these against a real RocketMQ cluster"
)


@pytest.fixture(scope="module")
def producer() -> Iterator[Producer]:
    with Producer(namesrv_addr=ADDR, group="spark_rocketmq_client_test") as p:
        yield p


def test_sync_send(producer: Producer) -> None:
    r = producer.send(Message(TOPIC, b"real-sync", tags="T", keys=["k1"], properties={"p": "v"}))
    assert r.status is SendStatus.SEND_OK and len(r.msg_id) == 32 and len(r.offset_msg_id) == 32
    assert r.queue.topic == TOPIC and r.queue_offset >= 0


def test_compressed_send(producer: Producer) -> None:
    assert producer.send(Message(TOPIC, bytes(i % 251 for i in range(10_000)))).status is SendStatus.SEND_OK


def test_async_sends(producer: Producer) -> None:
    futures = [producer.send_async(Message(TOPIC, f"real-async-{i}".encode())) for i in range(50)]
    assert all(f.result(timeout=30).status is SendStatus.SEND_OK for f in futures)


def test_batch(producer: Producer) -> None:
    results = producer.send_batch([Message(TOPIC, f"real-batch-{i}".encode(), keys=f"b{i}") for i in range(100)])
    assert sum(r.count for r in results) == 100
    assert all(len(r.offset_msg_id.split(",")) == r.count for r in results)


def test_sharding_key(producer: Producer) -> None:
    results = [producer.send(Message(TOPIC, f"{i}".encode()), sharding_key="user-42") for i in range(10)]
    assert len({r.queue for r in results}) == 1
    offsets = [r.queue_offset for r in results]
    assert offsets == sorted(offsets)


def test_oneway(producer: Producer) -> None:
    producer.send_oneway(Message(TOPIC, b"real-oneway"))


def test_auto_batch_gives_each_message_its_own_result() -> None:
    with Producer(namesrv_addr=ADDR, group="spark_rocketmq_client_test", auto_batch=True, batch_max_bytes=2000) as p:
        futures = [p.send_async(Message(TOPIC, f"real-auto-{i:04d}".encode() * 8)) for i in range(300)]
        results = [f.result(timeout=30) for f in futures]
    assert all(r.status is SendStatus.SEND_OK and r.count == 1 for r in results)
    assert len({r.msg_id for r in results}) == 300
    assert len({r.offset_msg_id for r in results}) == 300  # one commit-log offset each
    by_queue: dict[object, list[int]] = {}
    for r in results:
        by_queue.setdefault(r.queue, []).append(r.queue_offset)
    assert all(len(set(offsets)) == len(offsets) for offsets in by_queue.values())


def test_auto_batch_keeps_a_keys_messages_on_its_queue_in_order() -> None:
    with Producer(namesrv_addr=ADDR, group="spark_rocketmq_client_test", auto_batch=True) as p:
        futures = [
            p.send_async(Message(TOPIC, f"real-keyed-{i:03d}".encode()), sharding_key="key-7") for i in range(60)
        ]
        results = [f.result(timeout=30) for f in futures]
    assert len({r.queue for r in results}) == 1
    offsets = [r.queue_offset for r in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == 60  # stored in send order
