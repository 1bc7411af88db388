"""PullConsumer against a real RocketMQ: what it pulls is what the kit's Java consumer reads (`rmq dump`), its
queue offsets, statuses, tag filter, held pulls and consumer offsets, and the brokers' refusals; with a 5.x kit,
the same through the RocketMQ Proxy (`rmq start proxy`) as the NameServer address."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.client.consumer_config import ConsumerConfig
from spark_rocketmq.client.pull_consumer import PullConsumer, PullStatus
from spark_rocketmq.errors import ClusterConfigError, InvalidSubscriptionError, TopicNotFoundError
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.protocol.stored import StoredMessage, decode_stored_messages

from .kit import Kit
from .readback import sha256

GROUP = "spark_rocketmq_real_tier"


def produce(namesrv_addr: str, topic: str, count: int) -> list[bytes]:
    """``count`` messages, tags TagA and TagB in turn, round-robin over the topic's queues."""
    bodies = [f"pull-{topic}-{i}".encode() for i in range(count)]
    with Producer(namesrv_addr=namesrv_addr, group=GROUP) as producer:
        for i, body in enumerate(bodies):
            producer.send(Message(topic, body, tags="TagA" if i % 2 == 0 else "TagB"))
    return bodies


def pull_all(consumer: PullConsumer, mq: MessageQueue, **kw: Any) -> list[StoredMessage]:
    """Every message of the queue, from its min offset to its max, 8 a pull."""
    out: list[StoredMessage] = []
    offset = consumer.min_offset(mq)
    while True:
        result = consumer.pull(mq, offset, 8, **kw)
        if result.status is PullStatus.FOUND:
            out.extend(decode_stored_messages(result.body))
        elif result.status is not PullStatus.NO_MATCHED_MSG:
            return out
        offset = result.next_begin_offset


def assert_reads_as_dump(consumer: PullConsumer, kit: Kit, topic: str, count: int) -> None:
    stored = kit.dump(topic, at_least=count)
    assert len(stored) == count
    queues = consumer.fetch_subscribe_queues(topic)
    assert {(m["broker"], m["queue"]) for m in stored} <= {(q.broker_name, q.queue_id) for q in queues}
    pulled = {
        (q.broker_name, q.queue_id, m.queue_offset): (m.uniq_key, sha256(m.body), m.tags)
        for q in queues
        for m in pull_all(consumer, q)
    }
    dumped = {(m["broker"], m["queue"], m["offset"]): (m["uniq"], m["bodySha256"], m["tags"]) for m in stored}
    assert pulled == dumped
    for q in queues:
        assert consumer.max_offset(q) == sum(
            1 for m in stored if (m["broker"], m["queue"]) == (q.broker_name, q.queue_id)
        )


@pytest.fixture(scope="module")
def consumer(real_addr: str) -> Iterator[PullConsumer]:
    with PullConsumer(ConsumerConfig(namesrv_addr=real_addr, group=GROUP)) as c:
        yield c


@pytest.fixture
def filled_topic(real_addr: str, kit: Kit, real_topic: str) -> str:
    """real_topic with 2 queues on each broker and 20 messages."""
    kit.topic(real_topic, queues=2)
    produce(real_addr, real_topic, 20)
    return real_topic


def test_pulls_read_what_the_java_consumer_reads(consumer: PullConsumer, kit: Kit, filled_topic: str) -> None:
    assert_reads_as_dump(consumer, kit, filled_topic, 20)


def test_statuses_at_and_past_the_queue_end(consumer: PullConsumer, kit: Kit, filled_topic: str) -> None:
    kit.dump(filled_topic, at_least=20)
    for mq in consumer.fetch_subscribe_queues(filled_topic):
        high = consumer.max_offset(mq)
        assert consumer.min_offset(mq) == 0
        at_end = consumer.pull(mq, high, 8)  # PULL_NOT_FOUND (19), remark OFFSET_OVERFLOW_ONE / NO_MESSAGE_IN_QUEUE
        assert (at_end.status, at_end.next_begin_offset, at_end.max_offset) == (PullStatus.NO_NEW_MSG, high, high)
        past = consumer.pull(mq, high + 10, 8)  # PULL_OFFSET_MOVED (21), OFFSET_OVERFLOW_BADLY
        assert (past.status, past.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, high)
        if high:
            unmatched = consumer.pull(mq, 0, 32, expression="TagZ")  # PULL_RETRY_IMMEDIATELY (20)
            assert (unmatched.status, unmatched.next_begin_offset) == (PullStatus.NO_MATCHED_MSG, high)


def test_tag_filter_on_the_broker(consumer: PullConsumer, kit: Kit, filled_topic: str) -> None:
    stored = kit.dump(filled_topic, at_least=20)
    tagged = []
    for mq in consumer.fetch_subscribe_queues(filled_topic):
        tagged.extend(m.uniq_key for m in pull_all(consumer, mq, expression="TagA || TagC"))
    assert sorted(tagged) == sorted(m["uniq"] for m in stored if m["tags"] == "TagA")


def test_search_offset_by_store_time(consumer: PullConsumer, kit: Kit, filled_topic: str) -> None:
    stored = kit.dump(filled_topic, at_least=20)
    for mq in consumer.fetch_subscribe_queues(filled_topic):
        mine = sorted((m for m in stored if (m["broker"], m["queue"]) == (mq.broker_name, mq.queue_id)),
                      key=lambda m: m["offset"])  # fmt: skip
        if not mine:
            continue
        high = consumer.max_offset(mq)
        assert consumer.search_offset(mq, mine[0]["storeTimestamp"] - 60_000) == 0
        # past the last message: the max offset (4.9.8 answers the last message's offset, which is mended)
        assert consumer.search_offset(mq, mine[-1]["storeTimestamp"] + 60_000) == high
        times = [m["storeTimestamp"] for m in mine]
        for t in sorted(set(times)):  # each store time's first message, however many share its millisecond
            assert consumer.search_offset(mq, t) == times.index(t)


def test_held_pull_answers_a_new_message(real_addr: str, consumer: PullConsumer, kit: Kit, real_topic: str) -> None:
    kit.topic(real_topic, queues=1, brokers=("a",))
    mq = MessageQueue(real_topic, "broker-a", 0)
    results: list[Any] = []
    started = time.monotonic()
    puller = threading.Thread(target=lambda: results.append(consumer.pull(mq, 0, 8, suspend_ms=20_000)))
    puller.start()
    produce(real_addr, real_topic, 1)  # held or not yet arrived, the pull finds it
    puller.join(35)
    assert results and results[0].status is PullStatus.FOUND and len(decode_stored_messages(results[0].body)) == 1
    assert time.monotonic() - started < 20


def test_held_pull_of_an_empty_queue_ends_in_time(consumer: PullConsumer, kit: Kit, real_topic: str) -> None:
    kit.topic(real_topic, queues=1, brokers=("a",))
    started = time.monotonic()
    result = consumer.pull(MessageQueue(real_topic, "broker-a", 0), 0, 8, suspend_ms=1000)
    # the brokers' PullRequestHoldService looks at held pulls every 5 s: answered 1 to 6 s later
    assert result.status is PullStatus.NO_NEW_MSG and time.monotonic() - started < 1 + 5 + 3


def test_consumer_offsets_round_trip(consumer: PullConsumer, kit: Kit, filled_topic: str) -> None:
    mq = consumer.fetch_subscribe_queues(filled_topic)[0]
    group = f"{GROUP}_{filled_topic[-8:]}"
    # no offset: 5.3.3 answers QUERY_NOT_FOUND (22) to setZeroIfNotFound=false; 4.9.8 SUCCESS 0 for a queue whose
    # offset 0 is still in memory
    assert consumer.query_consumer_offset(group, mq) == (0 if kit.major == 4 else None)
    # 5.3.3 answers SUBSCRIPTION_GROUP_NOT_EXIST (26, "Group G not exist!") to a group it never saw: the consumer
    # pulls once as the group (the broker creates it) and updates again
    consumer.update_consumer_offset(group, mq, 3)
    assert consumer.query_consumer_offset(group, mq) == 3
    consumer.update_consumer_offset(group, mq, 2)
    assert consumer.query_consumer_offset(group, mq) == 2


def test_refusals_name_the_fix(consumer: PullConsumer, kit: Kit, filled_topic: str) -> None:
    mq = consumer.fetch_subscribe_queues(filled_topic)[0]
    with pytest.raises(ClusterConfigError) as sql:  # SYSTEM_ERROR (1): "does not support ... by SQL92"
        consumer.pull(mq, 0, 8, expression="a > 1", expression_type="SQL92")
    assert "enablePropertyFilter" in str(sql.value) and mq.broker_name in str(sql.value)
    with pytest.raises(InvalidSubscriptionError):  # SUBSCRIPTION_PARSE_FAILED (23)
        consumer.pull(mq, 0, 8, expression="||")
    with pytest.raises(TopicNotFoundError) as missing:
        consumer.fetch_subscribe_queues(f"{filled_topic}_none")
    assert f"{filled_topic}_none" in str(missing.value)


# -- through the 5.x Proxy ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def proxy_consumer(proxy_addr: str) -> Iterator[PullConsumer]:
    with PullConsumer(ConsumerConfig(namesrv_addr=proxy_addr, group=GROUP)) as c:
        yield c


def test_proxy_pulls_read_what_the_java_consumer_reads(
    proxy_consumer: PullConsumer, proxy_addr: str, kit: Kit, filled_topic: str
) -> None:
    # the Proxy routes each request by its bname: every brokerName has the Proxy's address
    assert_reads_as_dump(proxy_consumer, kit, filled_topic, 20)
    mq = proxy_consumer.fetch_subscribe_queues(filled_topic)[-1]
    assert proxy_consumer.pull(mq, 0, 1).broker_addr == proxy_addr


def test_proxy_offsets_search_and_consumer_offsets(proxy_consumer: PullConsumer, kit: Kit, filled_topic: str) -> None:
    stored = kit.dump(filled_topic, at_least=20)
    for mq in proxy_consumer.fetch_subscribe_queues(filled_topic):
        mine = [m for m in stored if (m["broker"], m["queue"]) == (mq.broker_name, mq.queue_id)]
        high = proxy_consumer.max_offset(mq)
        assert (proxy_consumer.min_offset(mq), high) == (0, len(mine))
        if mine:
            assert proxy_consumer.search_offset(mq, min(m["storeTimestamp"] for m in mine) - 60_000) == 0
            assert proxy_consumer.search_offset(mq, max(m["storeTimestamp"] for m in mine) + 60_000) == high
    mq = proxy_consumer.fetch_subscribe_queues(filled_topic)[0]
    group = f"{GROUP}_proxy_{filled_topic[-8:]}"
    assert proxy_consumer.query_consumer_offset(group, mq) is None
    proxy_consumer.update_consumer_offset(group, mq, 4)
    assert proxy_consumer.query_consumer_offset(group, mq) == 4
