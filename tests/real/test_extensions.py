"""The producer's extension points against a real RocketMQ kit: a queue selector's choice read back by the
Java consumer, send hooks on every kind of send (and on failures against a killed broker), a forbidding
hook that stores nothing, and message trace read by the kit's own `mqadmin queryMsgTraceById`.

Trace tests run on a private cluster whose brokers have traceTopicEnable=true (RMQ_SYS_TRACE_TOPIC exists
only then). mqadmin prints Pub records only; EndTransaction records are read from the trace topic by
QUERY_MESSAGE with the message id, the key the trace message carries for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import Message, MessageQueue, Producer, RocketMQSink, TransactionState
from spark_rocketmq.client.hooks import CheckForbiddenContext, SendMessageContext
from spark_rocketmq.client.namesrv import NameServerClient
from spark_rocketmq.client.remoting import RemotingClient
from spark_rocketmq.errors import SendForbiddenError
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.stored import decode_stored_messages
from spark_rocketmq.protocol.trace import (
    RMQ_SYS_TRACE_TOPIC,
    EndTransactionTrace,
    MessageType,
    PubTrace,
    TraceRecord,
    decode_trace_records,
)
from spark_rocketmq.protocol.transaction import query_uniq_key_request

from .conftest import ONCE
from .kit import Kit

pytestmark = pytest.mark.realcluster

GROUP = "spark_rocketmq_extensions"
TRACE_PROPS = "traceTopicEnable=true"


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.after: list[SendMessageContext] = []

    def hook_name(self) -> str:
        return "Recorder"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        return None

    def send_message_after(self, ctx: SendMessageContext) -> None:
        with self.lock:
            self.after.append(ctx)


@pytest.fixture
def trace_kit(kit: Kit, private_kit: Callable[..., Kit]) -> Kit:
    """The tier's cluster when its brokers serve RMQ_SYS_TRACE_TOPIC (the NameServer routes it), else a
    private one with traceTopicEnable=true."""
    client = RemotingClient(connect_timeout_ms=5000)
    try:
        routed = NameServerClient(client, [kit.namesrv_addr], 5000).get_route(RMQ_SYS_TRACE_TOPIC) is not None
    finally:
        client.close()
    return kit if routed else private_kit(props=TRACE_PROPS)


def eventually(read: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """``read()`` again about once a second until it gives something (a broker indexes a trace message
    moments after storing it; the tracer sends within 500 ms)."""
    deadline = time.monotonic() + timeout
    while True:
        found = read()
        if found or time.monotonic() > deadline:
            assert found, f"no {what} after {timeout:.0f} s"
            return found
        time.sleep(1.0)


def mqadmin_trace(kit: Kit, msg_id: str) -> str:
    """`mqadmin queryMsgTraceById -i MSG_ID` once it prints a Pub line."""

    def read() -> str:
        out = kit.admin("queryMsgTraceById", "-i", msg_id, "-n", kit.namesrv_addr)
        return out if any(line.startswith("Pub ") for line in out.splitlines()) else ""

    return str(eventually(read, f"Pub trace of {msg_id} from mqadmin"))


def trace_records(kit: Kit, msg_id: str, topic: str = RMQ_SYS_TRACE_TOPIC) -> list[TraceRecord]:
    """The records of ``msg_id`` in the trace topic, from every broker's index (QUERY_MESSAGE by key)."""
    client = RemotingClient(connect_timeout_ms=5000)
    found: list[TraceRecord] = []
    try:
        for broker in ("a", "b"):
            cmd = query_uniq_key_request(topic, msg_id, 0, int(time.time() * 1000) + 60_000)
            answer = client.invoke_sync(kit.broker_addr(broker), cmd, 10_000)
            if answer.code != ResponseCode.SUCCESS:
                continue
            for stored in decode_stored_messages(bytes(answer.body)):
                if stored.topic == topic:
                    found += [
                        r for r in decode_trace_records(stored.decompressed_body().decode()) if r.msg_id == msg_id
                    ]
    finally:
        client.close()
    return found


# -- selectors and hooks -------------------------------------------------------------------------------
def test_selector_stores_each_message_on_the_queue_it_chose(kit: Kit, real_addr: str, real_topic: str) -> None:
    kit.topic(real_topic)  # on both brokers before the first send: the selector is given all 8 queues
    with Producer(namesrv_addr=real_addr, group=GROUP) as p:
        queues = p.fetch_publish_queues(real_topic)
        assert len(queues) == 8

        def by_arg(qs: list[MessageQueue], message: Message, arg: Any) -> MessageQueue:
            return qs[arg % len(qs)]

        results = [p.send(Message(real_topic, b"sel-%d" % i), selector=by_arg, arg=i) for i in range(16)]
    stored = {m["uniq"]: (m["broker"], m["queue"]) for m in kit.dump(real_topic, at_least=16)}
    for i, r in enumerate(results):
        chosen = queues[i % 8]
        assert stored[r.msg_id] == (chosen.broker_name, chosen.queue_id)


def test_hooks_see_single_batch_half_and_oneway_sends(kit: Kit, real_addr: str, real_topic: str) -> None:
    rec = Recorder()
    with Producer(namesrv_addr=real_addr, group=GROUP) as p:
        p.register_send_message_hook(rec)
        single = p.send(Message(real_topic, b"one", tags="T"))
        [batch] = p.send_batch([Message(real_topic, b"b1"), Message(real_topic, b"b2")])
        handle = p.send_half(Message(real_topic, b"half"))
        p.end_transaction(handle, TransactionState.COMMIT)
        p.send_oneway(Message(real_topic, b"oneway"))
    kit.dump(real_topic, at_least=5)
    # an attempt that failed (a busy or slow broker) was retried: the hooks saw it too, with its exception
    done = [c for c in rec.after if c.exception is None]
    assert all(c.send_result is None for c in rec.after if c.exception is not None)
    assert [(c.communication_mode, c.msg_type, c.message_count) for c in done] == [
        ("SYNC", MessageType.NORMAL_MSG, 1),
        ("SYNC", MessageType.NORMAL_MSG, 2),
        ("ASYNC", MessageType.TRANS_MSG_HALF, 1),
        ("ONEWAY", MessageType.NORMAL_MSG, 1),
    ]
    assert [c.send_result for c in done[:2]] == [single, batch]
    assert done[2].send_result is not None and done[2].send_result.msg_id == handle.msg_id
    assert done[0].broker_addr == kit.broker_addr(single.queue.broker_name[-1])


def test_hooks_see_the_failed_attempts_against_a_killed_broker(make_kit: Callable[..., Kit]) -> None:
    cluster = make_kit()
    topic = cluster.topic("ExtKilled")
    dead = cluster.broker_addr("b")
    rec = Recorder()
    outcomes: list[str] = []
    # No latency avoidance (a fresh broker's slow first answers would keep the sends off it), and time for
    # those answers on a busy machine.
    options = {"retry_times_when_send_failed": 2, "send_latency_fault_enable": False, "send_msg_timeout_ms": 15_000}
    with Producer(namesrv_addr=cluster.namesrv_addr, group=GROUP, **options) as p:
        p.register_send_message_hook(rec)
        p.send(Message(topic, b"warm"))
        cluster.kill("b")
        for i in range(8):
            try:
                outcomes.append(p.send(Message(topic, b"after-%d" % i)).queue.broker_name)
            except Exception as exc:
                outcomes.append(repr(exc))
    attempts = [(c.attempt, c.broker_addr, repr(c.exception)[:60]) for c in rec.after]
    assert outcomes == ["broker-a"] * 8, attempts
    failed = [c for c in rec.after if c.exception is not None]
    assert failed, "no attempt went to the killed broker"
    assert all(c.broker_addr == dead and c.send_result is None for c in failed), attempts
    assert all(c.attempt == 1 for c in failed), attempts  # each retried, on broker-a, as attempt 2


def test_a_forbidding_hook_stores_nothing(kit: Kit, real_addr: str, real_topic: str) -> None:
    class OnlyTagged:
        def hook_name(self) -> str:
            return "OnlyTagged"

        def check_forbidden(self, ctx: CheckForbiddenContext) -> None:
            if any("TAGS" not in m.properties for m in ctx.messages()):
                raise PermissionError("untagged messages may not be sent")

    kit.topic(real_topic)
    with Producer(namesrv_addr=real_addr, group=GROUP) as p:
        p.register_check_forbidden_hook(OnlyTagged())
        with pytest.raises(SendForbiddenError, match="OnlyTagged refused"):
            p.send(Message(real_topic, b"untagged"))
        with pytest.raises(SendForbiddenError):
            p.send_batch([Message(real_topic, b"t", tags="x"), Message(real_topic, b"u")])
        with pytest.raises(SendForbiddenError):
            p.send_async(Message(real_topic, b"async-untagged")).result(30)
        allowed = p.send(Message(real_topic, b"tagged", tags="x"))
    [stored] = kit.dump(real_topic, at_least=1)
    assert stored["uniq"] == allowed.msg_id


# -- message trace -------------------------------------------------------------------------------------
def test_trace_of_a_producer_message_and_of_a_batch_message(trace_kit: Kit, real_topic: str) -> None:
    with Producer(namesrv_addr=trace_kit.namesrv_addr, group="ext-traced", enable_msg_trace=True) as p:
        single = p.send(Message(real_topic, b"traced", tags="T", keys="order-1"))
        [batch] = p.send_batch([Message(real_topic, b"b1"), Message(real_topic, b"b2", keys="k2")])
        assert p.tracer is not None
    assert p.tracer.failed == 0 and p.tracer.written >= 1
    assert single.trace_on and batch.trace_on  # the brokers answered TRACE_ON=true (traceOn's default)
    for msg_id in (single.msg_id, batch.msg_id.split(",")[1]):
        out = mqadmin_trace(trace_kit, msg_id)
        [pub] = [line.split() for line in out.splitlines() if line.startswith("Pub ")]
        assert pub[1] == "ext-traced" and pub[-1] == "success"
    [record] = trace_records(trace_kit, single.msg_id)
    assert isinstance(record, PubTrace)
    assert (record.topic, record.tags, record.keys, record.offset_msg_id) == (
        real_topic,
        "T",
        "order-1",
        single.offset_msg_id,
    )
    assert record.store_host == trace_kit.broker_addr(single.queue.broker_name[-1])


def test_sends_to_a_broker_with_trace_off_are_left_out_of_the_trace(
    private_kit: Callable[..., Kit], real_topic: str
) -> None:
    """A broker with traceOn=false answers TRACE_ON=false (SendMessageProcessor): the tracer writes no record
    of its sends, as the Java client's SendMessageTraceHookImpl skips them."""
    kit = private_kit(brokers=("a",), props=f"{TRACE_PROPS}\ntraceOn=false")
    with Producer(namesrv_addr=kit.namesrv_addr, group="ext-untraced", enable_msg_trace=True) as p:
        single = p.send(Message(real_topic, b"untraced"))
        [batch] = p.send_batch([Message(real_topic, b"u1"), Message(real_topic, b"u2")])
        assert p.tracer is not None
    assert not single.trace_on and not batch.trace_on
    assert (p.tracer.written, p.tracer.failed, p.tracer.dropped) == (0, 0, 0)


def test_trace_goes_to_a_customized_topic(kit: Kit, real_addr: str, real_topic: str) -> None:
    trace_topic = kit.topic(f"{real_topic}_trace")
    with Producer(
        namesrv_addr=real_addr, group="ext-traced", enable_msg_trace=True, customized_trace_topic=trace_topic
    ) as p:
        sent = p.send(Message(real_topic, b"to-custom"))
    records = eventually(lambda: trace_records(kit, sent.msg_id, trace_topic), "trace in the customized topic")
    assert [type(r) for r in records] == [PubTrace]
    out = kit.admin("queryMsgTraceById", "-i", sent.msg_id, "-t", trace_topic, "-n", kit.namesrv_addr)
    assert any(line.startswith("Pub ") and "ext-traced" in line for line in out.splitlines())


def test_trace_of_a_sink_row_and_of_an_exactly_once_row(
    spark: Any, trace_kit: Kit, real_topic: str, tmp_path: Path
) -> None:
    rows = spark.range(0, 200, numPartitions=2).select(
        F.concat(F.lit("traced-row-"), F.col("id").cast("string")).alias("body"),
        F.concat(F.lit("k-"), F.col("id").cast("string")).alias("keys"),
    )
    common = {"namesrv_addr": trace_kit.namesrv_addr, "group": "ext-traced-sink", "enableMsgTrace": "true"}
    RocketMQSink(topic=real_topic, **common)(rows, 0)
    row = trace_kit.dump(real_topic, at_least=200)[17]
    out = mqadmin_trace(trace_kit, row["uniq"])
    assert any(line.split()[:2] == ["Pub", "ext-traced-sink"] for line in out.splitlines())
    [pub] = trace_records(trace_kit, row["uniq"])
    assert isinstance(pub, PubTrace) and pub.keys == row["keys"] and pub.topic == real_topic

    eo_topic = f"{real_topic}_eo"
    RocketMQSink(
        topic=eo_topic,
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(tmp_path / "log"),
        id_namespace="ext-traced",
        **common,
    )(rows.limit(20), 0)
    committed = trace_kit.dump(eo_topic, at_least=20)[3]["uniq"]

    def both() -> list[TraceRecord]:
        found = trace_records(trace_kit, committed)
        return found if {type(r) for r in found} == {PubTrace, EndTransactionTrace} else []

    records = eventually(both, "Pub and EndTransaction traces of an exactly_once row")
    [half] = [r for r in records if isinstance(r, PubTrace)]
    [end] = [r for r in records if isinstance(r, EndTransactionTrace)]
    assert half.msg_type == MessageType.TRANS_MSG_HALF
    assert (end.transaction_state, end.from_transaction_check, end.topic) == ("COMMIT_MESSAGE", False, eo_topic)
    mqadmin_trace(trace_kit, committed)  # the half's Pub record, as mqadmin prints it


@getattr(pytest.mark, ONCE)  # a Spark job of its own whose trace nothing in the broker version changes
def test_every_row_is_traced_when_spark_stops_right_after_the_write(trace_kit: Kit, real_topic: str) -> None:
    """A batch application that stops Spark right after its write (tests/spark/test_trace_flush.py's job, in a
    process of its own, Python workers not reused: each ends with its task): every row's Pub record is in
    the trace topic, written by the tasks before they ended."""
    from tests.spark import test_trace_flush as job

    out = job.run_job(trace_kit.namesrv_addr, real_topic, "sink", "false")
    assert out["messages"] == job.ROWS
    ids = {m["uniq"] for m in trace_kit.dump(real_topic, at_least=job.ROWS)}
    assert len(ids) == job.ROWS
    traced: set[str] = set()

    def all_traced() -> bool:  # the writers are gone: only the brokers' indexing is waited for
        for msg_id in sorted(ids - traced):
            if msg_id not in traced:
                traced.update(r.msg_id for r in trace_records_of(trace_kit, msg_id) if r.topic == real_topic)
        return not ids - traced

    try:
        eventually(all_traced, f"Pub records of all {job.ROWS} rows", timeout=30.0)
    except AssertionError:
        logged = out["trace_warnings"]
        raise AssertionError(f"{len(ids - traced)} of {job.ROWS} rows not traced; the tasks logged {logged}") from None
    mqadmin_trace(trace_kit, min(ids))  # as an operator reads one


def trace_records_of(kit: Kit, msg_id: str) -> list[PubTrace]:
    """Every Pub record of the trace messages that hold ``msg_id``'s (each holds hundreds of rows')."""
    client = RemotingClient(connect_timeout_ms=5000)
    found: list[PubTrace] = []
    try:
        for broker in ("a", "b"):
            cmd = query_uniq_key_request(RMQ_SYS_TRACE_TOPIC, msg_id, 0, int(time.time() * 1000) + 60_000)
            answer = client.invoke_sync(kit.broker_addr(broker), cmd, 10_000)
            if answer.code != ResponseCode.SUCCESS:
                continue
            for stored in decode_stored_messages(bytes(answer.body)):
                text = stored.decompressed_body().decode()
                found += [r for r in decode_trace_records(text) if isinstance(r, PubTrace)]
    finally:
        client.close()
    return found
