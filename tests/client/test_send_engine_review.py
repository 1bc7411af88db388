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
from spark_rocketmq.protocol.frame import RemotingCommand

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
