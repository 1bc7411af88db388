"""SendFuture behaves as concurrent.futures.Future whether or not anyone waited before it completed."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, CancelledError, InvalidStateError, as_completed, wait
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from spark_rocketmq.client.futures import SendFuture


def test_completed_before_anyone_waits() -> None:
    f: SendFuture[str] = SendFuture()
    assert not f.done()
    f.set_result("stored")
    assert f.done() and f.result() == "stored" and f.exception() is None and not f.cancelled()
    seen: list[object] = []
    f.add_done_callback(lambda done: seen.append(done.result()))  # called at once
    assert seen == ["stored"]
    assert "finished" in repr(f)


def test_exception_before_anyone_waits() -> None:
    f: SendFuture[str] = SendFuture()
    error = RuntimeError("refused")
    f.set_exception(error)
    assert f.exception() is error
    with pytest.raises(RuntimeError, match="refused"):
        f.result()


def test_a_waiting_thread_is_woken() -> None:
    f: SendFuture[int] = SendFuture()
    got: list[object] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        got.append(f.result(timeout=10))

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    with pytest.raises(FutureTimeout):
        f.result(timeout=0.01)  # pending: a timed wait times out
    f.set_result(7)
    t.join(10)
    assert got == [7]


def test_callbacks_added_while_pending_run_once_on_completion() -> None:
    f: SendFuture[int] = SendFuture()
    calls: list[int] = []
    f.add_done_callback(lambda done: calls.append(done.result()))
    f.add_done_callback(lambda done: calls.append(done.result() * 10))
    f.set_result(3)
    assert calls == [3, 30]


def test_wait_and_as_completed_see_both_kinds() -> None:
    early: SendFuture[str] = SendFuture()
    early.set_result("early")
    late: SendFuture[str] = SendFuture()
    done, pending = wait([early, late], timeout=0.01, return_when=FIRST_COMPLETED)
    assert done == {early} and pending == {late}
    threading.Timer(0.02, late.set_result, args=("late",)).start()
    assert sorted(f.result() for f in as_completed([early, late], timeout=10)) == ["early", "late"]


def test_states_are_final() -> None:
    f: SendFuture[int] = SendFuture()
    f.set_result(1)
    with pytest.raises(InvalidStateError):
        f.set_result(2)
    with pytest.raises(InvalidStateError):
        f.set_exception(RuntimeError())
    assert not f.cancel() and f.result() == 1
    cancelled: SendFuture[int] = SendFuture()
    assert cancelled.cancel()
    with pytest.raises(InvalidStateError):
        cancelled.set_result(1)
    with pytest.raises(CancelledError):
        cancelled.result()


def test_many_waiters_racing_completion_all_get_their_result() -> None:
    futures: list[SendFuture[int]] = [SendFuture() for _ in range(2000)]
    results: list[int | None] = [None] * len(futures)

    def wait_for(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            results[i] = futures[i].result(timeout=30)

    waiters = [threading.Thread(target=wait_for, args=(i * 500, (i + 1) * 500)) for i in range(4)]
    for t in waiters:
        t.start()
    for i, f in enumerate(futures):  # some are waited on first, some are completed first
        f.set_result(i)
    for t in waiters:
        t.join(30)
    assert results == list(range(len(futures)))


def test_callbacks_kept_while_pending_are_taken_over_by_a_later_waiter() -> None:
    f: SendFuture[int] = SendFuture()
    calls: list[int] = []
    f.add_done_callback(lambda done: calls.append(done.result()))  # no Condition made
    with pytest.raises(FutureTimeout):
        f.result(timeout=0.01)  # a waiter makes the Condition, which takes the callback over
    f.add_done_callback(lambda done: calls.append(done.result() + 1))
    f.set_result(5)
    assert calls == [5, 6]
    cancelled: SendFuture[int] = SendFuture()
    cancelled.add_done_callback(lambda done: calls.append(-1 if done.cancelled() else 0))
    assert cancelled.cancel()
    assert calls == [5, 6, -1]


def test_a_failing_callback_is_logged_and_the_next_runs(caplog: pytest.LogCaptureFixture) -> None:
    f: SendFuture[int] = SendFuture()
    calls: list[int] = []

    def boom(done: object) -> None:
        raise RuntimeError("callback broke")

    f.add_done_callback(boom)
    f.add_done_callback(lambda done: calls.append(1))
    f.set_result(0)
    assert calls == [1]
    assert "callback broke" in caplog.text
