from __future__ import annotations

import itertools

from spark_rocketmq.client.fault import LatencyFaultTolerance, MQFaultStrategy, not_available_duration_ms
from spark_rocketmq.protocol.route import BrokerData, QueueData, TopicRouteData, publish_info


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def info(*brokers: str, queues: int = 2):
    route = TopicRouteData(
        queue_datas=[QueueData(b, queues, queues, 6) for b in brokers],
        broker_datas=[BrokerData("c", b, {0: f"127.0.0.1:{10911 + i}"}) for i, b in enumerate(brokers)],
    )
    return publish_info("T", route)


def test_latency_to_not_available_duration_table() -> None:
    table = {0: 0, 49: 0, 50: 0, 100: 0, 549: 0, 550: 30000, 1000: 60000, 2000: 120000, 3000: 180000, 15000: 600000}
    assert {lat: not_available_duration_ms(lat) for lat in table} == table


def test_round_robin_over_all_queues_when_healthy() -> None:
    strategy = MQFaultStrategy(clock=Clock())
    pub = info("broker-a", "broker-b")
    counter = itertools.count()
    picked = [strategy.select_one_message_queue(pub, None, counter) for _ in range(4)]
    assert [(q.broker_name, q.queue_id) for q in picked] == [
        ("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)
    ]  # fmt: skip


def test_slow_broker_is_avoided_until_its_duration_ends() -> None:
    clock = Clock()
    strategy = MQFaultStrategy(clock=clock)
    pub = info("broker-a", "broker-b")
    strategy.update_fault_item("broker-a", 600, isolation=False)  # >= 550 ms: 30 s out
    counter = itertools.count()
    assert {strategy.select_one_message_queue(pub, None, counter).broker_name for _ in range(10)} == {"broker-b"}
    clock.now += 30_000
    assert {strategy.select_one_message_queue(pub, None, counter).broker_name for _ in range(10)} == {
        "broker-a",
        "broker-b",
    }


def test_fast_answers_do_not_mark_a_broker() -> None:
    strategy = MQFaultStrategy(clock=Clock())
    strategy.update_fault_item("broker-a", 40, isolation=False)
    assert strategy.is_available("broker-a")


def test_retry_avoids_the_broker_that_just_failed() -> None:
    strategy = MQFaultStrategy(clock=Clock())
    pub = info("broker-a", "broker-b")
    counter = itertools.count()
    for _ in range(8):
        assert strategy.select_one_message_queue(pub, "broker-a", counter).broker_name == "broker-b"
    disabled = MQFaultStrategy(enabled=False)
    for _ in range(8):
        assert disabled.select_one_message_queue(pub, "broker-b", counter).broker_name == "broker-a"


def test_isolation_then_least_bad_when_every_broker_is_marked() -> None:
    clock = Clock()
    strategy = MQFaultStrategy(clock=clock)
    pub = info("broker-a", "broker-b")
    strategy.update_fault_item("broker-a", 3000, isolation=True)  # failed: 600 s
    strategy.update_fault_item("broker-b", 600, isolation=False)  # slow: 30 s
    counter = itertools.count()
    # Both marked: still a queue, on the least bad broker (lower latency, earlier end).
    mq = strategy.select_one_message_queue(pub, None, counter)
    assert mq.broker_name == "broker-b" and 0 <= mq.queue_id < 2


def test_single_broker_is_retried_when_it_is_all_there_is() -> None:
    strategy = MQFaultStrategy(clock=Clock())
    pub = info("broker-a")
    strategy.update_fault_item("broker-a", 30000, isolation=True)
    assert strategy.select_one_message_queue(pub, "broker-a", itertools.count()).broker_name == "broker-a"


def test_pick_one_at_least_prefers_available_then_lowest_latency() -> None:
    clock = Clock()
    tol = LatencyFaultTolerance(clock)
    assert tol.pick_one_at_least() is None
    tol.update_fault_item("slow", 3000, 180_000)
    assert tol.pick_one_at_least() == "slow"
    tol.update_fault_item("ok", 10, 0)
    assert tol.pick_one_at_least() == "ok"
