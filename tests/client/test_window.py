"""A broker's in-flight window: slow start, halving on busy answers, additive growth, order of waiters."""

from __future__ import annotations

from dataclasses import dataclass

from spark_rocketmq.client.window import GROWTH_UNITS, INITIAL_WINDOW_UNITS, BrokerWindow, request_cost


@dataclass
class Req:
    name: str
    cost: int = 1
    deadline: float = 100.0


def test_requests_weigh_by_size() -> None:
    assert request_cost(100) == 1
    assert request_cost(16 * 1024 - 1) == 1
    assert request_cost(1024 * 1024) == 65
    assert request_cost(4 * 1024 * 1024) == 257


def test_a_full_window_queues_requests_in_order_and_lets_them_in_as_answers_come() -> None:
    w: BrokerWindow[Req] = BrokerWindow()
    admitted = [w.admit(Req(f"r{i}")) for i in range(INITIAL_WINDOW_UNITS + 3)]
    assert admitted == [True] * INITIAL_WINDOW_UNITS + [False] * 3
    assert [r.name for r in w.release(1)] == [f"r{INITIAL_WINDOW_UNITS}"]
    assert w.admit(Req("late")) is False  # behind those already waiting, even with room
    assert [r.name for r in w.release(2)] == [f"r{INITIAL_WINDOW_UNITS + 1}", f"r{INITIAL_WINDOW_UNITS + 2}"]


def test_a_request_larger_than_the_window_goes_alone() -> None:
    w: BrokerWindow[Req] = BrokerWindow(max_units=4)
    assert w.admit(Req("huge", cost=17)) is True
    assert w.admit(Req("next")) is False
    assert [r.name for r in w.release(17)] == ["next"]


def test_slow_start_doubles_then_a_busy_answer_halves_once_per_round_trip() -> None:
    w: BrokerWindow[Req] = BrokerWindow(max_units=10_000)
    for _ in range(INITIAL_WINDOW_UNITS):  # one round trip of answers
        w.grow(1)
    assert w.limit == 2 * INITIAL_WINDOW_UNITS
    w.cut(sent_at=w.last_cut + 1)
    assert w.limit == INITIAL_WINDOW_UNITS
    w.cut(sent_at=0.0)  # an answer to a request sent before the cut: no second halving
    assert w.limit == INITIAL_WINDOW_UNITS
    for _ in range(INITIAL_WINDOW_UNITS):  # above the threshold now: GROWTH_UNITS per window of answers
        w.grow(1)
    assert INITIAL_WINDOW_UNITS + GROWTH_UNITS - 1 < w.limit < INITIAL_WINDOW_UNITS + GROWTH_UNITS + 1


def test_the_window_never_grows_past_its_maximum_nor_shrinks_below_one() -> None:
    w: BrokerWindow[Req] = BrokerWindow(max_units=10)
    for _ in range(100):
        w.grow(5)
    assert w.limit == 10
    for i in range(20):
        w.cut(sent_at=w.last_cut + i + 1)
    assert w.limit == 1


def test_expired_waiters_are_taken_out() -> None:
    w: BrokerWindow[Req] = BrokerWindow(max_units=1)
    w.admit(Req("on the wire"))
    w.admit(Req("late", deadline=1.0))
    w.admit(Req("in time", deadline=10.0))
    assert [r.name for r in w.take_expired(5.0, lambda r: r.deadline)] == ["late"]
    assert [r.name for r in w.release(1)] == ["in time"]
