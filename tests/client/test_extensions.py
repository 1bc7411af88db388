"""The producer's extension points against the local cluster: queue selectors, send hooks, check-forbidden
hooks, end-transaction hooks, message trace and the send metrics."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_rocketmq import ConfigError, Message, MessageQueue, Producer, TransactionState
from spark_rocketmq.client import metrics as metrics_module
from spark_rocketmq.client import trace as trace_module
from spark_rocketmq.client.hooks import (
    CheckForbiddenContext,
    CommunicationMode,
    EndTransactionContext,
    SendMessageContext,
)
from spark_rocketmq.client.trace import end_transaction_record
from spark_rocketmq.errors import RemotingError, SendFailedError, SendForbiddenError
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.codes import RequestCode
from spark_rocketmq.protocol.trace import (
    RMQ_SYS_TRACE_TOPIC,
    EndTransactionTrace,
    MessageType,
    PubTrace,
    TraceRecord,
    decode_trace_records,
    encoded,
)

SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


@pytest.fixture
def cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    c = make_cluster(request_log=500)
    c.create_topic("Orders", queues=4)
    return c


@pytest.fixture
def producer(cluster: LocalCluster) -> Iterator[Producer]:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="ext-writer") as p:
        yield p


class Recorder:
    """A send hook and end-transaction hook keeping what it saw (calls come from several threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.before: list[SendMessageContext] = []
        self.after: list[SendMessageContext] = []
        self.ends: list[EndTransactionContext] = []

    def hook_name(self) -> str:
        return "Recorder"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        with self.lock:
            self.before.append(ctx)

    def send_message_after(self, ctx: SendMessageContext) -> None:
        with self.lock:
            self.after.append(ctx)

    def end_transaction(self, ctx: EndTransactionContext) -> None:
        with self.lock:
            self.ends.append(ctx)


def sent_requests(cluster: LocalCluster) -> int:
    return sum(len(b.received(*SEND_CODES)) for b in cluster.brokers.values())


# -- selectors ---------------------------------------------------------------------------------------
def test_selector_picks_the_queue_each_message_is_stored_on(cluster: LocalCluster, producer: Producer) -> None:
    seen: list[tuple[int, str, Any]] = []

    def by_order_id(queues: list[MessageQueue], message: Message, arg: Any) -> MessageQueue:
        seen.append((len(queues), message.topic, arg))
        return queues[arg % len(queues)]

    queues = producer.fetch_publish_queues("Orders")
    results = [producer.send(Message("Orders", b"o%d" % i), selector=by_order_id, arg=i) for i in range(5)]
    results.append(producer.send_async(Message("Orders", b"o5"), selector=by_order_id, arg=5).result(5))
    assert [r.queue for r in results] == [queues[i % len(queues)] for i in range(6)]
    assert seen == [(8, "Orders", i) for i in range(6)]
    stored = {m.body: (m.broker_name, m.queue_id) for m in cluster.messages("Orders")}
    for i, r in enumerate(results):
        assert stored[b"o%d" % i] == (r.queue.broker_name, r.queue.queue_id)


def test_a_selector_returning_a_foreign_queue_is_refused_naming_the_topic(
    cluster: LocalCluster, producer: Producer
) -> None:
    with pytest.raises(ConfigError, match=r"topic 'Orders'.*return one of the queues"):
        producer.send(Message("Orders", b"x"), selector=lambda qs, m, a: MessageQueue("Orders", "broker-z", 0))
    with pytest.raises(ConfigError, match=r"selector raised for topic 'Orders'"):
        producer.send(Message("Orders", b"x"), selector=lambda qs, m, a: qs[a], arg=99)
    with pytest.raises(ConfigError, match="one of selector, sharding_key and queue"):
        producer.send(Message("Orders", b"x"), selector=lambda qs, m, a: qs[0], sharding_key="k")
    assert cluster.messages("Orders") == []


# -- send hooks ----------------------------------------------------------------------------------------
def test_send_hooks_see_every_kind_of_send(cluster: LocalCluster, producer: Producer) -> None:
    rec = Recorder()
    producer.register_send_message_hook(rec)
    producer.register_end_transaction_hook(rec)
    single = producer.send(Message("Orders", b"a", tags="T", keys=["k1", "k2"]))
    producer.send_async(Message("Orders", b"b")).result(5)
    producer.send_oneway(Message("Orders", b"c"))
    [batch] = producer.send_batch([Message("Orders", b"d"), Message("Orders", b"e")])
    handle = producer.send_half(Message("Orders", b"f"))
    producer.end_transaction(handle, TransactionState.COMMIT)
    producer.send(Message("Orders", b"g", delay_level=1))

    assert len(rec.before) == len(rec.after) == 6
    modes = [c.communication_mode for c in rec.after]
    assert modes == ["SYNC", "ASYNC", "ONEWAY", "SYNC", "ASYNC", "SYNC"]
    types = [c.msg_type for c in rec.after]
    assert types == [MessageType.NORMAL_MSG] * 4 + [MessageType.TRANS_MSG_HALF, MessageType.DELAY_MSG]
    first = rec.after[0]
    assert first.producer_group == "ext-writer" and first.topic == "Orders" and first.attempt == 1
    assert first.send_result == single and first.exception is None and first.cost_ms >= 0
    assert first.broker_addr == cluster.broker(single.queue.broker_name).addr
    assert first.queue.queue_id == single.queue.queue_id
    [m] = first.messages()
    assert (m.body, m.properties["TAGS"], m.properties["KEYS"]) == (b"a", "T", "k1 k2")
    oneway = rec.after[2]
    assert oneway.send_result is None and oneway.exception is None
    batch_ctx = rec.after[3]
    assert batch_ctx.is_batch and batch_ctx.message_count == 2 and batch_ctx.send_result == batch
    assert [m.body for m in batch_ctx.messages()] == [b"d", b"e"]
    assert [(e.msg_id, e.transaction_state, e.from_transaction_check) for e in rec.ends] == [
        (handle.msg_id, TransactionState.COMMIT, False)
    ]
    assert rec.ends[0].broker_addr == cluster.broker(handle.broker_name).addr


def test_send_hooks_see_each_failed_attempt(advertise_dead_broker: Callable[..., tuple[LocalCluster, str]]) -> None:
    cluster, dead = advertise_dead_broker("Lost")
    rec = Recorder()
    with Producer(namesrv_addr=cluster.namesrv_addr, group="g", retry_times_when_send_failed=1) as p:
        p.register_send_message_hook(rec)
        with pytest.raises((SendFailedError, RemotingError, ConfigError)):
            p.send(Message("Lost", b"x"))
    assert [c.attempt for c in rec.after] == [1, 2]
    for ctx in rec.after:
        assert ctx.broker_addr == dead and ctx.send_result is None
        assert isinstance(ctx.exception, RemotingError)


def test_a_failing_send_hook_is_logged_once_and_sends_go_on(
    cluster: LocalCluster, producer: Producer, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def hook_name(self) -> str:
            return "Broken"

        def send_message_before(self, ctx: SendMessageContext) -> None:
            raise RuntimeError("before fails")

        def send_message_after(self, ctx: SendMessageContext) -> None:
            raise RuntimeError("after fails")

    producer.register_send_message_hook(Broken())
    with caplog.at_level(logging.WARNING, logger="spark_rocketmq.client.hooks"):
        for i in range(5):
            producer.send(Message("Orders", b"%d" % i))
    assert len(cluster.messages("Orders")) == 5
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2
    assert "Broken raised in send_message_before" in logged[0] and "before fails" in logged[0]
    assert "Broken raised in send_message_after" in logged[1]


def test_registering_an_object_that_is_no_hook_names_what_it_lacks(producer: Producer) -> None:
    with pytest.raises(ConfigError, match="no send_message_after"):
        producer.register_send_message_hook(type("Half", (), {"hook_name": lambda s: "h", "send_message_before": id})())


# -- check-forbidden hooks ---------------------------------------------------------------------------
def test_a_forbidding_hook_refuses_the_send_and_nothing_is_written(cluster: LocalCluster, producer: Producer) -> None:
    checked: list[CheckForbiddenContext] = []

    class NoSecrets:
        def hook_name(self) -> str:
            return "NoSecrets"

        def check_forbidden(self, ctx: CheckForbiddenContext) -> None:
            checked.append(ctx)
            if any(m.properties.get("TAGS") == "secret" for m in ctx.messages()):
                raise PermissionError("tag 'secret' may not leave this host")

    producer.register_check_forbidden_hook(NoSecrets())
    before = sent_requests(cluster)
    with pytest.raises(SendForbiddenError, match=r"NoSecrets refused the send to topic 'Orders'.*may not leave"):
        producer.send(Message("Orders", b"s", tags="secret"))
    fut = producer.send_async(Message("Orders", b"s2", tags="secret"))
    with pytest.raises(SendForbiddenError):
        fut.result(5)
    with pytest.raises(SendForbiddenError):
        producer.send_batch([Message("Orders", b"b1"), Message("Orders", b"b2", tags="secret")])
    assert sent_requests(cluster) == before and cluster.messages("Orders") == []
    assert len(checked) == 3  # refused at the first attempt, never retried
    assert checked[0].communication_mode == CommunicationMode.SYNC and checked[1].communication_mode == "ASYNC"
    producer.send(Message("Orders", b"fine", tags="public"))
    assert [m.body for m in cluster.messages("Orders")] == [b"fine"]


# -- message trace -------------------------------------------------------------------------------------
def trace_records(cluster: LocalCluster, topic: str = RMQ_SYS_TRACE_TOPIC) -> list[TraceRecord]:
    records: list[TraceRecord] = []
    for m in cluster.messages(topic):
        found = decode_trace_records(m.decompressed_body().decode("utf-8"))
        assert set(m.keys) == {k for r in found for k in [r.msg_id, *((r.keys or "").split())] if k and k != "null"}
        records += found
    return records


def test_trace_writes_a_pub_record_per_message_and_an_end_transaction_record(cluster: LocalCluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="traced", enable_msg_trace=True) as p:
        one = p.send(Message("Orders", b"abc", tags="T", keys="order-1"))
        batch = p.send_batch([Message("Orders", b"d", keys="k-d"), Message("Orders", b"ee")])
        handle = p.send_half(Message("Orders", b"half"))
        p.end_transaction(handle, TransactionState.COMMIT)
        assert p.tracer is not None
    assert p.tracer.failed == 0 and p.tracer.dropped == 0 and p.tracer.written >= 1
    records = trace_records(cluster)
    pubs = {r.msg_id: r for r in records if isinstance(r, PubTrace)}
    ends = [r for r in records if isinstance(r, EndTransactionTrace)]
    assert set(pubs) == {one.msg_id, *batch[0].msg_id.split(","), handle.msg_id}
    r = pubs[one.msg_id]
    assert (r.group, r.topic, r.tags, r.keys, r.body_length, r.success) == ("traced", "Orders", "T", "order-1", 3, True)
    assert r.store_host == cluster.broker(one.queue.broker_name).addr and r.offset_msg_id == one.offset_msg_id
    assert r.region_id == "DefaultRegion" and r.msg_type == MessageType.NORMAL_MSG
    d_id, e_id = batch[0].msg_id.split(",")
    assert (pubs[d_id].keys, pubs[d_id].body_length, pubs[e_id].keys) == ("k-d", 1, None)
    assert pubs[d_id].offset_msg_id == batch[0].offset_msg_id.split(",")[0]
    assert pubs[handle.msg_id].msg_type == MessageType.TRANS_MSG_HALF
    assert [(e.msg_id, e.transaction_state, e.from_transaction_check) for e in ends] == [
        (handle.msg_id, "COMMIT_MESSAGE", False)
    ]


def test_sends_to_a_broker_with_trace_off_are_left_out_of_the_trace(make_cluster: Callable[..., LocalCluster]) -> None:
    """A broker with traceOn=false answers TRACE_ON=false: like the Java client (SendMessageTraceHookImpl),
    the tracer writes no Pub record of those sends. END_TRANSACTION records do not depend on it."""
    cluster = make_cluster(trace_on=False)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="untraced", enable_msg_trace=True) as p:
        one = p.send(Message("Orders", b"x"))
        [batch] = p.send_batch([Message("Orders", b"a"), Message("Orders", b"b")])
        handle = p.send_half(Message("Orders", b"half"))
        p.end_transaction(handle, TransactionState.COMMIT)
        assert p.tracer is not None
    assert not one.trace_on and not batch.trace_on
    assert p.tracer.failed == 0 and p.tracer.dropped == 0
    assert [(type(r), r.msg_id) for r in trace_records(cluster)] == [(EndTransactionTrace, handle.msg_id)]


def test_trace_goes_to_the_customized_topic(cluster: LocalCluster) -> None:
    with Producer(
        namesrv_addr=cluster.namesrv_addr, group="traced", enable_msg_trace=True, customized_trace_topic="MyTrace"
    ) as p:
        sent = p.send(Message("Orders", b"x"))
    assert [r.msg_id for r in trace_records(cluster, "MyTrace")] == [sent.msg_id]
    assert cluster.messages(RMQ_SYS_TRACE_TOPIC) == []


def test_trace_messages_that_fail_never_fail_a_send_and_are_logged_once(
    make_cluster: Callable[..., LocalCluster], caplog: pytest.LogCaptureFixture
) -> None:
    cluster = make_cluster(auto_create_topic=False)  # no RMQ_SYS_TRACE_TOPIC, as brokers without traceTopicEnable
    cluster.create_topic("Orders")
    with caplog.at_level(logging.WARNING, logger="spark_rocketmq.client.trace"):
        with Producer(namesrv_addr=cluster.namesrv_addr, group="traced", enable_msg_trace=True) as p:
            for i in range(3):
                p.send(Message("Orders", b"%d" % i))
                assert p.tracer is not None and p.tracer.flush(10)
        assert p.tracer.failed == 3 and p.tracer.written == 0
    assert len(cluster.messages("Orders")) == 3
    [warning] = [r.getMessage() for r in caplog.records]
    assert "RMQ_SYS_TRACE_TOPIC" in warning and "traceTopicEnable=true" in warning


def test_trace_sampling_traces_that_percent_of_sends(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter([10, 90, 49, 50])  # one draw from range(100) per answered send: below 50 is traced
    monkeypatch.setattr(trace_module, "sample_draw", lambda n: next(draws))
    with Producer(
        namesrv_addr=cluster.namesrv_addr, group="sampled", enable_msg_trace=True, msg_trace_sample_percent=50
    ) as p:
        sent = [p.send(Message("Orders", b"%d" % i)) for i in range(4)]
    assert sorted(r.msg_id for r in trace_records(cluster)) == sorted([sent[0].msg_id, sent[2].msg_id])
    with pytest.raises(ConfigError, match="msg_trace_sample_percent=0: expected an integer from 1 to 100"):
        Producer(namesrv_addr="127.0.0.1:9", enable_msg_trace=True, msg_trace_sample_percent=0)


def test_a_bad_customized_trace_topic_is_refused() -> None:
    with pytest.raises(ConfigError, match="customized_trace_topic"):
        Producer(namesrv_addr="127.0.0.1:9", enable_msg_trace=True, customized_trace_topic="bad topic")


# -- metrics -------------------------------------------------------------------------------------------
def test_send_metrics_reach_an_opentelemetry_reader(cluster: LocalCluster) -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.metrics")
    export = pytest.importorskip("opentelemetry.sdk.metrics.export")
    reader = export.InMemoryMetricReader()
    provider = sdk.MeterProvider(metric_readers=[reader])
    with Producer(
        namesrv_addr=cluster.namesrv_addr, group="metered", enable_metrics=True, meter_provider=provider
    ) as p:
        for i in range(3):
            p.send(Message("Orders", b"%d" % i))
        p.send_batch([Message("Orders", b"x"), Message("Orders", b"y")])
        client_id = p.client_id
    data = reader.get_metrics_data()
    points: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points[metric.name] = list(metric.data.data_points)
    [cost] = points["rocketmq_send_cost_time"]
    assert cost.count == 4
    assert dict(cost.attributes) == {"topic": "Orders", "client_id": client_id, "invocation_status": "success"}
    [messages] = points["rocketmq_messages_in_total"]
    assert messages.value == 5 and dict(messages.attributes)["message_type"] == "normal"
    assert points["rocketmq_throughput_in_total"][0].value > 0


def test_metrics_without_opentelemetry_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "otel_installed", lambda: False)
    assert metrics_module.meter() is None
    with pytest.raises(ConfigError, match=r"spark-rocketmq\[otel\]"):
        Producer(namesrv_addr="127.0.0.1:9", enable_metrics=True)


def test_the_sink_takes_the_trace_and_metrics_options_in_spark_spellings() -> None:
    from spark_rocketmq.client.config import ProducerConfig
    from spark_rocketmq.spark.options import split_options

    _, producer_options = split_options(
        {"topic": "Orders", "enablemsgtrace": "true", "customizedTraceTopic": "OrdersTrace", "enableMetrics": "false"}
    )
    config = ProducerConfig.from_mapping(producer_options)
    assert (config.enable_msg_trace, config.customized_trace_topic, config.enable_metrics) == (
        True,
        "OrdersTrace",
        False,
    )
    with pytest.raises(ConfigError, match="enable_msg_trace"):
        ProducerConfig.from_mapping({"enableMsgTrace": "sometimes"})


def test_end_transaction_hooks_see_check_back_answers(make_cluster: Callable[..., LocalCluster]) -> None:
    # 5.3.3: the broker stores its regionId (MSG_REGION) in each message, and so in the half it checks back
    cluster = make_cluster(transaction_check_interval_ms=200, transaction_timeout_ms=300, rocketmq_version="5.3.3")
    cluster.create_topic("Tx", queues=2)
    answered = threading.Event()

    def listener(check: Any) -> TransactionState:
        return TransactionState.COMMIT

    class Done(Recorder):
        def end_transaction(self, ctx: EndTransactionContext) -> None:
            super().end_transaction(ctx)
            answered.set()

    rec = Done()
    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-hooked", transaction_listener=listener) as p:
        p.register_end_transaction_hook(rec)
        # never ended: the broker checks it back
        handle = p.send_half(Message("Tx", b"left-to-the-check", tags="T", keys=["order-9", "user-4"]))
        assert answered.wait(30), "no check-back was answered"
    [ctx] = rec.ends[:1]
    assert (ctx.msg_id, ctx.transaction_state, ctx.from_transaction_check, ctx.topic) == (
        handle.msg_id,
        TransactionState.COMMIT,
        True,
        "Tx",
    )
    assert ctx.broker_addr == cluster.broker(handle.broker_name).addr
    # the half the broker sent with its check: its tags, keys and region, as Java's trace hook reads them
    assert (ctx.tags, ctx.keys, ctx.region_id) == ("T", "order-9 user-4", "DefaultRegion")
    record = end_transaction_record(ctx, "tx-hooked")
    assert (record.tags, record.keys, record.region_id) == ("T", "order-9 user-4", "DefaultRegion")
    assert end_transaction_record(dataclasses.replace(ctx, region_id="Hangzhou"), "g").region_id == "Hangzhou"
    assert encoded(record)[1] == [handle.msg_id, "order-9", "user-4"]  # the keys the trace message carries
