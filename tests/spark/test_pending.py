"""A writer's pending requests on a clock the test gives: resend times, the delivery deadline, order per queue."""

from __future__ import annotations

import pytest

from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.spark.pending import KeyOrder, PendingRequest, Resends

Q0 = MessageQueue("T", "broker-a", 0)
Q1 = MessageQueue("T", "broker-a", 1)


def request(taken: float = 100.0, queue: MessageQueue | None = None, sends: int = 1) -> PendingRequest:
    req = PendingRequest("T", 10, queue, taken, body=b"x" * 10)
    req.sends = sends
    return req


def test_a_failed_request_is_resent_after_a_wait_growing_with_its_sends() -> None:
    resends = Resends(delivery_timeout_s=60.0)
    first, third = request(sends=1), request(sends=3)
    assert resends.schedule(first, now=110.0) and resends.schedule(third, now=110.0)
    assert first.resend_at == pytest.approx(110.1) and third.resend_at == pytest.approx(110.4)
    assert resends.next_at() == pytest.approx(110.1)
    assert resends.due(110.05) == []
    assert resends.due(110.1) == [first]
    assert len(resends) == 1 and resends.next_at() == pytest.approx(110.4)
    assert resends.due(111.0) == [third]
    assert resends.next_at() is None


def test_no_resend_after_the_delivery_deadline_and_none_later_than_it() -> None:
    resends = Resends(delivery_timeout_s=30.0)
    late = request(taken=100.0, sends=6)
    assert resends.schedule(late, now=129.5)
    assert late.resend_at == pytest.approx(130.0)  # 2 s wanted, 0.5 s left
    assert not resends.schedule(request(taken=100.0), now=130.0)
    assert resends.drain() == [late] and len(resends) == 0


def test_only_the_first_request_of_a_queue_is_sent_and_the_next_follows_it() -> None:
    order = KeyOrder()
    a, b, c, other = request(queue=Q0), request(queue=Q0), request(queue=Q0), request(queue=Q1)
    assert order.admit(a) and not order.admit(b) and not order.admit(c)
    assert order.admit(other)
    assert order.settled(a, delivered=True) == (b, [])
    assert order.settled(b, delivered=True) == (c, [])
    assert order.settled(c, delivered=True) == (None, [])
    assert not order.blocked(Q0)


def test_an_undelivered_request_fails_the_rest_of_its_queue_unsent_and_blocks_it() -> None:
    order = KeyOrder()
    a, b, c = request(queue=Q0), request(queue=Q0), request(queue=Q0)
    for req in (a, b, c):
        order.admit(req)
    assert order.settled(a, delivered=False) == (None, [b, c])
    assert order.blocked(Q0) and not order.blocked(Q1)
    assert order.settled(request(), delivered=True) == (None, [])  # no queue: nothing to order
