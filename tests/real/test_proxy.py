"""Publishing with only a RocketMQ 5.x Proxy's address (`rmq start proxy`, its remoting port as namesrv_addr):
single sends and batches, the foreachBatch sink, the Proxy's refusals (a topic it does not know, a message
whose type is not its topic's), timer messages to a DELAY topic, halves decided by the check-backs the Proxy
relays, exactly_once committed by those check-backs (and refused by a NORMAL topic); and micro-batches
through a Proxy frozen, then killed and started again. Read back with the kit's Java consumer through the
NameServer (`rmq dump`). 5.x kits only."""

from __future__ import annotations

import json
import threading
import time

import pytest

from spark_rocketmq import Message, Producer, RocketMQSink
from spark_rocketmq.client.transaction import TransactionCheck
from spark_rocketmq.errors import ClusterConfigError
from spark_rocketmq.protocol.transaction import TransactionState
from spark_rocketmq.spark.compat import supports_datasource

from .conftest import DISRUPTIVE, fresh_topic_name
from .kit import Kit
from .readback import assert_each_body_once, assert_each_row_delivered

GROUP = "spark_rocketmq_real_proxy"
ROWS = 2000


@pytest.fixture(scope="module")
def proxy_topic(kit: Kit, proxy_addr: str) -> str:
    """A NORMAL topic (no message.type attribute) on both brokers, created through the NameServer."""
    return kit.topic(fresh_topic_name("proxy"), queues=4)


def test_sends_and_batches_through_the_proxy_are_stored(proxy_addr: str, proxy_topic: str, kit: Kit) -> None:
    bodies = [f"proxy-send-{i}".encode() for i in range(40)]
    with Producer(namesrv_addr=proxy_addr, group=GROUP) as producer:
        assert producer.proxy_addr(proxy_topic) == proxy_addr
        for body in bodies[:20]:
            assert producer.send(Message(proxy_topic, body)).status.name == "SEND_OK"
        producer.send_batch([Message(proxy_topic, body) for body in bodies[20:]])
    assert_each_body_once(kit.dump(proxy_topic, at_least=40), bodies)


def test_the_proxy_refusals_name_the_topic_and_the_fix(proxy_addr: str, proxy_topic: str) -> None:
    missing = fresh_topic_name("proxy_missing")
    with Producer(namesrv_addr=proxy_addr, group=GROUP) as producer:
        started = time.monotonic()
        with pytest.raises(ClusterConfigError) as no_topic:
            producer.send(Message(missing, b"x"))
        with pytest.raises(ClusterConfigError) as wrong_type:
            producer.send(Message(proxy_topic, b"later", delay_level=2))
        took = time.monotonic() - started
    assert f"topic {missing!r}" in str(no_topic.value) and "does not exist" in str(no_topic.value)
    assert f"-t {missing} " in str(no_topic.value) and "updateTopic" in str(no_topic.value)
    said = str(wrong_type.value)
    assert f"a DELAY message to topic {proxy_topic!r}" in said and "message.type is NORMAL" in said
    assert f"-t {proxy_topic} -r 8 -w 8 -a +message.type=DELAY" in said
    assert took < 30, f"the refusals took {took:.1f} s"


def test_foreach_batch_through_the_proxy_delivers_every_row_and_exactly_once_needs_a_transaction_topic(
    spark, proxy_addr: str, kit: Kit, tmp_path
) -> None:
    topic = kit.topic(fresh_topic_name("proxy_sink"), queues=4)
    df = spark.range(ROWS).selectExpr("concat('proxy-row-', cast(id as string)) as body")
    sink = RocketMQSink(namesrv_addr=proxy_addr, topic=topic, group=GROUP)
    try:
        report = sink(df, 0)
    finally:
        sink.close()
    assert report.topics == {topic: ROWS}
    exactly_once = RocketMQSink(
        namesrv_addr=proxy_addr,
        topic=topic,
        group=f"{GROUP}_eo",
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(tmp_path / "txlog"),
    )
    started = time.monotonic()
    try:
        with pytest.raises(ClusterConfigError) as refused:  # the topic is NORMAL: the Proxy refuses every half
            exactly_once(df.selectExpr("concat('proxy-eo-', body) as body"), 0)
    finally:
        exactly_once.close()
    took = time.monotonic() - started
    said = str(refused.value)
    assert f"a TRANSACTION message to topic {topic!r}" in said and "message.type is NORMAL" in said, said
    assert f"-t {topic} -r 8 -w 8 -a +message.type=TRANSACTION" in said, said
    assert took < 60, f"the refusal took {took:.1f} s"
    # every row once, and nothing else: no half of the refused batch was stored
    assert_each_body_once(kit.dump(topic, at_least=ROWS), [f"proxy-row-{i}" for i in range(ROWS)])


@getattr(pytest.mark, DISRUPTIVE)
@pytest.mark.timeout(600)
def test_exactly_once_through_the_proxy_publishes_each_row_once_by_check_backs_across_a_proxy_restart(
    spark, proxy_addr: str, kit: Kit, tmp_path
) -> None:
    """The Proxy drops END_TRANSACTION: the driver records each batch, its brokers' check-backs (every 30 s on
    the kit, after the halves' check immunity, the 10 s commit window here) are relayed to the driver and
    answered COMMIT from the log; a replay is skipped. The Proxy is killed and started again before the
    check-backs: the new one knows nothing of the group's transactions (it learns a group from the halves sent
    through it), yet close() returns once every row is in its topic, once. Then a df.write.format("rocketmq"),
    whose commit returns once its rows are visible."""
    topic = kit.topic(fresh_topic_name("proxy_eo"), queues=4, attributes="+message.type=TRANSACTION")
    sink = RocketMQSink(
        namesrv_addr=proxy_addr,
        topic=topic,
        group=fresh_topic_name("proxy_eo_group"),
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(tmp_path / "txlog"),
        transaction_commit_window_ms=10_000,
    )

    def rows(batch: int):
        return spark.range(batch * 1000, (batch + 1) * 1000, numPartitions=2).selectExpr(
            "concat('proxy-eo-', cast(id as string)) as body"
        )

    try:
        first = sink(rows(0), 0)
        replay = sink(rows(0), 0)
        second = sink(rows(1), 1)
        committed = time.monotonic()
        kit.kill("proxy")
        kit.rmq("start", "proxy", timeout=180)
    finally:
        sink.close()
    settled_s = time.monotonic() - committed
    assert first.through_proxy == proxy_addr and first.transaction == "committed"
    assert (first.committed_halves, first.left_to_check_back, second.left_to_check_back) == (0, 1000, 1000)
    assert replay.transaction == "skipped"
    # read back through the NameServer by a Java consumer at once: close() waited for every row
    stored = kit.dump(topic, at_least=2000, timeout=30)
    assert_each_body_once(stored, [f"proxy-eo-{i}" for i in range(2000)])
    print(f"exactly_once through a Proxy restarted: every row visible {settled_s:.1f} s after the last commit")
    if not supports_datasource():
        return
    # df.write.format("rocketmq"): one transaction, whose commit returns once its rows are visible
    rows(2).write.format("rocketmq").options(
        namesrvAddr=proxy_addr,
        topic=topic,
        producerGroup=fresh_topic_name("proxy_eo_format"),
        deliveryGuarantee="exactly_once",
        transactionLogDir=str(tmp_path / "txlog-format"),
        transactionCommitWindowMs="10000",
        reportDir=str(tmp_path / "reports"),
    ).mode("append").save()
    (entry,) = [json.loads(line) for line in (tmp_path / "reports" / "reports.jsonl").read_text().splitlines()]
    assert (entry["transaction"], entry["left_to_check_back"], entry["through_proxy"]) == (
        "committed",
        1000,
        proxy_addr,
    )
    stored = kit.dump(topic, at_least=3000, timeout=30)
    assert_each_body_once(stored, [f"proxy-eo-{i}" for i in range(3000)])


def test_timer_messages_through_the_proxy_to_a_delay_topic(proxy_addr: str, kit: Kit) -> None:
    topic = kit.topic(fresh_topic_name("proxy_timer"), queues=4, attributes="+message.type=DELAY")
    with Producer(namesrv_addr=proxy_addr, group=GROUP) as producer:
        results = [producer.send(Message(topic, f"due-{i}".encode(), delay_time_sec=3)) for i in range(4)]
        with pytest.raises(ClusterConfigError) as wrong_type:  # a DELAY topic takes no plain message
            producer.send(Message(topic, b"plain"))
        # RECALL_MESSAGE goes through the Proxy to the broker of the handle, whose refusal comes back: the
        # kit's brokers run recallMessageEnable=false (a recall that works: tests/real/test_timer.py)
        with pytest.raises(ClusterConfigError) as not_enabled:
            producer.recall(topic, results[0].recall_handle)
    assert "message.type is DELAY" in str(wrong_type.value)
    assert "(recall failed, operation is forbidden)" in str(not_enabled.value)
    assert "Set recallMessageEnable=true" in str(not_enabled.value)
    assert all(r.recall_handle for r in results)
    stored = kit.dump(topic, at_least=4, timeout=60)
    assert_each_body_once(stored, [f"due-{i}" for i in range(4)])
    assert all(m["storeTimestamp"] - m["bornTimestamp"] >= 2500 for m in stored)  # held until due


@pytest.mark.timeout(300)
def test_halves_through_the_proxy_are_decided_by_relayed_check_backs(proxy_addr: str, kit: Kit, caplog) -> None:
    """The Proxy drops END_TRANSACTION (apache/rocketmq#8313): a half sent through it is decided by its
    broker's check-back, which the Proxy relays to this producer (its group's only one): the halves answered
    COMMIT become visible, the one answered ROLLBACK never does. The producer warns that its COMMITs were
    dropped."""
    topic = kit.topic(fresh_topic_name("proxy_tx"), queues=4, attributes="+message.type=TRANSACTION")
    rolled_back = threading.Event()
    checks: list[TransactionCheck] = []

    def listener(check: TransactionCheck) -> TransactionState:
        checks.append(check)
        if check.message.body == b"rollback":
            rolled_back.set()
            return TransactionState.ROLLBACK
        return TransactionState.COMMIT

    group = fresh_topic_name("proxy_tx_group")
    with Producer(namesrv_addr=proxy_addr, group=group, transaction_listener=listener) as producer:
        halves = [producer.send_half(Message(topic, f"tx-{i}".encode())) for i in range(6)]
        halves.append(producer.send_half(Message(topic, b"rollback")))
        assert {h.broker_name for h in halves} == {"broker-a", "broker-b"}
        for half in halves:
            producer.end_transaction(half, TransactionState.COMMIT)  # answered SUCCESS, dropped
        # decided by the check-backs alone (the broker checks every 30 s, halves older than 6 s)
        assert rolled_back.wait(150), "the rolled-back half was never checked back"
        stored = kit.dump(topic, at_least=6, timeout=150)
    assert_each_body_once(stored, [f"tx-{i}" for i in range(6)])  # and not the rolled-back one
    assert {c.broker_addr for c in checks} == {proxy_addr}  # relayed by the Proxy
    assert any("which answers SUCCESS and drops it" in r.getMessage() for r in caplog.records)


@getattr(pytest.mark, DISRUPTIVE)
@pytest.mark.timeout(600)
def test_a_proxy_frozen_then_killed_and_restarted_between_batches_loses_no_row(
    spark, proxy_addr: str, kit: Kit
) -> None:
    """Micro-batches through the Proxy while it is frozen 8 s, then killed and started again: each batch is
    delivered once the Proxy answers again (retried within delivery_timeout_ms), every row stored."""
    topic = kit.topic(fresh_topic_name("proxy_faults"), queues=4)
    sink = RocketMQSink(namesrv_addr=proxy_addr, topic=topic, group=GROUP, delivery_timeout_ms=180_000)

    def rows(batch: int):
        return spark.range(batch * 1000, (batch + 1) * 1000, numPartitions=2).selectExpr(
            "concat('proxy-fault-', cast(id as string)) as body"
        )

    def later(seconds: float, action) -> threading.Thread:
        thread = threading.Thread(target=lambda: (time.sleep(seconds), action()))
        thread.start()
        return thread

    try:
        assert sink(rows(0), 0).ok
        kit.freeze("proxy")
        thaw = later(8.0, lambda: kit.thaw("proxy"))
        try:
            assert sink(rows(1), 1).ok  # sent while frozen: answered after the thaw
        finally:
            thaw.join()
        kit.kill("proxy")
        restart = later(3.0, lambda: kit.rmq("start", "proxy", timeout=180))
        try:
            assert sink(rows(2), 2).ok  # sent while no Proxy listens: delivered once it is back
        finally:
            restart.join()
        assert sink(rows(3), 3).ok
    finally:
        sink.close()
    stored = kit.dump(topic, at_least=4000, timeout=120)
    assert_each_row_delivered(stored, [f"proxy-fault-{i}" for i in range(4000)])
