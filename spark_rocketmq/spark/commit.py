"""The driver's half of exactly_once: record a batch's half messages, commit them, mark the batch.

Phase one runs on the executors (each row a half message, its handle reported with the task's
summary). Phase two is here, on the driver, once every task has reported:

1. ``record``: the handles of the accepted task attempts are written to the transaction log (the
   decision to commit, and the end of the driver's commit window);
2. END_TRANSACTION COMMIT for each, pipelined (``MAX_IN_FLIGHT`` unanswered per broker) from the driver's
   producer, until every one is answered or the commit window is nearly over; a half whose answer did
   not come is left to its broker's check-back (answered from the log, never committed twice: UNKNOWN
   while its COMMIT, still open, may yet be run by a broker that froze holding it);
3. ``mark_committed``.

Check-backs are asked of the driver's producer alone: it is the only producer that joins the group
(the executors' do not), so one process decides every half and ``TransactionLog.answer`` never
commits two copies of one half.

A batch that fails (undelivered or invalid rows, a task that failed for good) is marked aborted in
the log first, then every half the driver knows of is rolled back; the halves it does not know of
(failed attempts) are rolled back when their brokers check them back. A recorded batch is never
aborted: an abort after the record (Spark aborts a data source write whose commit raised) rolls back
only the halves outside the record.

Through a RocketMQ 5.x Proxy (its remoting port answers END_TRANSACTION SUCCESS and drops it,
apache/rocketmq#8313) the driver sends none: it records the batch with each queue's max offset, which
lets it read from the queues whether a row is published (the Proxy refuses QUERY_MESSAGE), and the
brokers' check-backs, relayed by the Proxy to the driver's producer and answered COMMIT from the log,
publish the rows (docs/proxy.md); close() waits for them.

END_TRANSACTION is sent from the driver: measured against a real 4.9.8 pair, the driver commits
tens of thousands of halves a second from one connection per broker (see docs/benchmarks.md), so a second
Spark job on the executors would cost more in scheduling than it saves.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from ..client.policy import PUBLISHED_CHECK_BACKOFF
from ..client.transaction import TransactionHandle
from ..errors import RocketMQError
from ..protocol.route import MessageQueue
from ..protocol.transaction import TransactionState
from . import transaction_log
from .end_transactions import EndTransactions
from .options import SinkOptions
from .proxy_commit import ProxyCommits
from .published_scan import PublishedScan, queue_of
from .report import DeliveryReport, PartitionSummary
from .transaction_ids import parse_handle_row
from .transaction_listener import answer_check, claim_group, release_group, sink_group
from .transaction_log import BatchState, Recorded, TransactionLog

log = logging.getLogger("spark_rocketmq.spark")

#: Threads answering the driver producer's check-backs: an answer may wait for a QUERY_MESSAGE round
#: trip, and a broker that checks back hundreds of halves at once (after a restart) copies and asks again
#: about each one not answered within its check interval.
CHECK_THREADS = 8
#: The driver's producer heartbeats its brokers and polls its routes at least this often: a restarted
#: broker asks check-backs only of producers that heartbeated since, and each of its check rounds
#: without one counts against transactionCheckMax (15), after which it drops the half.
DRIVER_REFRESH_MS = 5_000
#: close() waits at most this long after the commit window for halves left to check-backs to be
#: published (two of a broker's default check intervals, 60 s each, and some).
SETTLE_AFTER_WINDOW_S = 150.0


@dataclass
class CommitOutcome:
    #: What became of the batch: "committed" or "aborted" (an abort after the record commits).
    transaction: str = "committed"
    committed: int = 0
    left_to_check_back: int = 0
    rolled_back: int = 0
    seconds: float = 0.0
    #: The RocketMQ Proxy the halves went through (their check-backs commit them), or None.
    through_proxy: str | None = None


def batch_handles(summaries: list[PartitionSummary]) -> list[tuple[TransactionHandle, str]]:
    """(handle, SPARK_TXN) of every half the accepted task attempts stored."""
    return [parse_handle_row(row) for s in summaries for row in s.handles]


class TransactionCoordinator:
    """One sink's driver side of exactly_once; keeps a producer that also answers check-backs."""

    def __init__(self, options: SinkOptions, producer_config: Any) -> None:
        assert options.transaction_log_dir is not None
        self.options = options
        self.producer_config = producer_config
        self.group = sink_group(producer_config)
        self._producer: Any = None
        #: Halves of committed batches whose COMMIT was not confirmed, and when check-backs take them.
        self._left: list[TransactionHandle] = []
        self._left_until = 0.0
        self.log: TransactionLog = claim_group(self.group, options.transaction_log_dir)
        self._claimed = True
        #: Reads whether rows of batches recorded through a Proxy are published (the log's check-back
        #: answers use it too).
        self._scan = PublishedScan(producer_config)
        if self.log.scan is None:
            self.log.scan = self._scan
        #: Halves of batches committed through a Proxy (by check-backs alone).
        self._via_proxy = ProxyCommits(lambda: self.producer(), self._scan)
        self._ends = EndTransactions(lambda: self.producer(), lambda handles: self._join(handles), self.log)
        try:
            self.log.check_writable()
        except BaseException:
            self.close()
            raise

    def producer(self) -> Any:
        """The driver's producer: the group's only member, so the only one its brokers ask check-backs of
        (answered from the transaction log, on CHECK_THREADS threads)."""
        if self._producer is None or self._producer.closed:
            from ..client.producer import Producer

            c = self.producer_config
            producer = Producer(
                c,
                transaction_listener=lambda check: answer_check(check, producer),
                check_threads=CHECK_THREADS,
                heartbeat_broker_interval_ms=min(c.heartbeat_broker_interval_ms, DRIVER_REFRESH_MS),
                poll_name_server_interval_ms=min(c.poll_name_server_interval_ms, DRIVER_REFRESH_MS),
            )
            self._producer = producer
        return self._producer

    def _join(self, handles: list[tuple[TransactionHandle, str]]) -> None:
        """Register the driver's producer with every broker of the halves' topics (their routes, then a
        heartbeat each; the route service greets a broker that comes back): the group's only member must
        be known to every broker that may check one of them back."""
        producer = self.producer()
        for topic in sorted({h.topic for h, _ in handles}):
            try:
                producer.fetch_publish_queues(topic)
            except RocketMQError as exc:
                log.warning("exactly_once: route of %s not found; its brokers may not know this driver: %s", topic, exc)

    def proxy_of(self, topics: set[str]) -> str | None:
        """The RocketMQ 5.x Proxy the topics' routes point at, or None (docs/proxy.md: it drops
        END_TRANSACTION, so the batch is committed by check-backs). A topic without a route is left to the
        sends, which name it."""
        producer = self.producer()
        for topic in sorted(topics):
            try:
                proxy = producer.proxy_addr(topic)
            except RocketMQError:
                continue
            if proxy is not None:
                return proxy
        return None

    def state(self, id_namespace: str, batch_id: int) -> BatchState:
        return self.log.state(id_namespace, batch_id)

    def reopen(self, id_namespace: str, batch_id: int) -> None:
        """A batch aborted before is run again: its old halves stay rolled back (not in the new record)."""
        self.log.clear_aborted(id_namespace, batch_id)

    def recover(self, id_namespace: str, batch_id: int) -> int:
        """A batch recorded before the driver stopped: not committed again (a 4.9.8 broker would
        publish twice); this driver's producer joins the brokers so the check-backs that finish the
        commit find a producer of the group, and close() waits for them (the query may stop right
        after); the batch is marked committed. Its half count."""
        record = self.log.recorded(id_namespace, batch_id)
        handles = record.handles if record is not None else []
        self._join(handles)
        if record is not None:
            self._await_check_backs(record)
        self.log.mark_committed(id_namespace, batch_id, {"recovered": True, "halves": len(handles)})
        return len(handles)

    def finish(
        self,
        report: DeliveryReport,
        id_namespace: str,
        batch_id: int,
        summaries: list[PartitionSummary],
        abort_reason: str | None,
    ) -> None:
        """Commit the batch (``abort_reason`` None) or abort it; what became of it goes into ``report``."""
        if abort_reason is None:
            outcome = self.commit(id_namespace, batch_id, summaries)
        else:
            outcome = self.abort(id_namespace, batch_id, summaries, abort_reason)
        report.transaction = outcome.transaction
        report.committed_halves = outcome.committed
        report.left_to_check_back = outcome.left_to_check_back
        report.rolled_back_halves = outcome.rolled_back
        report.commit_seconds = outcome.seconds
        report.through_proxy = outcome.through_proxy

    def commit(self, id_namespace: str, batch_id: int, summaries: list[PartitionSummary]) -> CommitOutcome:
        started = time.monotonic()
        handles = batch_handles(summaries)
        window_s = self.options.transaction_commit_window_ms / 1000.0
        try:
            proxy = self.proxy_of({h.topic for h, _ in handles})
            # through a Proxy: each queue's offset before any row of the batch can be published (read from there)
            scan_from = None if proxy is None else self._scan.max_offsets(queue_of(h) for h, _ in handles)
            self.log.record(id_namespace, batch_id, handles, int(time.time() * 1000) + int(window_s * 1000), scan_from)
        except BaseException as exc:
            self._abort_unrecorded(id_namespace, batch_id, summaries, exc)
            raise
        if scan_from is not None:
            return self._commit_by_check_backs(id_namespace, batch_id, handles, proxy, scan_from, started)
        # Stop a little before the window ends: a request written then still reaches its broker in time.
        stop_at = started + window_s - min(5.0, window_s / 10)
        outcome = CommitOutcome()
        outcome.committed, left = self._end_all(handles, TransactionState.COMMIT, stop_at)
        outcome.left_to_check_back = len(left)
        if left:
            self._left += left
            self._left_until = started + window_s + transaction_log.CLOCK_MARGIN_MS / 1000.0
        outcome.seconds = time.monotonic() - started
        self.log.mark_committed(
            id_namespace,
            batch_id,
            {
                "halves": len(handles),
                "committed": outcome.committed,
                "left_to_check_back": outcome.left_to_check_back,
                "seconds": round(outcome.seconds, 3),
            },
            unconfirmed=[h.offset_msg_id for h in left],
        )
        return outcome

    def _commit_by_check_backs(
        self,
        id_namespace: str,
        batch_id: int,
        handles: list[tuple[TransactionHandle, str]],
        proxy: str | None,
        scan_from: dict[MessageQueue, int],
        started: float,
    ) -> CommitOutcome:
        """A batch recorded through a Proxy: no COMMIT is sent (the Proxy would drop it); its halves are
        left to their brokers' check-backs, relayed to this producer (registered with the Proxy by
        _join) and answered COMMIT from the record; close() waits for their rows (settle_left). Each half
        is checked back once its check immunity (the commit window after it was sent) is over, at its
        broker's next check round."""
        self._join(handles)
        outcome = CommitOutcome(left_to_check_back=len(handles), through_proxy=proxy)
        self._via_proxy.add(handles, scan_from, self.options.transaction_commit_window_ms / 1000.0)
        outcome.seconds = time.monotonic() - started
        self.log.mark_committed(
            id_namespace,
            batch_id,
            {"halves": len(handles), "through_proxy": proxy, "left_to_check_back": len(handles)},
            unconfirmed=[h.offset_msg_id for h, _ in handles],
        )
        return outcome

    def abort(self, id_namespace: str, batch_id: int, summaries: list[PartitionSummary], reason: str) -> CommitOutcome:
        """Mark the batch aborted (check-backs answer ROLLBACK from now on), then roll back its known halves.

        Once the batch is recorded it commits whatever fails afterwards (Spark aborts a write whose
        commit raised, maybe after some COMMITs): nothing is marked, the recorded halves are left to
        the commit and their check-backs (close() waits for them), and only the halves the record
        does not hold are rolled back."""
        record = self.log.recorded(id_namespace, batch_id)
        handles = batch_handles(summaries)
        if record is not None:
            log.warning(
                "exactly_once: batch %s of %s is recorded, so it commits although %s; its unrecorded halves "
                "are rolled back", batch_id, id_namespace, reason,
            )  # fmt: skip
            self._await_check_backs(record)
            outcome = self.roll_back([(h, txn) for h, txn in handles if not record.holds(h)])
            outcome.transaction = "committed"
            return outcome
        self.log.mark_aborted(id_namespace, batch_id, reason)
        outcome = self.roll_back(handles)
        outcome.transaction = "aborted"
        return outcome

    def _abort_unrecorded(
        self, id_namespace: str, batch_id: int, summaries: list[PartitionSummary], exc: BaseException
    ) -> None:
        """The record could not be written: abort the batch (when it is not recorded after all)."""
        try:
            self.abort(id_namespace, batch_id, summaries, f"recording the batch failed: {type(exc).__name__}: {exc}")
        except Exception as failed:  # the log cannot be read either: its check-backs settle the halves later
            log.warning("exactly_once: batch %s of %s could not be recorded nor aborted: %s", batch_id, id_namespace,
                        failed)  # fmt: skip

    def roll_back(self, handles: list[tuple[TransactionHandle, str]]) -> CommitOutcome:
        """Roll back halves the batch does not need (an aborted batch's, a replay's of a batch the log
        already decided, the unrecorded ones of a recorded batch)."""
        started = time.monotonic()
        outcome = CommitOutcome()
        if handles and (proxy := self.proxy_of({h.topic for h, _ in handles})) is not None:
            # the Proxy would drop the ROLLBACKs: their check-backs are answered ROLLBACK from the log
            outcome.left_to_check_back, outcome.through_proxy = len(handles), proxy
            return outcome
        outcome.rolled_back, left = self._end_all(
            handles, TransactionState.ROLLBACK, started + self.options.transaction_commit_window_ms / 1000.0
        )
        outcome.left_to_check_back = len(left)
        outcome.seconds = time.monotonic() - started
        return outcome

    def _await_check_backs(self, record: Recorded) -> None:
        """close() waits for the recorded halves to be published (by the commit or their check-backs,
        answered once the record's checks_from_ms, its commit window and clock margin, is past)."""
        if record.scan_from is not None:  # through a Proxy: each half checked back a commit window after it was sent
            window_s = self.options.transaction_commit_window_ms / 1000.0
            self._via_proxy.add(
                record.handles, record.scan_from, record.checks_from_ms / 1000.0 + window_s - time.time()
            )
            return
        known = {h.offset_msg_id for h in self._left}
        self._left += [h for h, _ in record.handles if h.offset_msg_id not in known]
        window_left_s = record.checks_from_ms / 1000.0 - time.time()
        self._left_until = max(self._left_until, time.monotonic() + max(0.0, window_left_s))

    def _end_all(
        self, handles: list[tuple[TransactionHandle, str]], state: TransactionState, stop_at: float
    ) -> tuple[int, list[TransactionHandle]]:
        """END_TRANSACTION ``state`` for each handle until ``stop_at``: (answered SUCCESS, the others)."""
        return self._ends.end_all(handles, state, stop_at)

    def settle_left(self, timeout_s: float | None = None) -> int:
        """Wait until the halves left to check-backs are published (this producer keeps answering the
        check-backs meanwhile), at most until SETTLE_AFTER_WINDOW_S after the last commit window, or
        ``timeout_s``; how many are still not published."""
        if not self._left and not self._via_proxy.left:
            return 0
        limit = max(self._left_until, self._via_proxy.until) + SETTLE_AFTER_WINDOW_S
        deadline = limit if timeout_s is None else min(limit, time.monotonic() + timeout_s)
        rounds = 0
        while self._left:
            self._left = self._unpublished(self._left, deadline)
            if not self._left or time.monotonic() >= deadline:
                break
            rounds += 1
            time.sleep(min(PUBLISHED_CHECK_BACKOFF.delay(rounds), max(0.0, deadline - time.monotonic())))
        left = len(self._left) + self._via_proxy.settle(deadline)
        if left:
            batches = self._via_proxy.batches_left()
            log.warning(
                "exactly_once: %d halves left to check-backs are not published yet%s; a producer of group %s must "
                "stay up until their brokers check them back (a streaming query's driver does)",
                left, f" (through the Proxy: batches {', '.join(batches)})" if batches else "", self.group,
            )  # fmt: skip
        return left

    def _unpublished(self, handles: list[TransactionHandle], deadline: float) -> list[TransactionHandle]:
        """The halves whose row their broker's index does not show yet (QUERY_MESSAGE; those not asked
        about by ``deadline`` are counted as not shown)."""
        if not handles:
            return []
        producer = self.producer()
        still: list[TransactionHandle] = []
        for i, h in enumerate(handles):
            if time.monotonic() >= deadline:  # each look-up may take the send timeout
                return still + handles[i:]
            try:
                # its brokerName's master now: after an election, not the one that stored it
                if producer.is_published(h.topic, h.msg_id, producer.master_addr(h)):
                    continue
            except RocketMQError:
                pass
            still.append(h)
        return still

    def close(self) -> None:
        try:
            self.settle_left()
        finally:
            if self._producer is not None:
                self._producer.close()
                self._producer = None
            self._via_proxy.close()
            if self.log.scan is self._scan:
                self.log.scan = None
            self._scan.close()
            if self._claimed:
                self._claimed = False
                release_group(self.group)
