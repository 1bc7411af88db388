"""Through a RocketMQ 5.x Proxy (`rmq start proxy`, its remoting port as namesrv_addr), what the shared kit's
brokers cannot show or what breaks a broker: a recall that succeeds (a private cluster whose brokers run
recallMessageEnable=true, with a Proxy of its own), and broker-b killed behind the shared cluster's healthy
Proxy while a producer sends through it. Read back with the kit's Java consumer through the NameServer
(`rmq dump`). 5.x kits only: the 4.9.8 kit has no Proxy and no recall."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.client.hooks import SendMessageContext
from spark_rocketmq.client.results import SendResult
from spark_rocketmq.errors import RocketMQError

from .conftest import DISRUPTIVE, FAST_CHECKS_AND_RECALL, MEASURED, fresh_topic_name, wait_for
from .kit import Kit, read_kit_env
from .readback import sha256

GROUP = "spark_rocketmq_real_proxy_faults"
#: The recalled timer messages are due this far ahead, the control messages (kept) later on the same brokers:
#: a broker's timer wheel delivers in time order, so once a control message is stored, its broker's recalled
#: one would have been too.
RECALLED_S, KEPT_S = 5, 8
#: The broker's timer precision (timerPrecisionMs): a message may be stored up to this much before its time.
PRECISION_MS = 1000
#: How long the producer goes on sending through the Proxy after broker-b is killed.
AFTER_KILL_S = 10.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def proxy_port(cluster: Kit) -> int | None:
    """The remoting port of the cluster's Proxy (`rmq start proxy`), None for a kit without one (4.x)."""
    port = read_kit_env(cluster.folder).get("PORT_PROXY")
    return int(port) + cluster.shift if port else None


@contextmanager
def proxy_of(cluster: Kit) -> Iterator[str]:
    """The cluster's Proxy, started (rmq waits until it answers a route request) and killed afterwards."""
    port = proxy_port(cluster)
    assert port is not None, f"the RocketMQ {cluster.version} kit has no Proxy"
    cluster.rmq("start", "proxy", timeout=180)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        cluster.rmq("kill", "proxy", check=False)


def test_a_recall_through_the_proxy_cancels_the_timer_message(kit: Kit, private_kit: Callable[..., Kit]) -> None:
    """A timer message sent through the Proxy to each broker, and recalled through it before it is due: the
    recall answers the message's id, and once the later control message of each broker is stored (its wheel
    is past the recalled one's time), only the control messages are in the topic."""
    if kit.major < 5 or proxy_port(kit) is None:
        pytest.skip(f"recall through a Proxy is RocketMQ 5.3.2+; the RocketMQ {kit.version} kit has no Proxy")
    private = private_kit(props=FAST_CHECKS_AND_RECALL)  # test_timer's recall cluster: recallMessageEnable=true
    # created before the Proxy starts, so that its first look at the topic sees the DELAY type
    topic = private.topic(fresh_topic_name("proxy_recall"), queues=2, attributes="+message.type=DELAY")
    with proxy_of(private) as proxy, Producer(namesrv_addr=proxy, group=GROUP) as producer:
        assert producer.proxy_addr(topic) == proxy
        queues = {q.broker_name: q for q in producer.fetch_publish_queues(topic)}  # one queue of each broker
        assert set(queues) == {"broker-a", "broker-b"}
        sent_ms = now_ms()
        recalled = {
            b: producer.send(Message(topic, f"recalled-{b}".encode(), delay_time_sec=RECALLED_S), queue=q)
            for b, q in queues.items()
        }
        kept = {
            b: producer.send(Message(topic, f"kept-{b}".encode(), delay_time_sec=KEPT_S), queue=q)
            for b, q in queues.items()
        }
        answers = {b: producer.recall(topic, r.recall_handle or "") for b, r in recalled.items()}
        recalled_by_ms = now_ms()
    assert recalled_by_ms < sent_ms + RECALLED_S * 1000 - PRECISION_MS, "recalled too late to tell"
    assert all(r.recall_handle for r in (*recalled.values(), *kept.values()))
    assert {b: r.queue.broker_name for b, r in recalled.items()} == {b: b for b in queues}
    assert answers == {b: r.msg_id for b, r in recalled.items()}  # each broker's answer: the recalled id
    stored = private.dump(topic, at_least=2, timeout=90)
    assert sorted((m["broker"], m["uniq"]) for m in stored) == sorted((b, r.msg_id) for b, r in kept.items())
    assert {m["bodySha256"] for m in stored} == {sha256(f"kept-{b}") for b in queues}
    # the control messages were stored at their time, after the recalled ones were due
    assert min(m["storeTimestamp"] for m in stored) >= sent_ms + KEPT_S * 1000 - PRECISION_MS
    assert private.stored_count(topic) == 2  # the recalled ones never entered the topic's queues
    MEASURED.append(
        f"recall through the Proxy {proxy}: answered {answers} within {recalled_by_ms - sent_ms} ms of the first "
        f"send; stored: {sorted((m['broker'], m['uniq']) for m in stored)}"
    )


@dataclass
class Outcome:
    """One synchronous send through the Proxy: its body, when it started (wall-clock ms), and its answer."""

    body: str
    started_ms: int
    result: SendResult | None = None
    error: Exception | None = None


class Attempts:
    """A send hook: every attempt's broker (by name: behind a Proxy every attempt goes to its address), its start
    (wall-clock ms) and whether it failed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, int, BaseException | None]] = []

    def hook_name(self) -> str:
        return "Attempts"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        return None

    def send_message_after(self, ctx: SendMessageContext) -> None:
        with self.lock:
            self.seen.append((ctx.queue.broker_name, ctx.start_ms, ctx.exception))


def send_until(producer: Producer, topic: str, outcomes: list[Outcome], stop: threading.Event) -> None:
    """Send one message at a time, each with a body of its own, until ``stop``; every outcome recorded."""
    while not stop.is_set():
        outcome = Outcome(f"proxy-kill-{len(outcomes)}", now_ms())
        outcomes.append(outcome)
        try:
            outcome.result = producer.send(Message(topic, outcome.body.encode()))
        except RocketMQError as exc:  # what a user sees for a message not stored: an error, never silence
            outcome.error = exc


@pytest.fixture
def whole_again(kit: Kit) -> Iterator[Kit]:
    """The shared cluster, with both brokers running and registered again after the test whatever happened."""
    yield kit
    if not kit.whole("a", "b"):
        kit.start("a", "b")  # starts what is not running, and waits until both brokers are registered


@getattr(pytest.mark, DISRUPTIVE)
@pytest.mark.timeout(400)
def test_a_broker_killed_behind_the_proxy_loses_no_acknowledged_message(proxy_addr: str, whole_again: Kit) -> None:
    """A producer sending one message at a time through the shared cluster's Proxy, to both brokers, while
    broker-b is killed behind it (the Proxy healthy): every send is acknowledged or raises, every acknowledged
    message is stored on the broker its answer named, and after the kill broker-b is avoided by its name
    behind the Proxy's single address: at most one attempt goes there (and fails), every acknowledged send
    is broker-a's."""
    kit = whole_again
    topic = kit.topic(fresh_topic_name("proxy_kill"), queues=4)
    outcomes: list[Outcome] = []
    attempts = Attempts()
    stop = threading.Event()
    with Producer(namesrv_addr=proxy_addr, group=GROUP) as producer:
        assert producer.proxy_addr(topic) == proxy_addr
        producer.register_send_message_hook(attempts)
        sender = threading.Thread(target=send_until, args=(producer, topic, outcomes, stop), daemon=True)
        sender.start()
        try:

            def both_brokers_took(n: int) -> bool:
                names = [o.result.queue.broker_name for o in list(outcomes) if o.result]
                return min(names.count("broker-a"), names.count("broker-b")) >= n

            wait_for(lambda: both_brokers_took(50), timeout=60, every=0.05, what="50 sends to each broker")
            kill_started_ms = now_ms()
            kit.kill("b")  # while a send is in flight; returns once the process is gone
            killed_ms = now_ms()

            def sent_after_the_kill() -> bool:
                acked = sum(1 for o in list(outcomes) if o.result and o.started_ms > killed_ms)
                return acked >= 100 and now_ms() > killed_ms + AFTER_KILL_S * 1000

            wait_for(sent_after_the_kill, timeout=60, every=0.2, what="100 sends acknowledged, 10 s after the kill")
        finally:
            stop.set()
            sender.join(timeout=60)
    assert not sender.is_alive(), "a send did not return within 60 s"
    acked = [o for o in outcomes if o.result is not None]
    failed = [o for o in outcomes if o.error is not None]
    errors = [f"{o.body}: {o.error!r}"[:300] for o in failed]
    assert len(acked) + len(failed) == len(outcomes)  # every send answered one way or the other
    assert all(o.result.status.name == "SEND_OK" for o in acked)
    # none failed before the kill: a send ends within its timeout, so a failed one was in flight at the kill or later
    timeout_ms = producer.config.send_msg_timeout_ms
    assert all(o.started_ms > kill_started_ms - timeout_ms for o in failed), errors
    assert len(failed) <= 2, errors  # the send in flight to broker-b, and the first one routed there
    # after the kill, broker-b is avoided: at most one attempt is written to it, and it fails
    to_b = [(start, exc) for name, start, exc in attempts.seen if name == "broker-b" and start > killed_ms]
    assert len(to_b) <= 1 and all(exc is not None for _, exc in to_b), to_b
    after = [o for o in acked if o.started_ms > killed_ms]
    assert {o.result.queue.broker_name for o in after} == {"broker-a"}
    # nothing acknowledged is lost: broker-b's messages are read back once it runs again
    kit.restart("b")
    stored = kit.dump(topic, at_least=len(acked), timeout=120)
    where: dict[str, set[str]] = {}
    for m in stored:
        where.setdefault(m["bodySha256"], set()).add(m["broker"])
    lost = [o.body for o in acked if sha256(o.body) not in where]
    assert lost == [], f"{len(lost)} of {len(acked)} acknowledged messages not stored: {lost[:5]}"
    assert all(o.result.queue.broker_name in where[sha256(o.body)] for o in acked)
    assert set(where) <= {sha256(o.body) for o in outcomes}, "stored bodies that were never sent"
    before = sum(1 for o in outcomes if o.started_ms <= killed_ms)
    failed_stored = sum(1 for o in failed if sha256(o.body) in where)
    MEASURED.append(
        f"broker-b killed behind the Proxy: {len(outcomes)} sends, {before} before the kill returned; "
        f"{len(after)} acknowledged after it (all broker-a), {len(to_b)} attempts to broker-b after it; "
        f"{len(failed)} failed ({failed_stored} of them stored all the same): {'; '.join(errors)}"
    )
