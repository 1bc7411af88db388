"""First-hour mistakes against the real brokers: each fails the first batch within about 10 s of the first
send, naming what is wrong and the fix, and nothing is stored; a cluster that worked keeps the retries."""

from __future__ import annotations

import time

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import Message, Producer, RocketMQSink
from spark_rocketmq.errors import ClusterConfigDeliveryError, ClusterConfigError, DeliveryError, SendFailedError

from .conftest import REFUSING
from .readback import assert_each_row_delivered
from .test_security import ENFORCING_TLS, stored_count

#: "In seconds": far below the sink's delivery_timeout_ms (DEADLINE_S, the default).
FAST_S = 10.0
DEADLINE_S = 120.0
#: An address no host of this test answers at (TEST-NET-1): refused or timed out, never a broker.
UNREACHABLE_IP = "192.0.2.1"


def _rows(spark, n: int = 1000, body_bytes: int = 16):
    pad = "x" * max(0, body_bytes - 8)
    return spark.range(0, n, numPartitions=2).select(
        F.concat(F.lpad(F.col("id").cast("string"), 8, "0"), F.lit(pad)).alias("body")
    )


def _bodies(n: int = 1000, body_bytes: int = 16) -> list[str]:
    """The bodies _rows gives."""
    return [f"{i:08d}" + "x" * max(0, body_bytes - 8) for i in range(n)]


def _assert_stored(kit, topic: str, bodies: list[str]) -> None:
    """Every row stored (at least once, each copy under one UNIQ_KEY), read back by the kit's Java consumer."""
    copies = assert_each_row_delivered(kit.dump(topic, at_least=len(bodies)), bodies)
    print(f"{topic}: {len(bodies)} rows stored, {copies} extra copies")


def _fails_fast(sink: RocketMQSink, df, error: type[Exception] = ClusterConfigDeliveryError) -> tuple[str, float]:
    """Run the sink on rows computed beforehand; the error it raises, and how long the slowest task took from
    taking its rows (its first send) to giving up. The driver's whole call adds Spark's own scheduling, which
    on a loaded machine takes seconds of its own, so only a bound far below delivery_timeout_ms is put on it."""
    df.cache().count()
    started = time.monotonic()
    with pytest.raises(error) as info:
        sink(df, 0)
    took = time.monotonic() - started
    report = info.value.report
    print(f"time to error: tasks {report.slowest_task_seconds:.2f} s, driver {took:.2f} s: {str(info.value)[:150]}")
    assert report.slowest_task_seconds < FAST_S, f"{report.slowest_task_seconds:.1f} s: {info.value}"
    assert took < DEADLINE_S / 2, f"{took:.1f} s: {info.value}"
    assert (report.failed_rows, report.messages) == (report.rows, 0)
    return str(info.value), report.slowest_task_seconds


def test_brokers_advertising_an_unreachable_address(private_kit, spark) -> None:
    kit = private_kit(props=f"brokerIP1={UNREACHABLE_IP}", brokers=("a",))
    topic = "MisconfigIp"
    sink = RocketMQSink(namesrv_addr=kit.namesrv_addr, topic=topic, group=topic)
    text, _ = _fails_fast(sink, _rows(spark))
    assert f"broker-a at {UNREACHABLE_IP}:" in text and "(the address the NameServer advertises)" in text
    assert "brokerIP1" in text


def test_a_broker_enforcing_tls_without_use_tls(private_kit, spark) -> None:
    kit = private_kit(opts=ENFORCING_TLS, brokers=("a",))
    topic = "MisconfigTls"  # auto-created (mqadmin speaks plain text, which this broker refuses)
    sink = RocketMQSink(namesrv_addr=kit.namesrv_addr, topic=topic, group=topic)
    text, _ = _fails_fast(sink, _rows(spark))
    assert f"broker-a at {kit.broker_addr('a')}" in text and "before any answer" in text
    assert "set use_tls=true" in text
    report = RocketMQSink(namesrv_addr=kit.namesrv_addr, topic=topic, group=topic, use_tls=True)(_rows(spark), 1)
    # Stored, as the broker's SEND_OK answers say (the kit's Java consumer, kit.dump, speaks plain text).
    assert (report.messages, report.failed_rows) == (1000, 0)


def test_a_topic_that_does_not_exist_with_auto_creation_off(private_kit, spark) -> None:
    kit = private_kit(props=REFUSING, brokers=("a",))
    topic = "MisconfigNoSuchTopic"
    sink = RocketMQSink(namesrv_addr=kit.namesrv_addr, topic=topic, group=topic)
    text, _ = _fails_fast(sink, _rows(spark), DeliveryError)
    assert f"No route info of topic '{topic}'" in text and f"mqadmin updateTopic -t {topic}" in text
    kit.topic(topic)
    assert sink(_rows(spark), 1).messages == 1000
    _assert_stored(kit, topic, _bodies())


def test_max_message_size_above_the_brokers(private_kit, spark) -> None:
    kit = private_kit(props=REFUSING, brokers=("a",))
    topic = "MisconfigSize"
    kit.topic(topic)
    sink = RocketMQSink(namesrv_addr=kit.namesrv_addr, topic=topic, group=topic)  # requests up to 1 MiB
    text, _ = _fails_fast(sink, _rows(spark, body_bytes=1024))
    if kit.major == 4:
        assert "its maxMessageSize is 65536 bytes" in text and "at most 65536" in text
    else:  # a 5.x broker does not say its limit for a batch
        assert "(message body size exceeded): its maxMessageSize is smaller" in text
    assert kit.dump(topic) == []
    fitting = RocketMQSink(namesrv_addr=kit.namesrv_addr, topic=topic, group=topic, max_message_size=65536)
    assert fitting(_rows(spark, body_bytes=1024), 1).messages == 1000
    _assert_stored(kit, topic, _bodies(body_bytes=1024))


def test_a_broker_requiring_acl_without_keys(kit, private_kit, spark) -> None:
    if not kit.has_acl_broker:
        pytest.skip(f"the RocketMQ {kit.version} kit has no ACL broker")
    acl = private_kit(brokers=("acl",))
    topic = "MisconfigAcl"
    acl.admin("updateTopic", "-b", acl.broker_addr("acl"), "-t", topic, "-r", "4", "-w", "4")
    sink = RocketMQSink(namesrv_addr=acl.namesrv_addr, topic=topic, group=topic)
    # ACL 1.0 (4.x) and ACL 2.0 (5.x) say it in their own words; the fix is named either way
    unsigned, signature = (
        ("No accessKey is configured", "Check signature failed for accessKey=RocketMQ")
        if kit.major < 5
        else ("username cannot be null", "check signature failed")
    )
    text, _ = _fails_fast(sink, _rows(spark))
    assert f"refused the send for ACL ({unsigned})" in text
    assert "set access_key and secret_key" in text
    wrong = RocketMQSink(
        namesrv_addr=acl.namesrv_addr, topic=topic, group=topic, access_key="RocketMQ", secret_key="wrong"
    )
    text, _ = _fails_fast(wrong, _rows(spark))
    assert f"refused the send for ACL ({signature})" in text
    assert "secret_key is not the" in text
    assert stored_count(acl, topic) == 0
    admin = RocketMQSink(
        namesrv_addr=acl.namesrv_addr, topic=topic, group=topic, access_key="RocketMQ", secret_key="12345678"
    )
    assert admin(_rows(spark), 1).messages == 1000
    assert stored_count(acl, topic) == 1000  # read back signed (the kit's Java consumer signs no request)


def test_a_cluster_that_worked_keeps_the_retrying_errors(make_kit) -> None:
    """Once a message was stored, a dead broker or NameServer is an outage, not a misconfiguration."""
    kit = make_kit(brokers=("a",), props=REFUSING)  # the REFUSING tests' broker: they have run (conftest)
    topic = "MisconfigWorked"
    kit.topic(topic)
    with Producer(namesrv_addr=kit.namesrv_addr, group=topic, send_msg_timeout_ms=10_000) as p:  # a loaded broker
        assert p.send(Message(topic, b"stored")).msg_id
        kit.kill("namesrv")
        with pytest.raises(SendFailedError) as info:
            p.send(Message("MisconfigNotCached", b"x"))  # needs a route lookup
        assert not isinstance(info.value, ClusterConfigError) and "no NameServer" in str(info.value)
        kit.kill("a")
        with pytest.raises(SendFailedError) as info:
            p.send(Message(topic, b"x"))
        assert not isinstance(info.value, ClusterConfigError)


def test_exactly_once_to_brokers_that_refuse_transactional_messages(private_kit, spark, tmp_path) -> None:
    kit = private_kit(props="rejectTransactionMessage=true", brokers=("a",))
    topic = kit.topic("MisconfigTx", brokers=("a",))
    sink = RocketMQSink(
        namesrv_addr=kit.namesrv_addr,
        topic=topic,
        group=topic,
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(tmp_path / "txlog"),
    )
    try:
        text, _ = _fails_fast(sink, _rows(spark))
    finally:
        sink.close()
    assert f"broker broker-a at {kit.broker_addr('a')} refused a half message" in text
    assert "rejectTransactionMessage=false" in text and "delivery_guarantee=at_least_once" in text
    at_least_once = RocketMQSink(namesrv_addr=kit.namesrv_addr, topic=topic, group=topic)
    assert at_least_once(_rows(spark), 1).messages == 1000
    _assert_stored(kit, topic, _bodies())
