"""Delayed messages on the local broker: held under SCHEDULE_TOPIC_XXXX, delivered when due."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.errors import ConfigError
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.local.schedule import SCHEDULE_TOPIC, parse_delay_levels
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand

from .wire import Wire, send_request

UNIQ = "0A0B0C0D0000000000000000000000AB"
#: Level 2 (a minute) is never due while a test runs: only deliver_due(now_ms=...) delivers it.
LEVELS = "1s 60s"


def _send_delayed(cluster: LocalCluster, topic: str, level: int, queue_id: int = 2) -> None:
    wire = Wire(cluster.broker("broker-a").addr)
    props = {"TAGS": "later", "UNIQ_KEY": UNIQ, "WAIT": "true", "DELAY": str(level)}
    answer = wire.call(send_request(topic, body=b"held", queue_id=queue_id, props=props))
    wire.close()
    assert answer.code == ResponseCode.SUCCESS
    # The queue asked for, the offset in the schedule queue (as a 4.9.8 broker answers).
    assert answer.field("queueId") == str(queue_id)


def test_a_delayed_message_is_held_in_its_levels_queue_then_stored_in_its_topic(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(brokers=1, message_delay_level=LEVELS)
    cluster.create_topic("Later", queues=4)
    broker = cluster.broker("broker-a")
    _send_delayed(cluster, "Later", level=2)

    assert cluster.messages("Later") == []
    (held,) = broker.messages(SCHEDULE_TOPIC)
    assert held.queue_id == 1  # level 2
    assert {k: held.properties.get(k) for k in ("REAL_TOPIC", "REAL_QID", "DELAY", "WAIT", "CLUSTER")} == {
        "REAL_TOPIC": "Later",
        "REAL_QID": "2",
        "DELAY": "2",
        "WAIT": "true",
        "CLUSTER": "DefaultCluster",
    }

    due = held.store_timestamp + 60_000
    assert broker.schedule.deliver_due(now_ms=due - 1) == 0
    assert cluster.messages("Later") == []
    assert broker.schedule.deliver_due(now_ms=due) == 1
    (delivered,) = cluster.messages("Later")
    assert (delivered.body, delivered.queue_id, delivered.queue_offset) == (b"held", 2, 0)
    assert (delivered.uniq_key, delivered.tags) == (UNIQ, "later")
    assert delivered.properties == held.properties  # DELAY, REAL_TOPIC and REAL_QID stay, as on a 4.9.8 broker
    assert (delivered.born_timestamp, delivered.store_timestamp) == (held.born_timestamp, due)
    assert broker.schedule.deliver_due(now_ms=due + 3_600_000) == 0  # delivered once


def test_a_level_above_the_last_is_held_at_the_last(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, message_delay_level=LEVELS)
    cluster.create_topic("Later", queues=4)
    _send_delayed(cluster, "Later", level=5)
    (held,) = cluster.broker("broker-a").messages(SCHEDULE_TOPIC)
    assert (held.queue_id, held.properties["DELAY"]) == (1, "2")


def test_the_broker_delivers_a_due_message_by_itself(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, message_delay_level=LEVELS)
    cluster.create_topic("Later", queues=4)
    with Producer(namesrv_addr=cluster.namesrv_addr) as p:
        result = p.send(Message("Later", b"in a second", delay_level=1))
    (held,) = cluster.broker("broker-a").messages(SCHEDULE_TOPIC)
    deadline = time.monotonic() + 10
    while not cluster.messages("Later") and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for the broker's own timer, up to a deadline
    (delivered,) = cluster.messages("Later")
    assert delivered.uniq_key == result.msg_id
    assert delivered.store_timestamp >= held.store_timestamp + 1_000


def test_what_was_delivered_stays_delivered_after_a_restart(
    tmp_path: Path, make_cluster: Callable[..., LocalCluster]
) -> None:
    cluster = make_cluster(brokers=1, store_dir=tmp_path, message_delay_level=LEVELS)
    cluster.create_topic("Later", queues=4)
    broker = cluster.broker("broker-a")
    _send_delayed(cluster, "Later", level=2)
    later = time.time() * 1000 + 3_600_000
    assert broker.schedule.deliver_due(now_ms=int(later)) == 1
    _send_delayed(cluster, "Later", level=2)  # held across the restart
    broker.stop()
    broker.start()
    assert broker.schedule.deliver_due(now_ms=int(later) + 1) == 1
    assert broker.schedule.deliver_due(now_ms=int(later) + 2) == 0
    assert len(cluster.messages("Later")) == 2


@pytest.mark.parametrize("text", ["", "1x", "s", "1.5s", "5", "\u00b2s"])
def test_delay_levels_must_be_numbers_with_units(text: str) -> None:
    with pytest.raises(ConfigError, match="message_delay_level"):
        parse_delay_levels(text)


def test_the_default_levels_are_a_4_9_8_brokers() -> None:
    levels = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert (len(levels), levels[0], levels[4], levels[-1]) == (18, 1_000, 60_000, 7_200_000)


@pytest.fixture
def later(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    cluster = make_cluster(brokers=1, message_delay_level=LEVELS)
    cluster.create_topic("Later", queues=4)
    return cluster


def _send_with_delay(cluster: LocalCluster, delay: str) -> RemotingCommand:
    wire = Wire(cluster.broker("broker-a").addr)
    try:
        return wire.call(send_request("Later", props={"UNIQ_KEY": UNIQ, "DELAY": delay}))
    finally:
        wire.close()


@pytest.mark.parametrize(("delay", "held"), [("0", False), ("-1", False), ("+1", True)])
def test_a_delay_level_is_read_as_java_reads_it(later: LocalCluster, delay: str, held: bool) -> None:
    assert _send_with_delay(later, delay).code == ResponseCode.SUCCESS
    assert len(later.broker("broker-a").messages(SCHEDULE_TOPIC)) == int(held)
    assert len(later.messages("Later")) == int(not held)


@pytest.mark.parametrize("delay", ["abc", "--5", "1.5", "99999999999"])
def test_a_delay_level_that_is_no_int_is_a_system_error(later: LocalCluster, delay: str) -> None:
    answer = _send_with_delay(later, delay)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == f'java.lang.NumberFormatException: For input string: "{delay}"'
    assert later.messages("Later") == []
