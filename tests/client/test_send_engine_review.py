"""Send-engine liveness and Java-parity cases found in review, each against a local cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from spark_rocketmq import Message, Producer, SendResult
from spark_rocketmq.errors import RemotingTooMuchRequestError, RocketMQError
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand

from .frame_server import FrameServer


def producer(cluster: LocalCluster, **options: object) -> Producer:
    return Producer(namesrv_addr=cluster.namesrv_addr, group="review_tests", **options)


def poll(check: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def test_close_settles_a_send_waiting_for_its_busy_backoff(make_cluster: Callable[..., LocalCluster]) -> None:
    """A send whose resend after a busy answer is scheduled when close() gives up waiting must fail, not
    stay pending for ever."""
    c = make_cluster(brokers=1)
    c.create_topic("Orders", queues=2)
    p = producer(c, send_msg_timeout_ms=10_000)
    try:
        p.send(Message("Orders", b"route"))
        c.broker("broker-a").inject(code=ResponseCode.SYSTEM_BUSY)
        fut: Future[SendResult] = p.send_async(Message("Orders", b"busy"))
        assert poll(lambda: p.stats().busy_answers >= 3)  # backing off: 50, 100, 200 ms ...
    finally:
        p.close(timeout_s=0.0)
    with pytest.raises(RocketMQError):
        fut.result(timeout=3.0)
    assert p.stats().in_flight == 0


def test_close_keeps_its_timeout_while_a_route_refresh_waits_on_a_silent_namesrv(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """close(timeout_s) returns within its timeout even while the background route refresh is stuck in a
    NameServer request that gets no answer."""
    c = make_cluster(brokers=1)
    c.create_topic("Orders", queues=2)
    silent = threading.Event()
    released = threading.Event()

    def handle(cmd: RemotingCommand) -> RemotingCommand | None:
        if silent.is_set():
            released.wait(10.0)
            return None
        route = c.namesrv(0).route(cmd.require("topic"))
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark="no route")
        return cmd.response(ResponseCode.SUCCESS, body=route.to_json())

    namesrv = FrameServer(handle)
    namesrv.start()
    try:
        p = Producer(namesrv_addr=namesrv.addr, group="review_tests", poll_name_server_interval_ms=50)
        p.send(Message("Orders", b"route cached"))
        silent.set()
        seen = len(namesrv.requests)
        assert poll(lambda: len(namesrv.requests) > seen)  # a refresh now waits for an answer
        begin = time.monotonic()
        p.close(timeout_s=0.2)
        assert time.monotonic() - begin < 0.2 + 0.4, "close() waited for the route refresh past its timeout"
    finally:
        released.set()
        namesrv.stop()


def test_a_send_from_a_callback_run_by_a_timeout_does_not_stop_the_timeouts(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """A future that fails by its deadline is settled on the connection scanner's thread. A callback that
    sends again there finds no room (max_in_flight) and must get RemotingTooMuchRequestError, as on a reader
    thread, not wait: waiting would stop the thread that ends every request at its deadline."""
    c = make_cluster(brokers=1)
    c.create_topic("Orders", queues=1)
    p = producer(c, send_msg_timeout_ms=300, max_in_flight=1)
    outcome: list[object] = []
    resent: list[Future[SendResult]] = []

    def resend_in_two(_: Future[SendResult]) -> None:
        try:
            resent.append(p.send_async(Message("Orders", b"first half")))
            resent.append(p.send_async(Message("Orders", b"second half")))
            outcome.append("sent")
        except RocketMQError as exc:
            outcome.append(exc)

    try:
        p.send(Message("Orders", b"route"))
        c.broker("broker-a").hang()
        p.send_async(Message("Orders", b"whole")).add_done_callback(resend_in_two)
        assert poll(lambda: bool(outcome), timeout_s=5.0), "the callback is still waiting for room"
        assert isinstance(outcome[0], RemotingTooMuchRequestError)
        with pytest.raises(RocketMQError):
            resent[0].result(timeout=3.0)  # and the first resend still ends at its deadline
    finally:
        p.close(timeout_s=0.0)
        c.broker("broker-a").resume()


def test_a_oneway_send_to_a_broker_that_cannot_be_reached_raises(make_cluster: Callable[..., LocalCluster]) -> None:
    """invokeOneway needs the channel: a stopped broker still in the route is an error, and its broker is
    marked, never a frame dropped in silence."""
    c = make_cluster(brokers=1)
    c.create_topic("Orders", queues=2)
    with producer(c) as p:
        p.send_oneway(Message("Orders", b"reached"))
        assert poll(lambda: len(c.messages("Orders")) == 1)
        c.broker("broker-a").stop()  # the route still names it until the NameServer expires it
        p.refresh_routes()
        with pytest.raises(RocketMQError):
            for _ in range(3):  # the connection the broker's stop closed may take one send to notice
                p.send_oneway(Message("Orders", b"lost?"))
        assert not p.fault_strategy.is_available("broker-a")


def _race_close_against_requests(addr: str) -> tuple[int, int]:
    """Add requests from a thread while the connection closes: (requests queued, callbacks run)."""
    from spark_rocketmq.client.connection import Connection

    conn = Connection(addr, connect_timeout_s=2.0)
    calls: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()
    queued = [0]

    def done(answer: object, error: object) -> None:
        with lock:
            calls.append(1)

    def add() -> None:
        while not stop.is_set():
            try:
                conn.request_with_callback(RemotingCommand(code=10), time.monotonic() + 30, done)
            except RocketMQError:
                return
            queued[0] += 1

    adder = threading.Thread(target=add)
    adder.start()
    poll(lambda: queued[0] > 50)
    conn.close()
    stop.set()
    adder.join()
    poll(lambda: len(calls) == queued[0])
    return queued[0], len(calls)


def test_a_request_racing_close_is_settled_exactly_once() -> None:
    """A connection closed while requests are being added: every callback runs once, none is left."""
    server = FrameServer(lambda cmd: None)  # never answers
    server.start()
    try:
        for _ in range(20):
            queued, settled = _race_close_against_requests(server.addr)
            assert settled == queued
    finally:
        server.stop()
