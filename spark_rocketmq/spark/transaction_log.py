"""The exactly-once sink's transaction log, and the check-back answers its driver's producer gives.

One directory per sink (``transaction_log_dir``: a local path or any URI ``pyarrow.fs`` opens, such
as hdfs:// or s3://), one folder per id namespace (the streaming query, or the ``id_namespace``
option), and per batch at most three files, each written whole (a temporary name, then a move):

- ``batch-<id>.recorded.json``: the batch's decision to commit, with the handle of every half
  message that makes up the batch (one per row, from the task attempts the driver accepted);
- ``batch-<id>.committed.json``: the driver sent END_TRANSACTION COMMIT for them and is done; it names
  the halves whose COMMIT no broker confirmed (``unconfirmed``: their offset ids);
- ``batch-<id>.aborted.json``: the batch will never commit (its halves are rolled back).

Check-back answers (``answer``), for a half message of batch B (its ``SPARK_TXN`` property, which
names the query, batch, partition, task attempt and send of the row):

- B recorded, the half one of its handles (same UNIQ_KEY and SPARK_TXN, stored by the same broker
  for the same queue of its topic, REAL_QID: a send whose answer was lost and that was retried stores
  a second half with the same UNIQ_KEY and SPARK_TXN, on another broker or on another queue of the
  same one): UNKNOWN until the driver's commit window (``transaction_commit_window_ms``, plus the
  driver's CLOCK_MARGIN_MS, both written in the record) is over, so that the driver and the
  check-backs never both commit a half; UNKNOWN too while this process waits for the answer to its
  own COMMIT of the half (``commits_in_flight``: its broker froze with the COMMIT in its socket, and
  runs it when it wakes); then ROLLBACK when its row is already in its topic: the
  batch is marked committed and its broker answered the driver's COMMIT of this half with SUCCESS
  (stored in its topic), or, for a half not confirmed so, QUERY_MESSAGE by UNIQ_KEY finds the row
  (the broker asks about a copy: a 4.9.8 broker writes a copy of a half each time it checks it back,
  and one for every half still open when a check finds it within CHECK_IMMUNITY_TIME_IN_SECONDS,
  which it checks back a round later); else COMMIT, once: a copy checked
  within COMMIT_MEMORY_S of a COMMIT this process gave is answered UNKNOWN until its row shows;
- B recorded, the half not one of its handles (a failed or duplicate task attempt, a resend whose
  answer was lost, a retried send's other half): ROLLBACK;
- B aborted: ROLLBACK; B neither: UNKNOWN (still running; the broker asks again later).

Through a RocketMQ 5.x Proxy (its remoting port drops END_TRANSACTION, apache/rocketmq#8313, and refuses
QUERY_MESSAGE) the driver sends no COMMIT: the record says so (``scan_from``), check-backs of its halves
commit from the record on, by the same rules, and "already in its topic" is read from the row's queue
(published_scan.py: pulls from the queue's max offset taken just before the record).

Replays: a committed batch is skipped. A recorded but unmarked batch (the driver died while
committing) is not committed again from the driver: a 4.9.8 broker publishes a half again at each
COMMIT it is sent (EndTransactionProcessor finds it by commit-log offset only), so a second
END_TRANSACTION would publish rows the first one already published. Its halves that the first
commit did not reach are still unresolved on their brokers, which check them back: COMMIT, by the
rule above. The batch is marked committed ("recovered").
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pyarrow.fs as pafs

from ..client.transaction import TransactionCheck, TransactionHandle
from ..errors import ConfigError, IndexBehindError, ProtocolError
from ..protocol.route import MessageQueue
from ..protocol.stored import parse_offset_msg_id
from ..protocol.transaction import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, TransactionState
from .directories import folder_name, open_directory
from .published_scan import PublishedScan
from .transaction_ids import PROPERTY_SPARK_TXN, handle_row, parse_handle_row, parse_transaction_id

log = logging.getLogger("spark_rocketmq.spark")

#: Check-backs of a recorded batch are answered only this long after its commit window ends (clock
#: differences between the driver that recorded the batch and a restarted one that answers, perhaps on
#: another host). The driver's value is written in the record (``checks_from_ms``): every driver that
#: answers the batch's check-backs uses it.
CLOCK_MARGIN_MS = 30_000
#: After a check-back of a half is answered COMMIT, the checks of its other copies are answered UNKNOWN
#: for this long unless its row shows as published (then ROLLBACK): the broker may not have published
#: (or indexed) it yet. Shorter than a broker's check interval (60 s by default), so that a COMMIT the
#: broker never got is given again at its next check.
COMMIT_MEMORY_S = 30.0
#: Records a log keeps in memory at most (the batches check-backs ask about are the last few).
MAX_CACHED_RECORDS = 16
#: Halves answered COMMIT that a log remembers at most.
MAX_COMMITS_REMEMBERED = 100_000


class BatchState(Enum):
    NEW = "new"
    RECORDED = "recorded"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class Recorded:
    """A recorded batch: the handles, when the driver stops committing, when check-backs may commit,
    and its halves by (UNIQ_KEY, SPARK_TXN) (what a check-back's half carries, whichever copy of it the
    broker asks about) with the address of the broker that stored each and the queue of its topic it
    was sent to (REAL_QID, which the broker's copies keep). A send whose answer was lost is retried on
    another broker, or on another queue of the same one, and may have stored a second half with the
    same UNIQ_KEY and SPARK_TXN: only the recorded one commits."""

    handles: list[tuple[TransactionHandle, str]]
    commit_deadline_ms: int
    #: Epoch ms from which check-backs may commit (the commit deadline and the driver's clock margin).
    checks_from_ms: int
    #: A batch whose halves went through a RocketMQ Proxy (no COMMIT from the driver: its check-backs
    #: commit it, from the record on): each queue its rows are published to, and its max offset just
    #: before the record (published_scan.py reads from there whether a row is in its topic). None: direct.
    scan_from: dict[MessageQueue, int] | None = None

    @classmethod
    def of(
        cls,
        handles: list[tuple[TransactionHandle, str]],
        commit_deadline_ms: int,
        checks_from_ms: int | None = None,
        scan_from: dict[MessageQueue, int] | None = None,
    ) -> Recorded:
        if checks_from_ms is None:  # a record written before checks_from_ms was: this process's margin
            checks_from_ms = commit_deadline_ms + CLOCK_MARGIN_MS
        return cls(handles, commit_deadline_ms, checks_from_ms, scan_from)

    # The look-up tables are made at the first check-back or abort that needs them, not as the driver
    # records the batch (most batches are never checked back). Two threads may both make one: the same.
    @functools.cached_property
    def stores(self) -> dict[tuple[str, str], TransactionHandle]:
        """(UNIQ_KEY, SPARK_TXN) -> the recorded half."""
        return {(h.msg_id, txn): h for h, txn in self.handles}

    @functools.cached_property
    def offsets(self) -> frozenset[str]:
        """The offset ids (store address + commit-log offset) of the recorded halves."""
        return frozenset(h.offset_msg_id for h, _ in self.handles)

    def stored(self, uniq_key: str, txn: str, store_addr: str, queue_id: int | None) -> TransactionHandle | None:
        """The recorded half that a half with this UNIQ_KEY and SPARK_TXN, stored by the broker at
        ``store_addr`` for queue ``queue_id`` of its topic (its REAL_QID; None: not known), is (a copy of);
        None when it is none of them."""
        found = self.stores.get((uniq_key, txn))
        if found is not None and found.broker_addr == store_addr and (queue_id is None or found.queue_id == queue_id):
            return found
        return None

    def holds(self, handle: TransactionHandle) -> bool:
        """Whether ``handle`` (as a send stored it) is one of the recorded halves."""
        return handle.offset_msg_id in self.offsets


class TransactionLog:
    """The log of one sink (one directory); safe to share between threads."""

    def __init__(self, uri: str) -> None:
        if not uri or not str(uri).strip():
            raise ConfigError(
                "option transaction_log_dir is required with delivery_guarantee=exactly_once: give a directory "
                "(a local path, or a URI pyarrow.fs opens such as hdfs://... or s3://...) that the driver and "
                "every executor can reach"
            )
        self.uri = str(uri)
        self._fs, self._root = open_directory(self.uri, "transaction_log_dir")
        self._lock = threading.Lock()
        #: The records read or written last (a record never changes: one evicted is read again when asked).
        self._recorded: OrderedDict[tuple[str, int], Recorded] = OrderedDict()
        #: Of the committed batches read last: the offset ids of the halves whose COMMIT was not confirmed
        #: (None: a mark that does not say, as a recovered batch's).
        self._unconfirmed: OrderedDict[tuple[str, int], frozenset[str] | None] = OrderedDict()
        #: UNIQ_KEYs this process answered COMMIT, and when (monotonic seconds), oldest first.
        self._committed_by_check: OrderedDict[str, float] = OrderedDict()
        #: Offset ids of recorded halves whose COMMIT this process sent and is still waiting the answer of.
        self._commits_in_flight: set[str] = set()
        #: Offset ids of recorded halves whose COMMIT was answered SUCCESS after the batch was marked.
        self._confirmed_late: OrderedDict[str, None] = OrderedDict()
        #: Reads whether rows of batches recorded through a Proxy are published (set by the driver).
        self.scan: PublishedScan | None = None

    # -- paths -------------------------------------------------------------------------------------
    def _path(self, id_namespace: str, batch_id: int, kind: str) -> str:
        return f"{self._root}/{folder_name(id_namespace)}/batch-{batch_id}.{kind}.json"

    def _exists(self, path: str) -> bool:
        return self._fs.get_file_info(path).type != pafs.FileType.NotFound

    def _write(self, path: str, data: dict[str, Any]) -> None:
        folder = path.rsplit("/", 1)[0]
        self._fs.create_dir(folder, recursive=True)
        tmp = f"{folder}/.tmp-{uuid.uuid4().hex}"
        with self._fs.open_output_stream(tmp) as out:
            out.write(json.dumps(data, separators=(",", ":")).encode())
        self._fs.move(tmp, path)

    def _read(self, path: str) -> dict[str, Any]:
        with self._fs.open_input_stream(path) as src:
            data = json.loads(src.read())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a JSON object")
        return data

    def check_writable(self) -> None:
        """Fail early (ConfigError) when the directory cannot be written."""
        probe = f"{self._root}/.probe-{uuid.uuid4().hex}"
        try:
            self._fs.create_dir(self._root, recursive=True)
            with self._fs.open_output_stream(probe) as out:
                out.write(b"ok")
            self._fs.delete_file(probe)
        except Exception as exc:
            raise ConfigError(f"option transaction_log_dir={self.uri!r} cannot be written: {exc}") from None

    # -- the batch's states --------------------------------------------------------------------------
    def state(self, id_namespace: str, batch_id: int) -> BatchState:
        if self._exists(self._path(id_namespace, batch_id, "committed")):
            return BatchState.COMMITTED
        if self._exists(self._path(id_namespace, batch_id, "recorded")):
            return BatchState.RECORDED
        if self._exists(self._path(id_namespace, batch_id, "aborted")):
            return BatchState.ABORTED
        return BatchState.NEW

    def record(
        self,
        id_namespace: str,
        batch_id: int,
        handles: list[tuple[TransactionHandle, str]],
        commit_deadline_ms: int,
        scan_from: dict[MessageQueue, int] | None = None,
    ) -> None:
        """The commit decision: written whole before any END_TRANSACTION COMMIT is sent. The driver sends
        none after ``commit_deadline_ms`` (epoch ms); check-backs commit from CLOCK_MARGIN_MS later.
        ``scan_from`` (halves sent through a Proxy): the driver sends no COMMIT, check-backs commit from now."""
        rows = [handle_row(h, txn) for h, txn in handles]
        if scan_from is None:
            checks_from_ms = commit_deadline_ms + CLOCK_MARGIN_MS
        else:
            checks_from_ms = commit_deadline_ms = int(time.time() * 1000)
        data: dict[str, Any] = {
            "batch": batch_id,
            "commit_deadline_ms": commit_deadline_ms,
            "checks_from_ms": checks_from_ms,
            "handles": rows,
        }
        if scan_from is not None:
            data["scan_from"] = [[q.topic, q.broker_name, q.queue_id, offset] for q, offset in scan_from.items()]
        self._write(self._path(id_namespace, batch_id, "recorded"), data)
        self._cache((id_namespace, batch_id), Recorded.of(handles, commit_deadline_ms, checks_from_ms, scan_from))

    def _cache(self, key: tuple[str, int], record: Recorded) -> None:
        with self._lock:
            self._recorded[key] = record
            self._recorded.move_to_end(key)
            while len(self._recorded) > MAX_CACHED_RECORDS:
                self._recorded.popitem(last=False)

    def mark_committed(
        self, id_namespace: str, batch_id: int, info: dict[str, Any], unconfirmed: list[str] | None = None
    ) -> None:
        """The batch is done. ``unconfirmed``: the offset ids of the halves whose END_TRANSACTION COMMIT was
        not answered SUCCESS (None: not known); every other recorded half is in its topic."""
        data = {"batch": batch_id, **info}
        if unconfirmed is not None:
            data["unconfirmed"] = unconfirmed
        self._write(self._path(id_namespace, batch_id, "committed"), data)

    def confirmed(self, id_namespace: str, batch_id: int, offset_msg_id: str) -> bool:
        """Whether the broker answered the driver's COMMIT of the recorded half ``offset_msg_id`` with
        SUCCESS: the batch is marked committed, and the mark does not name it unconfirmed."""
        key = (id_namespace, batch_id)
        with self._lock:
            known = key in self._unconfirmed
            unconfirmed = self._unconfirmed.get(key)
        if not known:
            path = self._path(id_namespace, batch_id, "committed")
            if not self._exists(path):
                return False  # not marked (yet): asked again, and answered then
            listed = self._read(path).get("unconfirmed")
            unconfirmed = frozenset(str(o) for o in listed) if isinstance(listed, list) else None
            with self._lock:
                self._unconfirmed[key] = unconfirmed
                while len(self._unconfirmed) > MAX_CACHED_RECORDS:
                    self._unconfirmed.popitem(last=False)
        return unconfirmed is not None and offset_msg_id not in unconfirmed

    def commits_in_flight(self, offset_msg_ids: list[str]) -> None:
        """The driver marks the batch with these halves' COMMITs still unanswered, on their way to or held
        by a broker that stopped answering (frozen): check-backs of them are answered UNKNOWN until
        ``commit_answered`` tells what became of each (a frozen broker runs the COMMIT when it wakes, and a
        check-back's COMMIT beside it would publish the row twice)."""
        with self._lock:
            self._commits_in_flight.update(offset_msg_ids)

    def commit_answered(self, offset_msg_id: str, error: BaseException | None) -> None:
        """The late answer to an in-flight COMMIT: SUCCESS (``error`` None: the row is in its topic) or a
        failure (the broker refused it, or the connection closed before an answer: the half is left to the
        usual check-back rule)."""
        with self._lock:
            self._commits_in_flight.discard(offset_msg_id)
            if error is None:
                self._confirmed_late[offset_msg_id] = None
                while len(self._confirmed_late) > MAX_COMMITS_REMEMBERED:
                    self._confirmed_late.popitem(last=False)

    def _commit_pending(self, offset_msg_id: str) -> bool | None:
        """True while this process waits for the answer to its COMMIT of the half, False once it was
        answered SUCCESS late, None when neither."""
        with self._lock:
            if offset_msg_id in self._commits_in_flight:
                return True
            return False if offset_msg_id in self._confirmed_late else None

    def mark_aborted(self, id_namespace: str, batch_id: int, reason: str) -> None:
        self._write(self._path(id_namespace, batch_id, "aborted"), {"batch": batch_id, "reason": reason[:2000]})

    def clear_aborted(self, id_namespace: str, batch_id: int) -> None:
        """Forget that a batch was aborted (it runs again; its new record decides its old halves too)."""
        path = self._path(id_namespace, batch_id, "aborted")
        if self._exists(path):
            self._fs.delete_file(path)

    def recorded(self, id_namespace: str, batch_id: int) -> Recorded | None:
        """The batch's record (kept among the MAX_CACHED_RECORDS last used: a record never changes), or None."""
        key = (id_namespace, batch_id)
        with self._lock:
            found = self._recorded.get(key)
            if found is not None:
                self._recorded.move_to_end(key)
                return found
        path = self._path(id_namespace, batch_id, "recorded")
        if not self._exists(path):
            return None
        data = self._read(path)
        handles = [parse_handle_row(r) for r in data.get("handles", [])]
        checks_from = data.get("checks_from_ms")
        scanned = data.get("scan_from")
        scan_from = None if scanned is None else {MessageQueue(t, b, int(q)): int(o) for t, b, q, o in scanned}
        found = Recorded.of(
            handles, int(data["commit_deadline_ms"]), None if checks_from is None else int(checks_from), scan_from
        )
        self._cache(key, found)
        return found

    # -- check-backs ---------------------------------------------------------------------------------
    def answer(
        self,
        txn: str | None,
        uniq_key: str | None,
        store_addr: str,
        published: Callable[[], bool],
        now_ms: int | None = None,
        queue_id: int | None = None,
    ) -> TransactionState:
        """The answer to a check-back of a half whose SPARK_TXN property is ``txn``, stored by the broker
        at ``store_addr`` (host:port of its offset id) for queue ``queue_id`` of its topic (its REAL_QID).
        ``published()`` tells whether its row is already in its topic on that broker (a copy of a half
        the driver committed); for a batch recorded through a Proxy, its queue is read instead (``scan``)."""
        parsed = parse_transaction_id(txn) if txn else None
        if parsed is None or txn is None or uniq_key is None:
            return TransactionState.UNKNOWN  # not a half of this sink's
        namespace, batch_id = parsed
        record = self.recorded(namespace, batch_id)
        if record is None:
            if self._exists(self._path(namespace, batch_id, "aborted")):
                return TransactionState.ROLLBACK
            return TransactionState.UNKNOWN  # the batch is still running (or its driver died: asked again)
        half = record.stored(uniq_key, txn, store_addr, queue_id)
        if half is None:
            # A failed or duplicate attempt's half, a resend's, or a retried send's other half (on another
            # broker, or another queue of this one): two halves of one row both answered COMMIT, by
            # producers in different processes, would publish the row twice.
            return TransactionState.ROLLBACK
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if now < record.checks_from_ms:
            return TransactionState.UNKNOWN  # the driver may still commit it: one resolver at a time
        pending = self._commit_pending(half.offset_msg_id)
        if pending:
            return TransactionState.UNKNOWN  # the driver's COMMIT is held by the broker: it runs first
        if pending is False or self.confirmed(namespace, batch_id, half.offset_msg_id):
            return TransactionState.ROLLBACK  # its broker stored the row at the driver's COMMIT: a copy
        look_up = published if record.scan_from is None else functools.partial(self._in_its_queue, record, half)
        try:
            if look_up():
                return TransactionState.ROLLBACK
        except IndexBehindError as exc:
            log.info("check-back of %s: %s; asked again later", uniq_key, exc)
            return TransactionState.UNKNOWN
        except Exception as exc:
            log.warning("check-back of %s: cannot tell whether it is published (%s); asked again later", uniq_key, exc)
            return TransactionState.UNKNOWN
        return self._commit_once(uniq_key)

    def _in_its_queue(self, record: Recorded, half: TransactionHandle) -> bool:
        """Whether the row of ``half`` (a batch recorded through a Proxy) is in its queue, read with pulls."""
        if self.scan is None:
            raise ConfigError("no pull consumer to read whether rows recorded through a Proxy are published")
        assert record.scan_from is not None
        return not self.scan.unpublished([half], record.scan_from)

    def answer_check(self, check: TransactionCheck, producer: Any) -> TransactionState:
        """``answer`` for a check-back as it came (the half's properties, the offset id of the copy asked
        about); ``producer`` (the one asked) looks the row up on the asking broker."""
        props = check.message.properties
        topic = props.get(PROPERTY_REAL_TOPIC) or check.message.topic
        uniq = check.message.uniq_key
        try:
            host, port, copy_offset = parse_offset_msg_id(check.offset_msg_id)
        except ProtocolError as exc:
            log.warning("check-back of %s from %s: %s; asked again later", check.msg_id, check.broker_addr, exc)
            return TransactionState.UNKNOWN
        real_qid = props.get(PROPERTY_REAL_QUEUE_ID, "")
        queue_id = int(real_qid) if real_qid.isdigit() else None

        def published() -> bool:
            # the copy asked about is stored after every row its half's COMMITs published before the check:
            # an index short of it may not show them yet
            return bool(producer.is_published(topic, uniq, check.broker_addr, indexed_through=copy_offset))

        txn = props.get(PROPERTY_SPARK_TXN)
        state = self.answer(txn, uniq, f"{host}:{port}", published, queue_id=queue_id)
        log.info("check-back of %s (%s, queue %s): %s", check.msg_id, txn, real_qid, state.name)
        return state

    def _commit_once(self, uniq_key: str) -> TransactionState:
        """COMMIT, unless another copy of the half was answered COMMIT less than COMMIT_MEMORY_S ago
        (its row not published yet, as far as the broker's index tells): UNKNOWN then."""
        now = time.monotonic()
        with self._lock:
            remembered = self._committed_by_check
            while remembered and (
                len(remembered) > MAX_COMMITS_REMEMBERED or next(iter(remembered.values())) < now - COMMIT_MEMORY_S
            ):
                remembered.popitem(last=False)
            if uniq_key in remembered:
                return TransactionState.UNKNOWN
            remembered[uniq_key] = now
        return TransactionState.COMMIT
