"""PullConsumer against the project's local NameServer + brokers (spark_rocketmq.local), as 4.9.8 and 5.3.3
answer: queues, queue offsets, pulls (found, nothing new, offset moved, filtered by tag, held), consumer
offsets, namespace, replicas and route changes, and the errors' text. Fixtures: tests/conftest.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.client.consumer_config import ConsumerConfig
from spark_rocketmq.client.offset_by_time import first_at_or_after
from spark_rocketmq.client.pull_consumer import PullConsumer, PullStatus
from spark_rocketmq.errors import (
    BrokerError,
    ClusterConfigError,
    ConfigError,
    InvalidPullError,
    InvalidSubscriptionError,
    RemotingError,
    RemotingTimeoutError,
    TopicNotFoundError,
)
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.codes import Perm, RequestCode
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.protocol.stored import decode_stored_messages

TOPIC = "Orders"


@pytest.fixture(params=["4.9.8", "5.3.3"])
def cluster(request: pytest.FixtureRequest, make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    """broker-a and broker-b answering as one RocketMQ version, topic Orders with 2 queues on each."""
    c = make_cluster(request_log=500, rocketmq_version=request.param)
    c.create_topic(TOPIC, queues=2)
    return c


@pytest.fixture
def consumer(cluster: LocalCluster) -> Iterator[PullConsumer]:
    with PullConsumer(ConsumerConfig(namesrv_addr=cluster.namesrv_addr)) as c:
        yield c


def produce(cluster: LocalCluster, topic: str, count: int, **config: Any) -> list[Message]:
    """``count`` messages, tags TagA and TagB in turn, sent round-robin over the topic's queues."""
    messages = [Message(topic, f"m{i}".encode(), tags="TagA" if i % 2 == 0 else "TagB") for i in range(count)]
    with Producer(namesrv_addr=cluster.namesrv_addr, **config) as producer:
        for message in messages:
            producer.send(message)
    return messages


def queue_a0(topic: str = TOPIC) -> MessageQueue:
    return MessageQueue(topic, "broker-a", 0)


def pulled_bodies(result: Any) -> list[bytes]:
    return [m.body for m in decode_stored_messages(result.body)]


# -- queues and offsets ----------------------------------------------------------------------------------
def test_fetch_subscribe_queues_lists_read_queues_of_each_broker(consumer: PullConsumer) -> None:
    queues = consumer.fetch_subscribe_queues(TOPIC)
    assert queues == [MessageQueue(TOPIC, b, q) for b in ("broker-a", "broker-b") for q in range(2)]


def test_fetch_subscribe_queues_leaves_out_unreadable_brokers(cluster: LocalCluster, consumer: PullConsumer) -> None:
    cluster.create_topic("WriteOnlyOnB", queues=3, brokers=["broker-b"], perm=Perm.WRITE)
    cluster.create_topic("WriteOnlyOnB", queues=2, brokers=["broker-a"])
    assert consumer.fetch_subscribe_queues("WriteOnlyOnB") == [
        MessageQueue("WriteOnlyOnB", "broker-a", q) for q in (0, 1)
    ]


def test_unknown_topic_names_topic_and_namesrv(cluster: LocalCluster, consumer: PullConsumer) -> None:
    with pytest.raises(TopicNotFoundError) as err:
        consumer.fetch_subscribe_queues("NoSuchTopic")
    assert "'NoSuchTopic'" in str(err.value) and cluster.namesrv_addr in str(err.value)


def test_min_and_max_offsets_follow_sends_and_retention(cluster: LocalCluster, consumer: PullConsumer) -> None:
    produce(cluster, TOPIC, 12)
    queues = consumer.fetch_subscribe_queues(TOPIC)
    maxima = {mq: consumer.max_offset(mq) for mq in queues}
    assert sum(maxima.values()) == 12
    assert all(consumer.min_offset(mq) == 0 for mq in queues)
    cluster.broker("broker-a").delete_before(TOPIC, 0, 2)
    assert consumer.min_offset(queue_a0()) == 2
    moved = consumer.pull(queue_a0(), 0, 8)
    assert moved.status is PullStatus.OFFSET_ILLEGAL
    assert (moved.next_begin_offset, moved.min_offset) == (2, 2)


def test_search_offset_by_timestamp(cluster: LocalCluster, consumer: PullConsumer) -> None:
    before = int(time.time() * 1000) - 60_000
    produce(cluster, TOPIC, 8)
    assert consumer.search_offset(queue_a0(), before) == 0
    # past the last message: the max offset (a 4.9.8 broker answers the last message's offset, mended)
    assert consumer.search_offset(queue_a0(), int(time.time() * 1000) + 60_000) == consumer.max_offset(queue_a0())
    times = [m.store_timestamp for m in decode_stored_messages(consumer.pull(queue_a0(), 0, 32).body)]
    for t in sorted(set(times)):  # each store time's first message, however many share its millisecond
        assert consumer.search_offset(queue_a0(), t) == times.index(t)
        assert consumer.search_offset(queue_a0(), t + 1) == next((i for i, u in enumerate(times) if u > t), len(times))


def test_the_first_offset_at_or_after_a_time_from_each_broker_answer() -> None:
    """A 4.9.8 broker's answer is any message of the time's millisecond, or the closer neighbour when none has it:
    the offset read from is the first message stored at or after the time whichever it was."""
    times = [100, 105, 105, 105, 105, 107, 110] + [110] * 40 + [120]  # offset i stored at times[i]

    def store_times(start: int, end: int) -> list[tuple[int, int]]:
        return [(o, times[o]) for o in range(max(start, 1), min(end, len(times)))]  # offset 0 gone (retention)

    for answer in (1, 2, 4):  # any of the 105s
        assert first_at_or_after(answer, 105, 1, store_times) == 1
    assert first_at_or_after(4, 106, 1, store_times) == 5  # the closer neighbour, stored before the time
    assert first_at_or_after(5, 106, 1, store_times) == 5
    assert first_at_or_after(46, 110, 1, store_times) == 6  # back over more than a window of one millisecond
    assert first_at_or_after(47, 121, 1, store_times) == 48  # past the last message: the max offset
    assert first_at_or_after(1, 50, 1, store_times) == 1  # before the first stored one


# -- pulls --------------------------------------------------------------------------------------------------
def test_pull_found_then_no_new_then_offset_moved(cluster: LocalCluster, consumer: PullConsumer) -> None:
    sent = produce(cluster, TOPIC, 8)
    mq = queue_a0()
    high = consumer.max_offset(mq)
    found = consumer.pull(mq, 0, 32)
    assert found.status is PullStatus.FOUND
    assert (found.next_begin_offset, found.min_offset, found.max_offset) == (high, 0, high)
    assert found.broker_addr == cluster.broker("broker-a").addr and found.suggest_which_broker_id == 0
    stored = {m.queue_offset: m.body for m in cluster.broker("broker-a").messages(TOPIC) if m.queue_id == 0}
    assert pulled_bodies(found) == [stored[i] for i in range(high)]
    assert set(pulled_bodies(found)) <= {m.body for m in sent}
    nothing = consumer.pull(mq, high, 32)
    assert (nothing.status, nothing.next_begin_offset, nothing.body) == (PullStatus.NO_NEW_MSG, high, b"")
    beyond = consumer.pull(mq, high + 10, 32)
    assert beyond.status is PullStatus.OFFSET_ILLEGAL and beyond.next_begin_offset == high


def test_pull_of_empty_queue_at_zero_is_no_new_msg(consumer: PullConsumer) -> None:
    result = consumer.pull(queue_a0(), 0, 32)
    assert (result.status, result.next_begin_offset, result.max_offset) == (PullStatus.NO_NEW_MSG, 0, 0)


def test_pull_is_filtered_by_tag_on_the_broker(cluster: LocalCluster, consumer: PullConsumer) -> None:
    produce(cluster, TOPIC, 16)
    for mq in consumer.fetch_subscribe_queues(TOPIC):
        tags = {
            m.queue_offset: m.tags for m in cluster.broker(mq.broker_name).messages(TOPIC) if m.queue_id == mq.queue_id
        }
        result = consumer.pull(mq, 0, 32, expression="TagA")
        wanted = [o for o in sorted(tags) if tags[o] == "TagA"]
        if wanted:
            assert result.status is PullStatus.FOUND
            assert [m.queue_offset for m in decode_stored_messages(result.body)] == wanted
        else:
            assert result.status is PullStatus.NO_MATCHED_MSG
            assert result.next_begin_offset == len(tags)
        none = consumer.pull(mq, 0, 32, expression="TagZ || TagY")
        assert none.status is PullStatus.NO_MATCHED_MSG and none.next_begin_offset == len(tags)


def test_pull_sends_subscription_flag_group_and_bname(cluster: LocalCluster, consumer: PullConsumer) -> None:
    consumer.pull(queue_a0(), 0, 4, expression="TagA")
    request = cluster.broker("broker-a").received(RequestCode.PULL_MESSAGE)[-1]
    fields = request.fields() or {}
    assert fields["sysFlag"] == "4"  # PullSysFlag.SUBSCRIPTION alone: no commit, no suspend
    assert (fields["consumerGroup"], fields["subscription"], fields["expressionType"]) == (
        "spark_rocketmq_reader",
        "TagA",
        "TAG",
    )
    assert (fields["bname"], fields["suspendTimeoutMillis"], fields["commitOffset"]) == ("broker-a", "0", "0")


def test_held_pull_answers_when_a_message_arrives(cluster: LocalCluster, consumer: PullConsumer) -> None:
    mq = queue_a0()
    broker = cluster.broker("broker-a")
    seen = len(broker.received(RequestCode.PULL_MESSAGE))
    results: list[Any] = []
    started = time.monotonic()
    puller = threading.Thread(target=lambda: results.append(consumer.pull(mq, 0, 8, suspend_ms=20_000)))
    puller.start()
    deadline = time.monotonic() + 10
    while len(broker.received(RequestCode.PULL_MESSAGE)) == seen and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the broker's request log, not a synchronisation by time
    held = broker.received(RequestCode.PULL_MESSAGE)[-1].fields() or {}
    assert (held["sysFlag"], held["suspendTimeoutMillis"]) == ("6", "20000")
    with Producer(namesrv_addr=cluster.namesrv_addr) as producer:
        producer.send(Message(TOPIC, b"late"), queue=mq)
    puller.join(15)
    assert results and results[0].status is PullStatus.FOUND and pulled_bodies(results[0]) == [b"late"]
    assert time.monotonic() - started < 15


# -- consumer offsets ------------------------------------------------------------------------------------
def test_consumer_offsets_round_trip(cluster: LocalCluster, consumer: PullConsumer) -> None:
    produce(cluster, TOPIC, 8)
    mq = queue_a0()
    before = consumer.query_consumer_offset("readers-1", mq)
    # a group without an offset: 5.x answers QUERY_NOT_FOUND (setZeroIfNotFound=false); 4.9.8 answers 0 while
    # the queue still starts at offset 0
    assert before == (0 if cluster.broker("broker-a").rocketmq_version.startswith("4.") else None)
    consumer.update_consumer_offset("readers-1", mq, 3)
    assert consumer.query_consumer_offset("readers-1", mq) == 3
    consumer.update_consumer_offset("readers-1", mq, 1)
    assert consumer.query_consumer_offset("readers-1", mq) == 1
    assert consumer.query_consumer_offset("readers-1", MessageQueue(TOPIC, "broker-b", 0)) in (0, None)


def test_query_of_a_group_without_offset_on_a_trimmed_queue_is_none(
    cluster: LocalCluster, consumer: PullConsumer
) -> None:
    produce(cluster, TOPIC, 8)
    cluster.broker("broker-a").delete_before(TOPIC, 0, 1)
    assert consumer.query_consumer_offset("nobody", queue_a0()) is None


def test_update_of_a_group_a_5x_broker_never_saw(cluster: LocalCluster, consumer: PullConsumer) -> None:
    mq = queue_a0()
    consumer.update_consumer_offset("fresh-group", mq, 0)
    assert consumer.query_consumer_offset("fresh-group", mq) == 0
    updates = cluster.broker("broker-a").received(RequestCode.UPDATE_CONSUMER_OFFSET)
    # 5.x refuses the first (SUBSCRIPTION_GROUP_NOT_EXIST); a pull of the group creates it, the second is taken
    assert len(updates) == (1 if cluster.broker("broker-a").rocketmq_version.startswith("4.") else 2)


# -- namespace ---------------------------------------------------------------------------------------------
def test_namespace_wraps_topic_and_group_on_the_wire(cluster: LocalCluster) -> None:
    cluster.create_topic("ns1%Events", queues=1)
    produce(cluster, "Events", 3, namespace="ns1")
    config = ConsumerConfig(namesrv_addr=cluster.namesrv_addr, namespace="ns1", group="readers")
    with PullConsumer(config) as consumer:
        queues = consumer.fetch_subscribe_queues("Events")
        assert queues == [MessageQueue("Events", "broker-a", 0), MessageQueue("Events", "broker-b", 0)]
        assert sum(consumer.max_offset(mq) for mq in queues) == 3
        found = consumer.pull(queues[0], 0, 8)
        assert {m.topic for m in decode_stored_messages(found.body)} <= {"ns1%Events"}
        consumer.update_consumer_offset("readers", queues[0], 1)
        assert consumer.query_consumer_offset("readers", queues[0]) == 1
    fields = cluster.broker("broker-a").received(RequestCode.PULL_MESSAGE)[-1].fields() or {}
    assert (fields["topic"], fields["consumerGroup"]) == ("ns1%Events", "ns1%readers")
    update = cluster.broker("broker-a").received(RequestCode.UPDATE_CONSUMER_OFFSET)[-1].fields() or {}
    assert (update["topic"], update["consumerGroup"]) == ("ns1%Events", "ns1%readers")


# -- replicas and route changes -------------------------------------------------------------------------
def test_pulls_follow_a_failed_over_master(cluster: LocalCluster, consumer: PullConsumer) -> None:
    produce(cluster, TOPIC, 4)
    mq = queue_a0()
    assert consumer.pull(mq, 0, 8).status is PullStatus.FOUND
    old = cluster.broker("broker-a").addr
    new = cluster.fail_over("broker-a")
    deadline = time.monotonic() + 10
    while True:
        try:
            result = consumer.pull(mq, 0, 8)
            break
        except RemotingError:
            assert time.monotonic() < deadline, "the pull never reached the new master"
            time.sleep(0.1)  # the route is asked for again at most every 0.5 s
    assert result.broker_addr == new.addr != old and result.status is PullStatus.FOUND


def test_a_replica_serves_when_the_master_is_gone(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(request_log=100)
    cluster.create_topic(TOPIC, queues=1)
    slave = cluster.add_slave("broker-a")
    with PullConsumer(ConsumerConfig(namesrv_addr=cluster.namesrv_addr)) as consumer:
        mq = queue_a0()
        assert consumer.pull(mq, 0, 8).broker_addr == cluster.broker("broker-a").addr
        cluster.broker("broker-a").stop()  # unregisters: the route keeps brokerId 1 only
        deadline = time.monotonic() + 10
        while True:
            try:
                result = consumer.pull(mq, 0, 8)
                if result.broker_addr == slave.addr:
                    break
            except RemotingError:
                pass
            assert time.monotonic() < deadline, "the pull never reached the replica"
            time.sleep(0.1)
        assert result.status is PullStatus.NO_NEW_MSG


def test_no_call_outlives_its_deadline(cluster: LocalCluster, consumer: PullConsumer) -> None:
    mq = queue_a0()
    consumer.max_offset(mq)
    cluster.broker("broker-a").hang()
    try:
        started = time.monotonic()
        with pytest.raises(RemotingTimeoutError):
            consumer.pull(mq, 0, 8, timeout_ms=300)
        with pytest.raises(RemotingTimeoutError):
            consumer.max_offset(mq)
        assert time.monotonic() - started < consumer.config.remoting_timeout_ms / 1000 + 3
    finally:
        cluster.broker("broker-a").resume()


# -- errors -------------------------------------------------------------------------------------------------
def test_sql92_without_property_filter_names_the_setting(consumer: PullConsumer) -> None:
    with pytest.raises(ClusterConfigError) as err:
        consumer.pull(queue_a0(), 0, 8, expression="a > 1", expression_type="sql92")
    assert "enablePropertyFilter" in str(err.value) and "broker-a" in str(err.value)


def test_unparsable_tag_expression(consumer: PullConsumer) -> None:
    with pytest.raises(InvalidSubscriptionError) as err:
        consumer.pull(queue_a0(), 0, 8, expression="||")
    assert "'||'" in str(err.value) and "broker-a" in str(err.value)


def test_queue_id_beyond_the_read_queues(cluster: LocalCluster, consumer: PullConsumer) -> None:
    with pytest.raises(BrokerError) as err:
        consumer.pull(MessageQueue(TOPIC, "broker-a", 7), 0, 8)
    assert "queueId[7] is illegal" in str(err.value)
    assert err.value.code == (1 if cluster.broker("broker-a").rocketmq_version.startswith("4.") else 29)


def test_a_topic_the_broker_no_longer_has(cluster: LocalCluster, consumer: PullConsumer) -> None:
    consumer.fetch_subscribe_queues(TOPIC)
    cluster.broker("broker-a").delete_topic(TOPIC, register=False)  # the cached route still names it
    with pytest.raises(TopicNotFoundError) as err:
        consumer.pull(queue_a0(), 0, 8)
    assert "'Orders'" in str(err.value) and "broker-a" in str(err.value)


def test_requests_checked_before_the_wire(consumer: PullConsumer) -> None:
    with pytest.raises(InvalidPullError):
        consumer.pull(queue_a0(), -1, 8)
    with pytest.raises(InvalidPullError):
        consumer.pull(queue_a0(), 0, 0)
    with pytest.raises(InvalidPullError):
        consumer.pull(queue_a0(), 0, 8, expression_type="XPATH")
    with pytest.raises(InvalidPullError):
        consumer.update_consumer_offset("g", queue_a0(), -5)


def test_closed_consumer_refuses_calls(cluster: LocalCluster) -> None:
    consumer = PullConsumer(ConsumerConfig(namesrv_addr=cluster.namesrv_addr))
    consumer.close()
    consumer.close()
    assert consumer.closed
    with pytest.raises(RemotingError):
        consumer.max_offset(queue_a0())


# -- configuration ---------------------------------------------------------------------------------------
def test_config_from_mapping_takes_java_and_spark_spellings() -> None:
    config = ConsumerConfig.from_mapping(
        {"namesrvAddr": "h:9876", "group": "g1", "CONSUMERPULLTIMEOUTMILLIS": "2000", "useTls": "true"}
    )
    assert (config.namesrv_addrs, config.group, config.pull_timeout_ms, config.use_tls) == (
        ["h:9876"],
        "g1",
        2000,
        True,
    )
    assert config.fingerprint() == ConsumerConfig.from_mapping({"namesrv_addr": "h:9876", "group": "g1",
        "pull_timeout_ms": 2000, "use_tls": True}).fingerprint()  # fmt: skip
    with pytest.raises(ConfigError, match="unknown consumer option"):
        ConsumerConfig.from_mapping({"namesrvAddr": "h:9876", "sendMsgTimeout": "3"})
    with pytest.raises(ConfigError, match="access_key and secret_key"):
        ConsumerConfig(namesrv_addr="h:9876", access_key="ak")
    with pytest.raises(ConfigError, match="namesrv_addr"):
        ConsumerConfig(namesrv_addr="nohost")
