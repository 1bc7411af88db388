"""The driver's commit phase against the end of its commit window: a COMMIT the driver wrote in time but whose
answer comes after the window (a loaded broker) must keep that half's check-backs from committing it too,
whatever the clock margin (spark/commit.py, TransactionLog.commits_in_flight)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.client.transaction import TransactionHandle
from spark_rocketmq.protocol.stored import offset_msg_id
from spark_rocketmq.protocol.transaction import TransactionState
from spark_rocketmq.spark import transaction_log
from spark_rocketmq.spark.commit import TransactionCoordinator
from spark_rocketmq.spark.options import SinkOptions
from spark_rocketmq.spark.report import PartitionSummary
from spark_rocketmq.spark.transaction_ids import handle_row

WINDOW_MS = 1000
ADDR = "127.0.0.1:10911"


class HeldAnswers:
    """A driver producer whose broker takes every END_TRANSACTION and answers none until ``answer_all``."""

    closed = False

    def __init__(self) -> None:
        self.unanswered: list[tuple[int, Any]] = []
        self.lock = threading.Lock()

    def fetch_publish_queues(self, topic: str) -> list[Any]:
        return []

    def end_transactions(self, batch: list[tuple[int, Any]], state: TransactionState, answered: Any, **kw: Any) -> None:
        with self.lock:
            self.unanswered += [(index, answered) for index, _ in batch]

    def answer_all(self) -> None:
        with self.lock:
            held, self.unanswered = self.unanswered, []
        for index, answered in held:
            answered(index, None)

    def close(self) -> None:
        self.closed = True


def _summary(halves: int) -> PartitionSummary:
    rows = []
    for i in range(halves):
        handle = TransactionHandle(
            "Late", "broker-a", ADDR, 0, 4096 + i, i, f"U{i}", offset_msg_id("127.0.0.1", 10911, 4096 + i)
        )
        rows.append(handle_row(handle, f"q/7/run1/0/0/{i}"))
    return PartitionSummary(handles=rows)


def test_a_commit_answered_after_the_window_is_never_committed_by_a_check_back_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transaction_log, "CLOCK_MARGIN_MS", 0)  # check-backs may commit from the window's end
    options = SinkOptions(
        topic="Late",
        delivery_guarantee="exactly_once",
        transaction_log_dir=str(tmp_path / "txlog"),
        transaction_commit_window_ms=WINDOW_MS,
    )
    coordinator = TransactionCoordinator(options, ProducerConfig(namesrv_addr="127.0.0.1:1", group="late-answers"))
    broker = HeldAnswers()
    monkeypatch.setattr(coordinator, "producer", lambda: broker)
    monkeypatch.setattr(coordinator, "proxy_of", lambda topics: None)
    answers: list[TransactionState] = []

    def broker_checks_back_then_answers() -> None:
        # the window is over and the driver still waits for its COMMITs' answers: the broker checks a half
        # back (its row not published yet: the COMMIT is queued behind it), then runs the COMMITs
        record = None
        while record is None or time.time() * 1000 <= record.checks_from_ms + 200:
            record = coordinator.log.recorded("q", 7)
            time.sleep(0.05)  # polling the record and the clock
        answers.append(coordinator.log.answer("q/7/run1/0/0/0", "U0", ADDR, lambda: False, queue_id=0))
        broker.answer_all()
        answers.append(coordinator.log.answer("q/7/run1/0/0/1", "U1", ADDR, lambda: True, queue_id=0))

    broker_side = threading.Thread(target=broker_checks_back_then_answers)
    broker_side.start()
    try:
        outcome = coordinator.commit("q", 7, [_summary(3)])
    finally:
        broker_side.join(timeout=30)
        coordinator.close()
    # UNKNOWN while its COMMIT was in flight (a COMMIT answer there would publish the row twice), then ROLLBACK
    # for a copy of a half whose COMMIT was answered SUCCESS
    assert answers == [TransactionState.UNKNOWN, TransactionState.ROLLBACK]
    assert (outcome.committed, outcome.left_to_check_back) == (3, 0)
