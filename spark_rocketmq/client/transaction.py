"""Transactional sends' client side: the handle of a stored half message, the check-back listener's
contract, and the responder that answers a broker's CHECK_TRANSACTION_STATE.

A broker checks back on a producer of the half message's group over a connection that producer
opened (it registered the group with HEART_BEAT). The responder runs the listener off the
connection's reader thread (on one checker thread, as Java's checkExecutor) and answers with a
oneway END_TRANSACTION (fromTransactionCheck=true) on that same connection, as
DefaultMQProducerImpl.checkTransactionState does. A listener that raises answers UNKNOWN (the broker
asks again later), with the error in the remark.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ConfigError, ProtocolError, RemotingError
from ..protocol.codes import RequestCode
from ..protocol.command import FLAG_ONEWAY, RemotingCommand
from ..protocol.frozen import made
from ..protocol.stored import StoredMessage, decode_stored_message, parse_offset_msg_id
from ..protocol.transaction import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    TransactionState,
    end_transaction_ext,
)
from .results import SendResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransactionHandle:
    """Where a half message is stored: all END_TRANSACTION needs, and what a check-back names."""

    topic: str
    broker_name: str
    #: The storing broker's address, from the offset id ("ip:port").
    broker_addr: str
    queue_id: int
    commit_log_offset: int
    #: The half's offset in the half topic's queue (tranStateTableOffset).
    tran_state_table_offset: int
    #: The UNIQ_KEY: the id consumers see once it is committed.
    msg_id: str
    #: The broker's id of the half: store address + commit-log offset.
    offset_msg_id: str
    #: What the broker answered as transactionId (its UNIQ_KEY).
    transaction_id: str | None = None

    @classmethod
    def from_send_result(cls, result: SendResult) -> TransactionHandle:
        host, port, offset = parse_offset_msg_id(result.offset_msg_id)
        queue = result.queue
        return made(
            cls,
            topic=queue.topic,
            broker_name=queue.broker_name,
            broker_addr=f"{host}:{port}",
            queue_id=queue.queue_id,
            commit_log_offset=offset,
            tran_state_table_offset=result.queue_offset,
            msg_id=result.msg_id,
            offset_msg_id=result.offset_msg_id,
            transaction_id=result.transaction_id,
        )

    def to_row(self) -> list[object]:
        """A compact JSON-able form (the sink ships one per row to the driver and logs it)."""
        return [
            self.topic,
            self.broker_name,
            self.queue_id,
            self.commit_log_offset,
            self.tran_state_table_offset,
            self.msg_id,
            self.offset_msg_id,
            self.transaction_id,
        ]

    @classmethod
    def from_row(cls, row: Sequence[object]) -> TransactionHandle:
        try:
            topic, broker_name, queue_id, clo, tsto, msg_id, offset_msg_id, tid = row
            if not (isinstance(topic, str) and isinstance(broker_name, str) and isinstance(msg_id, str)):
                raise TypeError("topic, broker name and msg id must be text")
            if not (isinstance(queue_id, int) and isinstance(clo, int) and isinstance(tsto, int)):
                raise TypeError("queue id and offsets must be integers")
            if not isinstance(offset_msg_id, str) or not (tid is None or isinstance(tid, str)):
                raise TypeError("offset msg id must be text")
            host, port, offset = parse_offset_msg_id(offset_msg_id)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"not a transaction handle: {row!r} ({exc})") from None
        if offset != clo:
            raise ProtocolError(f"transaction handle {row!r}: commit-log offset {clo} differs from its offset id's")
        return made(
            cls,
            topic=topic,
            broker_name=broker_name,
            broker_addr=f"{host}:{port}",
            queue_id=queue_id,
            commit_log_offset=clo,
            tran_state_table_offset=tsto,
            msg_id=msg_id,
            offset_msg_id=offset_msg_id,
            transaction_id=tid,
        )

    def end_ext(self, group: str, state: TransactionState) -> bytes:
        """The extFields of this half's END_TRANSACTION (DefaultMQProducerImpl.endTransaction's header), in the
        ROCKETMQ serialization."""
        return end_transaction_ext(
            group,
            state,
            tran_state_table_offset=self.tran_state_table_offset,
            commit_log_offset=self.commit_log_offset,
            msg_id=self.msg_id,
            transaction_id=self.transaction_id,
            broker_name=self.broker_name,
        )


@dataclass(frozen=True)
class TransactionCheck:
    """One check-back: which broker asks, its header, and the half message it holds."""

    broker_addr: str
    header: CheckTransactionStateRequestHeader
    message: StoredMessage

    @property
    def offset_msg_id(self) -> str:
        return self.header.offset_msg_id or self.message.offset_msg_id

    @property
    def msg_id(self) -> str:
        return self.message.uniq_key or self.offset_msg_id


#: Check-backs a responder keeps waiting for its checker thread at most; more are not answered (the
#: broker asks again at its next check).
MAX_QUEUED_CHECKS = 10_000

#: Decides a half message's fate when its broker checks back; must not block for long.
TransactionCheckListener = Callable[[TransactionCheck], TransactionState]
#: Sends a command oneway on a given connection (signed as the producer's requests are).
OnewayWriter = Callable[[object, RemotingCommand], None]


@dataclass
class CheckCounters:
    checks: int = 0
    commits: int = 0
    rollbacks: int = 0
    unknown: int = 0
    errors: int = 0
    #: Check-backs a producer without a transaction listener left unanswered.
    unanswered: int = 0
    #: Check-backs not answered: a newer copy of the same half came while they waited, or too many waited.
    dropped: int = 0


class CheckResponder:
    """The producer's handler of CHECK_TRANSACTION_STATE (broker-initiated requests).

    Checks wait for the checker threads (``threads`` of them, TransactionMQProducer's
    checkThreadPoolMaxSize: one unless the listener is thread-safe and waits on I/O) at most once per
    UNIQ_KEY: a 4.9.8 broker writes a new copy of a half each time it checks it, so a check that comes
    while an earlier one of the same half still waits replaces it (one answer per half and round), and
    at most MAX_QUEUED_CHECKS wait."""

    def __init__(
        self,
        group: str,
        listener: TransactionCheckListener | None,
        write_oneway: OnewayWriter,
        threads: int = 1,
        *,
        on_answered: Callable[[TransactionCheck, TransactionState], None] | None = None,
    ) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"option check_threads={threads!r}: expected an integer >= 1")
        self._group = group
        self._listener = listener
        self._write = write_oneway
        #: Told of each answer just before it is written (the producer's end-transaction hooks).
        self._on_answered = on_answered
        self._threads = threads
        self._lock = threading.Lock()
        #: Wakes a checker thread (they start at the first check-back) when a check waits.
        self._ready = threading.Condition(self._lock)
        self._checkers: list[threading.Thread] = []
        #: The newest waiting check of each half (by UNIQ_KEY), with its connection.
        self._waiting: OrderedDict[str, tuple[object, TransactionCheck]] = OrderedDict()
        self._overflowed = False
        self._closed = False
        self.counters = CheckCounters()

    @property
    def has_listener(self) -> bool:
        return self._listener is not None

    def handles(self, cmd: RemotingCommand) -> bool:
        return cmd.code == RequestCode.CHECK_TRANSACTION_STATE

    def on_request(self, conn: object, addr: str, cmd: RemotingCommand) -> None:
        """Called on the connection's reader thread: decode, then hand the work to the checker thread."""
        if self._listener is None:
            with self._lock:
                self.counters.unanswered += 1
                first = self.counters.unanswered == 1
            if first:  # once per producer: a broker asks again and again
                log.warning(
                    "broker %s checked a transaction back, but this producer has no transaction listener: not "
                    "answered (the broker asks again later, or another producer of group %s answers)",
                    addr, self._group,
                )  # fmt: skip
            return
        try:
            header = CheckTransactionStateRequestHeader.from_command(cmd)
            message = decode_stored_message(bytes(cmd.body))
        except ProtocolError as exc:
            log.warning("CHECK_TRANSACTION_STATE from %s not understood: %s", addr, exc)
            with self._lock:
                self.counters.errors += 1
            return
        check = TransactionCheck(addr, header, message)
        key = check.msg_id
        with self._lock:
            if self._closed:
                return
            if key in self._waiting:  # an older copy still waits: answer this one instead
                self._waiting[key] = (conn, check)
                self.counters.dropped += 1
                return
            if len(self._waiting) >= MAX_QUEUED_CHECKS:
                self.counters.dropped += 1
                first, self._overflowed = not self._overflowed, True
            else:
                self._waiting[key] = (conn, check)
                if not self._checkers:
                    for i in range(self._threads):
                        name = f"rocketmq-tx-check-{i}"
                        checker = threading.Thread(target=self._answer_waiting, name=name, daemon=True)
                        checker.start()
                        self._checkers.append(checker)
                self._ready.notify()
                return
        (log.warning if first else log.debug)(
            "%d check-backs wait for the transaction listener already: the one of %s from %s is not answered "
            "(the broker asks again later)", MAX_QUEUED_CHECKS, key, addr,
        )  # fmt: skip

    def _answer_waiting(self) -> None:
        """A checker thread: answers the waiting checks in the order they came, until close()."""
        while True:
            with self._lock:
                while not self._waiting and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                _, waiting = self._waiting.popitem(last=False)
            self._answer(*waiting)

    def _answer(self, conn: object, check: TransactionCheck) -> None:
        remark = None
        try:
            assert self._listener is not None
            state = TransactionState(self._listener(check))
        except Exception as exc:
            log.exception("transaction listener failed on %s", check.msg_id)
            state = TransactionState.UNKNOWN
            remark = f"checkLocalTransactionState Exception: {exc!r}"[:200]
        h = check.header
        header = EndTransactionRequestHeader(
            producer_group=self._group,
            tran_state_table_offset=h.tran_state_table_offset,
            commit_log_offset=h.commit_log_offset,
            commit_or_rollback=state,
            msg_id=check.msg_id,
            transaction_id=h.transaction_id,
            from_transaction_check=True,
        )
        cmd = header.command(remark)
        cmd.flag |= FLAG_ONEWAY
        if self._on_answered is not None:  # before the write, whatever its outcome, as Java's checkTransactionState
            self._on_answered(check, state)
        try:
            self._write(conn, cmd)
        except RemotingError as exc:
            with self._lock:
                self.counters.errors += 1
                first = self.counters.errors == 1
            # The broker asks again at its next check; one line per producer says why answers are lost.
            (log.warning if first else log.debug)(
                "cannot answer the check-back of %s to %s (the broker asks again later): %s",
                check.msg_id, check.broker_addr, exc,
            )  # fmt: skip
            return
        with self._lock:
            c = self.counters
            c.checks += 1
            if state is TransactionState.COMMIT:
                c.commits += 1
            elif state is TransactionState.ROLLBACK:
                c.rollbacks += 1
            else:
                c.unknown += 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._waiting.clear()
            self._ready.notify_all()


__all__ = [
    "MAX_QUEUED_CHECKS",
    "CheckCounters",
    "CheckResponder",
    "TransactionCheck",
    "TransactionCheckListener",
    "TransactionHandle",
    "TransactionState",
]
