"""Timer messages and recall on the local brokers: 5.3.3 mode (held in rmq_sys_wheel_timer, stored in
their topic when due by an injected clock) and the default 4.9.8 mode (no timer wheel)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.errors import BrokerError, BrokerVersionError, ClusterConfigError
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.local.timer import TimerConfig
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.message import encode_batch_body, encode_properties
from spark_rocketmq.protocol.timer import TIMER_TOPIC, RecallHandle

from .wire import Wire, send_request

T0 = 1_800_000_000_300  # the injected clock's start (epoch ms, 300 ms into a second)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def five(make_cluster: Callable[..., LocalCluster], clock: Clock, **timer: object) -> LocalCluster:
    cluster = make_cluster(brokers=1, rocketmq_version="5.3.3", clock_ms=clock, timer=TimerConfig(**timer))  # type: ignore[arg-type]
    cluster.create_topic("Timed", queues=2)
    return cluster


def advance(cluster: LocalCluster, clock: Clock, to_ms: int) -> None:
    clock.now = to_ms
    cluster.broker("broker-a").timer.deliver_due()


def test_a_timer_message_is_held_until_its_time(make_cluster: Callable[..., LocalCluster]) -> None:
    clock = Clock()
    cluster = five(make_cluster, clock)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="g", auto_batch=True) as p:  # timer messages go alone
        r = p.send(Message("Timed", b"in-5s", delay_time_sec=5))
        at = p.send(Message("Timed", b"at", deliver_time_ms=T0 + 7_000))
    assert r.broker_version == 479 and r.recall_handle is not None
    handle = RecallHandle.decode(r.recall_handle)
    # The broker floors to its precision (1 s): due at T0 + 5 s - 300 ms, the handle one ms later.
    assert (handle.topic, handle.broker_name, handle.msg_id) == ("Timed", "broker-a", r.msg_id)
    assert handle.timestamp_ms == T0 + 5_000 - 300 + 1
    assert cluster.messages("Timed") == []
    assert [m.properties["REAL_TOPIC"] for m in cluster.messages(TIMER_TOPIC)] == ["Timed", "Timed"]
    advance(cluster, clock, T0 + 4_699)
    assert cluster.messages("Timed") == []
    advance(cluster, clock, T0 + 4_700)
    (got,) = cluster.messages("Timed")
    assert (got.body, got.properties["UNIQ_KEY"], got.store_timestamp) == (b"in-5s", r.msg_id, T0 + 4_700)
    assert got.properties["TIMER_OUT_MS"] == str(T0 + 4_700) and got.properties["TIMER_DELAY_SEC"] == "5"
    advance(cluster, clock, T0 + 7_000)
    assert sorted(m.properties["UNIQ_KEY"] for m in cluster.messages("Timed")) == sorted([r.msg_id, at.msg_id])
    assert cluster.broker("broker-a").timer.held == 0


def test_past_now_beyond_the_maximum_and_a_wheel_off(make_cluster: Callable[..., LocalCluster]) -> None:
    clock = Clock()
    cluster = five(make_cluster, clock, timer_max_delay_sec=60)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="g") as p:
        late = p.send(Message("Timed", b"late", deliver_time_ms=T0 - 1))
        assert late.recall_handle is None and [m.body for m in cluster.messages("Timed")] == [b"late"]
        with pytest.raises(BrokerError, match=r"timer message illegal.*max delay 60000ms") as info:
            p.send(Message("Timed", b"far", delay_time_ms=61_000))
        assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
    off = make_cluster(brokers=1, rocketmq_version="5.3.3", timer=TimerConfig(timer_wheel_enable=False))
    with Producer(namesrv_addr=off.namesrv_addr, group="g", retry_times_when_send_failed=2) as p:
        with pytest.raises(
            BrokerVersionError, match="accurate timer message is not enabled, timerWheelEnable is false"
        ) as off_info:
            p.send(Message("T", b"x", delay_time_sec=1))
        assert re.search(
            r"broker broker-a at 127\.0\.0\.1:\d+ runs RocketMQ V5_3_3 with its timer wheel off", str(off_info.value)
        )
        assert p.stats().requests == 1  # no resend cures it


def test_recall_cancels_a_held_message(make_cluster: Callable[..., LocalCluster]) -> None:
    clock = Clock()
    cluster = five(make_cluster, clock, recall_message_enable=True)
    cluster.create_topic("Other", queues=2)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="g") as p:
        gone = p.send(Message("Timed", b"gone", delay_time_sec=3))
        kept = p.send(Message("Timed", b"kept", delay_time_sec=3))
        assert p.recall("Timed", gone.recall_handle or "") == gone.msg_id
        with pytest.raises(BrokerError, match="recall failed, topic not match"):
            p.recall("Other", kept.recall_handle or "")
        advance(cluster, clock, T0 + 10_000)
        with pytest.raises(BrokerError, match="recall failed, timestamp invalid"):
            p.recall("Timed", kept.recall_handle or "")  # due already
    assert [m.body for m in cluster.messages("Timed")] == [b"kept"]


def test_recall_is_refused_unless_enabled(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = five(make_cluster, Clock())
    with Producer(namesrv_addr=cluster.namesrv_addr, group="g") as p:
        r = p.send(Message("Timed", b"x", delay_time_sec=3))
        with pytest.raises(ClusterConfigError, match=r"\(recall failed, operation is forbidden\)") as info:
            p.recall("Timed", r.recall_handle or "")
    assert "Set recallMessageEnable=true in its broker.conf" in str(info.value)
    assert isinstance(info.value.__cause__, BrokerError) and info.value.__cause__.code == ResponseCode.NO_PERMISSION


def test_a_batch_ignores_timer_properties(make_cluster: Callable[..., LocalCluster]) -> None:
    """The put-message hook skips batches: a 5.x broker stores a batch's timer records at once."""
    cluster = five(make_cluster, Clock())
    props = encode_properties({"UNIQ_KEY": "B" * 32, "TIMER_DELAY_SEC": "30"}).encode()
    wire = Wire(cluster.broker("broker-a").addr)
    answer = wire.call(send_request("Timed", body=encode_batch_body([(0, b"in-batch", props)]), batch=True))
    wire.close()
    assert answer.code == ResponseCode.SUCCESS and answer.version == 479 and answer.field("recallHandle") is None
    assert [m.body for m in cluster.messages("Timed")] == [b"in-batch"]


def test_held_messages_survive_a_restart_and_are_delivered_once(make_cluster: Callable[..., LocalCluster]) -> None:
    clock = Clock()
    cluster = five(make_cluster, clock)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="g") as p:
        p.send(Message("Timed", b"first", delay_time_sec=2))
        p.send(Message("Timed", b"second", delay_time_sec=9))
    broker = cluster.broker("broker-a")
    advance(cluster, clock, T0 + 3_000)
    broker.stop()
    broker.start()
    advance(cluster, clock, T0 + 3_500)
    assert [m.body for m in cluster.messages("Timed")] == [b"first"]
    advance(cluster, clock, T0 + 20_000)
    assert sorted(m.body for m in cluster.messages("Timed")) == [b"first", b"second"]


def test_a_4_9_8_broker_gets_no_timer_message(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1)
    cluster.create_topic("Timed", queues=2)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="g", auto_batch=True) as p:
        for send in (p.send, lambda m: p.send_async(m).result(), p.send_oneway):
            with pytest.raises(BrokerVersionError, match=r"broker broker-a at 127\.0\.0\.1:\d+ runs RocketMQ V4_9_8"):
                send(Message("Timed", b"x", delay_time_ms=5_000))
        assert p.send(Message("Timed", b"plain")).broker_version == 409
    assert [m.body for m in cluster.messages("Timed")] == [b"plain"]
    # What the client protects against: a 4.9.8 broker stores a timer message at once.
    props = {"UNIQ_KEY": "C" * 32, "WAIT": "true", "TIMER_DELAY_SEC": "60"}
    wire = Wire(cluster.broker("broker-a").addr)
    answer = wire.call(send_request("Timed", body=b"early", props=props))
    wire.close()
    assert answer.code == ResponseCode.SUCCESS and answer.version == 409
    assert sorted(m.body for m in cluster.messages("Timed")) == [b"early", b"plain"]
