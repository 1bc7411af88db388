"""The local model of a RocketMQ 5.x Proxy's remoting port (local/proxy.py) with the client in front of it:
routes at the Proxy's address, sends and pulls forwarded by brokerName, the type check's refusals,
END_TRANSACTION dropped, check-backs relayed and answered, admin requests refused. tests/real/test_proxy.py meets
a real 5.3.3 Proxy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.client.consumer_config import ConsumerConfig
from spark_rocketmq.client.pull_consumer import PullConsumer
from spark_rocketmq.client.remoting import RemotingClient
from spark_rocketmq.client.transaction import TransactionCheck
from spark_rocketmq.errors import ClusterConfigError
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.local.proxy import LocalProxy, message_type
from spark_rocketmq.protocol.codes import RequestCode, ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.stored import decode_stored_messages
from spark_rocketmq.protocol.transaction import TransactionState

TOPIC = "Proxied"


@pytest.fixture
def cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    cluster = make_cluster(rocketmq_version="5.3.3")
    cluster.create_topic(TOPIC, queues=2)
    return cluster


@pytest.fixture
def proxy(cluster: LocalCluster, make_proxy: Callable[[LocalCluster], LocalProxy]) -> LocalProxy:
    return make_proxy(cluster)


def test_sends_and_batches_reach_every_broker_through_the_one_address(cluster: LocalCluster, proxy: LocalProxy) -> None:
    with Producer(namesrv_addr=proxy.addr, group="through") as producer:
        assert producer.proxy_addr(TOPIC) == proxy.addr
        results = [producer.send(Message(TOPIC, f"m-{i}".encode())) for i in range(8)]
        producer.send_batch([Message(TOPIC, f"b-{i}".encode()) for i in range(8)])
        assert producer.connections() == [proxy.addr]  # no connection to a broker's own address
    assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
    assert sorted(m.body for m in cluster.messages(TOPIC)) == sorted(
        [f"m-{i}".encode() for i in range(8)] + [f"b-{i}".encode() for i in range(8)]
    )


def test_a_direct_route_is_not_a_proxy(cluster: LocalCluster, caplog: pytest.LogCaptureFixture) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="direct") as producer:
        assert producer.proxy_addr(TOPIC) is None
        producer.end_transaction(producer.send_half(Message(TOPIC, b"half")), TransactionState.COMMIT)
    assert [m.body for m in cluster.messages(TOPIC)] == [b"half"]
    assert not [r for r in caplog.records if "END_TRANSACTION" in r.getMessage()]


def test_the_type_check_refuses_with_the_fix(cluster: LocalCluster, proxy: LocalProxy) -> None:
    with Producer(namesrv_addr=proxy.addr, group="typed") as producer:
        with pytest.raises(ClusterConfigError) as delayed:
            producer.send(Message(TOPIC, b"later", delay_level=1))
        with pytest.raises(ClusterConfigError) as missing:
            producer.send(Message("NoSuchTopic", b"x"))
        proxy.set_message_type(TOPIC, "DELAY")
        assert producer.send(Message(TOPIC, b"later", delay_level=1)).status.name == "SEND_OK"
    assert f"to topic {TOPIC!r} (the expected type is NORMAL, but actual type is DELAY)" in str(delayed.value)
    assert f"-t {TOPIC} -r 8 -w 8 -a +message.type=DELAY" in str(delayed.value)
    assert "topic 'NoSuchTopic'" in str(missing.value) and "does not exist" in str(missing.value)


def test_end_transaction_is_answered_and_dropped(
    cluster: LocalCluster, proxy: LocalProxy, caplog: pytest.LogCaptureFixture
) -> None:
    proxy.set_message_type(TOPIC, "TRANSACTION")
    with Producer(namesrv_addr=proxy.addr, group="tx") as producer:
        halves = [producer.send_half(Message(TOPIC, f"half-{i}".encode())) for i in range(2)]
        for half in halves:
            producer.end_transaction(half, TransactionState.COMMIT)  # SUCCESS, as a real Proxy answers
    assert proxy.dropped_end_transactions == 2
    assert cluster.messages(TOPIC) == []  # never committed
    warned = [r.getMessage() for r in caplog.records if "END_TRANSACTION" in r.getMessage()]
    assert len(warned) == 1  # once per producer
    assert f"through the RocketMQ Proxy at {proxy.addr}, which answers SUCCESS and drops it" in warned[0]
    assert "this producer has no transaction_listener" in warned[0]
    assert "give namesrv_addr the NameServer behind the Proxy" in warned[0]


def test_check_backs_are_relayed_and_their_answers_decide_the_halves(
    make_cluster: Callable[..., LocalCluster], make_proxy: Callable[[LocalCluster], LocalProxy]
) -> None:
    """A broker checks halves back through the Proxy (its heartbeats named the group): the producer's answers,
    sent to the Proxy, reach the checking broker, which a direct END_TRANSACTION never does."""
    cluster = make_cluster(rocketmq_version="5.3.3", transaction_check_interval_ms=200, transaction_timeout_ms=300)
    cluster.create_topic(TOPIC, queues=2)
    proxy = make_proxy(cluster)
    proxy.set_message_type(TOPIC, "TRANSACTION")
    checks: list[TransactionCheck] = []
    lock = threading.Lock()

    def listener(check: TransactionCheck) -> TransactionState:
        with lock:
            checks.append(check)
        return TransactionState.COMMIT if check.message.body.startswith(b"yes") else TransactionState.ROLLBACK

    with Producer(namesrv_addr=proxy.addr, group="tx-relayed", transaction_listener=listener) as producer:
        for i in range(4):
            producer.send_half(Message(TOPIC, f"yes-{i}".encode()))
            producer.send_half(Message(TOPIC, f"no-{i}".encode()))
        deadline = time.monotonic() + 20
        while len(cluster.messages(TOPIC)) < 4 or producer.transaction_checks().rollbacks < 4:
            assert time.monotonic() < deadline, f"check-backs answered: {producer.transaction_checks()}"
            time.sleep(0.05)  # the brokers check every 200 ms
    assert sorted(m.body for m in cluster.messages(TOPIC)) == [f"yes-{i}".encode() for i in range(4)]
    assert proxy.relayed_checks >= 8 and proxy.forwarded_end_transactions >= 8
    assert proxy.dropped_end_transactions == 0
    with lock:
        assert {c.broker_addr for c in checks} == {proxy.addr}
        assert {c.header.offset_msg_id for c in checks} == {None}  # a 5.3.3 Proxy's relayed header has none


def test_pulls_and_offsets_are_served_by_broker_name(cluster: LocalCluster, proxy: LocalProxy) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="fill") as producer:
        for i in range(6):
            producer.send(Message(TOPIC, f"r-{i}".encode()))
    with PullConsumer(ConsumerConfig(namesrv_addr=proxy.addr, group="reader")) as consumer:
        read = []
        for mq in consumer.fetch_subscribe_queues(TOPIC):
            high = consumer.max_offset(mq)
            if high:
                result = consumer.pull(mq, consumer.min_offset(mq), 32)
                assert result.broker_addr == proxy.addr
                read += [m.body for m in decode_stored_messages(result.body)]
    assert sorted(read) == [f"r-{i}".encode() for i in range(6)]


def test_admin_requests_are_refused(proxy: LocalProxy) -> None:
    client = RemotingClient()
    try:
        answer = client.invoke_sync(proxy.addr, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO), 3000)
    finally:
        client.close()
    assert (answer.code, answer.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "request type 106 not supported")


@pytest.mark.parametrize(
    ("properties", "kind"),
    [
        ({"TRAN_MSG": "true", "PGROUP": "g"}, "TRANSACTION"),
        ({"DELAY": "2"}, "DELAY"),
        ({"TIMER_DELIVER_MS": "1"}, "DELAY"),
        ({"__SHARDINGKEY": "k"}, "FIFO"),
        ({"KEYS": "k"}, "NORMAL"),
    ],
)
def test_a_message_type_is_read_from_its_properties(properties: dict[str, str], kind: str) -> None:
    assert message_type(properties) == kind
