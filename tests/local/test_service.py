"""The service thread behind the local brokers' schedule, timer and transaction check services."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from spark_rocketmq.local.server import Freeze
from spark_rocketmq.local.service import ServiceThread


def _alive(name: str) -> bool:
    return any(t.name == name and t.is_alive() for t in threading.enumerate())


def _wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_a_failed_round_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    rounds: list[int] = []

    def work() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise ValueError("bad record")

    service = ServiceThread("svc-failing", 0.01, work, Freeze(), "delivering things failed")
    with caplog.at_level(logging.ERROR, logger="spark_rocketmq.local.service"):
        service.start()
        try:
            _wait_for(lambda: len(rounds) >= 3)
        finally:
            service.stop()
    assert not _alive("svc-failing")
    failures = [r for r in caplog.records if r.getMessage() == "svc-failing: delivering things failed"]
    assert len(failures) == 1
    assert failures[0].exc_info is not None and isinstance(failures[0].exc_info[1], ValueError)


def test_stop_ends_a_long_round_that_watches_stopping() -> None:
    entered = threading.Event()
    service: ServiceThread

    def work() -> None:
        entered.set()
        while not service.stopping.wait(0.01):
            pass

    service = ServiceThread("svc-long-round", 0.01, work, Freeze(), "round failed")
    service.start()
    assert entered.wait(5.0)
    service.stop(timeout_s=5.0)
    assert not _alive("svc-long-round")


def test_the_thread_leaves_when_its_server_shuts_down() -> None:
    freeze = Freeze()
    rounds: list[int] = []
    service = ServiceThread("svc-shutdown", 0.01, lambda: rounds.append(1), freeze, "round failed")
    service.start()
    try:
        _wait_for(lambda: len(rounds) >= 1)
        freeze.shutdown()
        _wait_for(lambda: not _alive("svc-shutdown"))
    finally:
        service.stop()


class _WatchedFreeze(Freeze):
    """A Freeze that tells when a thread came to pass it."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()

    def passage(self) -> bool:
        self.reached.set()
        return super().passage()


def test_a_hung_server_holds_the_service_until_it_is_thawed() -> None:
    freeze = _WatchedFreeze()
    freeze.freeze()
    rounds: list[int] = []
    service = ServiceThread("svc-hung", 0.01, lambda: rounds.append(1), freeze, "round failed")
    service.start()
    try:
        assert freeze.reached.wait(5.0)  # the thread holds before its first round
        assert rounds == []
        freeze.thaw()
        _wait_for(lambda: len(rounds) >= 1)
    finally:
        service.stop()
    assert not _alive("svc-hung")
