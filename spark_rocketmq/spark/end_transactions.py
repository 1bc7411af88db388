"""The driver's END_TRANSACTIONs of a batch (spark/commit.py's phase two): pipelined per broker, each
sent once, those that could not be written sent again to their brokerName's master while the window
lasts; the COMMITs still unanswered once the last is written are listed in flight in the transaction
log (TransactionLog.commits_in_flight), so that their check-backs are answered UNKNOWN until the answers
come."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

from ..client.transaction import TransactionHandle
from ..errors import BrokerError, CannotConnectError, RocketMQError
from ..protocol.transaction import TransactionState
from .transaction_log import TransactionLog

log = logging.getLogger("spark_rocketmq.spark")

#: END_TRANSACTION requests the driver keeps unanswered at most, per broker.
MAX_IN_FLIGHT = 512
#: END_TRANSACTIONs that could not be written (no connection to the half's master: it died) are sent again
#: to the brokerName's master in the route, this long after, while the commit window lasts: a DLedger group
#: or the controller elects a new master within seconds, holding the replicated halves at the same offsets.
NOT_WRITTEN_RESEND_S = 0.5
#: A COMMIT unanswered when the commit phase ends stays open this much longer for its answer (its
#: broker is frozen or overloaded; the default commit window and two of a broker's check intervals).
END_ANSWER_WAIT_S = 180.0


class EndTransactions:
    """Writes END_TRANSACTIONs from the driver's producer (``producer()``), after ``join(handles)`` has
    registered it with the halves' brokers."""

    def __init__(
        self,
        producer: Callable[[], Any],
        join: Callable[[list[tuple[TransactionHandle, str]]], None],
        tlog: TransactionLog,
    ) -> None:
        self._producer = producer
        self._join = join
        self._log = tlog

    def end_all(
        self, handles: list[tuple[TransactionHandle, str]], state: TransactionState, stop_at: float
    ) -> tuple[int, list[TransactionHandle]]:
        """END_TRANSACTION ``state`` for each handle until ``stop_at``: (answered SUCCESS, the others).

        Those that could not be written (no connection to the half's master: it died) are sent again to
        their brokerName's master in the route every NOT_WRITTEN_RESEND_S while the window lasts; the others
        are sent once (_end_round)."""
        txn = {h.offset_msg_id: t for h, t in handles}
        done_ok, unconfirmed, not_written = self._round(handles, state, stop_at)
        while not_written and time.monotonic() + NOT_WRITTEN_RESEND_S < stop_at:
            time.sleep(NOT_WRITTEN_RESEND_S)  # the route follows a failed master meanwhile (routes.py)
            again = [(h, txn[h.offset_msg_id]) for h in not_written]
            again_ok, again_left, not_written = self._round(again, state, stop_at)
            done_ok += again_ok
            unconfirmed += again_left
        if not_written:
            log.warning(
                "exactly_once: %d END_TRANSACTION %s could not be written to their brokers' masters within the "
                "commit window; their brokers' check-backs settle them from the transaction log",
                len(not_written), state.name,
            )  # fmt: skip
        return done_ok, unconfirmed + not_written

    def _round(
        self, handles: list[tuple[TransactionHandle, str]], state: TransactionState, stop_at: float
    ) -> tuple[int, list[TransactionHandle], list[TransactionHandle]]:
        """END_TRANSACTION ``state`` for each handle, each sent once, at most MAX_IN_FLIGHT unanswered per
        broker (a broker that stops answering holds back only its own halves), until ``stop_at``;
        (answered SUCCESS, the others, those that could not be written).

        The COMMITs still unanswered once the last is written (before ``stop_at``, so before the commit
        window ends) are listed in flight in the log (TransactionLog.commits_in_flight) until their answers
        come, whether this still waits for them or has returned (they stay open END_ANSWER_WAIT_S more: a
        frozen broker runs them when it wakes): their check-backs are answered UNKNOWN meanwhile, however
        short the clock margin after the window."""
        if not handles:
            return 0, [], []
        self._join(handles)
        producer = self._producer()
        #: Indexes of the handles not sent yet, by broker.
        queued: dict[str, deque[int]] = {}
        for index, (handle, _) in enumerate(handles):
            queued.setdefault(handle.broker_name, deque()).append(index)
        in_flight = dict.fromkeys(queued, 0)
        #: Requests sent and not settled yet, by their index in ``handles``.
        pending: dict[int, TransactionHandle] = {}
        #: Answered requests (index, error or None), queued by their callbacks on the I/O thread: settling
        #: one costs the same however many are in flight. Once this returns, a late answer goes to the log.
        completed: SimpleQueue[tuple[int, BaseException | None]] = SimpleQueue()
        returned = threading.Lock()
        awaiting = False  # set under ``returned`` once the writing is over: answers from then on go to the log too
        late = False  # set under ``returned`` when this returns
        tlog = self._log
        unconfirmed: list[TransactionHandle] = []
        not_written: list[TransactionHandle] = []
        done_ok = 0
        first_errors: list[str] = []

        def answered(index: int, exc: BaseException | None) -> None:
            with returned:
                if awaiting and state is TransactionState.COMMIT:
                    tlog.commit_answered(handles[index][0].offset_msg_id, exc)
                if not late:
                    completed.put((index, exc))

        def failed(handle: TransactionHandle, exc: BaseException) -> None:
            if isinstance(exc, CannotConnectError):  # never written: safe to send again, to a new master
                not_written.append(handle)
                return
            unconfirmed.append(handle)
            if len(first_errors) < 3:
                first_errors.append(f"{type(exc).__name__}: {exc}")

        def settle(until: float) -> bool:
            """Settle the answered requests, waiting until ``until`` (monotonic) for one; False if none came."""
            nonlocal done_ok
            try:
                index, exc = completed.get(timeout=max(0.0, until - time.monotonic()))
            except Empty:
                return False
            while True:
                handle = pending.pop(index)
                in_flight[handle.broker_name] -= 1
                if exc is None:
                    done_ok += 1
                else:
                    failed(handle, exc)
                try:
                    index, exc = completed.get_nowait()
                except Empty:
                    return True

        answer_within_ms = (max(0.0, stop_at - time.monotonic()) + END_ANSWER_WAIT_S) * 1000.0
        while any(queued.values()) and time.monotonic() < stop_at:
            for broker, indexes in queued.items():
                room = min(MAX_IN_FLIGHT - in_flight[broker], len(indexes))
                if room <= 0:
                    continue
                batch = [(index, handles[index][0]) for index in (indexes.popleft() for _ in range(room))]
                pending.update(batch)
                in_flight[broker] += room
                try:
                    producer.end_transactions(batch, state, answered, timeout_ms=answer_within_ms)
                except RocketMQError as exc:  # the producer is closed: none of them was sent
                    for index, handle in batch:
                        if pending.pop(index, None) is not None:
                            in_flight[broker] -= 1
                            failed(handle, exc)
            if any(queued.values()):
                settle(stop_at)  # every broker with halves left has MAX_IN_FLIGHT unanswered
        with returned:  # the COMMITs still unanswered are listed in flight before the window may end
            while settle(0.0):
                pass
            if state is TransactionState.COMMIT:
                tlog.commits_in_flight([h.offset_msg_id for h in pending.values()])
            awaiting = True  # their answers from now on go to the log too
        while pending and settle(stop_at + 5.0):
            pass
        with returned:
            while settle(0.0):
                pass
            late = True
        unconfirmed += list(pending.values())  # unanswered: their brokers may or may not have acted
        unconfirmed += [handles[i][0] for indexes in queued.values() for i in indexes]  # the window was over
        left = len(unconfirmed)
        if left:
            kind = "BrokerError" if any(e.startswith(BrokerError.__name__) for e in first_errors) else "no answer"
            log.warning(
                "exactly_once: %d of %d END_TRANSACTION %s not confirmed (%s, e.g. %s; %d still awaiting an "
                "answer); their brokers' check-backs settle them from the transaction log",
                left, len(handles), state.name, kind, "; ".join(first_errors) or "commit window over", len(pending),
            )  # fmt: skip
        return done_ok, unconfirmed, not_written
