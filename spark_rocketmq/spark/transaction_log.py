"""The exactly-once sink's transaction log, and the check-back answers every producer of the sink gives.

One directory per sink (``transaction_log_dir``: a local path or any URI ``pyarrow.fs`` opens, such
as hdfs:// or s3://), one folder per id namespace (the streaming query, or the ``id_namespace``
option), and per batch at most three files, each written whole (a temporary name, then a move):

- ``batch-<id>.recorded.json``: the batch's decision to commit, with the handle of every half
  message that makes up the batch (one per row, from the task attempts the driver accepted);
- ``batch-<id>.committed.json``: the driver sent END_TRANSACTION COMMIT for them and is done;
- ``batch-<id>.aborted.json``: the batch will never commit (its halves are rolled back).

Check-back answers (``answer``), for a half message of batch B (its ``SPARK_TXN`` property):
COMMIT when B is recorded and the half is one of its handles; ROLLBACK when B is recorded and the
half is not (a failed or duplicate task attempt, a resend of a half whose answer was lost) or B
was aborted; UNKNOWN while B is neither (still running: the broker asks again later).

Replays: a committed batch is skipped. A recorded but unmarked batch is not committed again from
the driver: a 4.9.8 broker stores a half again at each COMMIT it is sent, so a second
END_TRANSACTION would publish rows the first one already published. Its halves that the first
commit did not reach are still unresolved on their broker, which checks them back, and the answer
is COMMIT from the record; the batch is marked committed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pyarrow.fs as pafs

from ..client.transaction import TransactionCheck, TransactionHandle
from ..errors import ConfigError
from ..protocol.transaction import TransactionState

log = logging.getLogger("spark_rocketmq.spark")

#: The half message property naming its transaction: "<id namespace>/<batch>/<partition>/<attempt>".
PROPERTY_SPARK_TXN = "SPARK_TXN"


class BatchState(Enum):
    NEW = "new"
    RECORDED = "recorded"
    COMMITTED = "committed"
    ABORTED = "aborted"


def transaction_id(id_namespace: str, batch_id: int, partition: int, attempt: int) -> str:
    """What the SPARK_TXN property of a half says: which query, batch, partition and task attempt."""
    return f"{id_namespace}/{batch_id}/{partition}/{attempt}"


def parse_transaction_id(text: str) -> tuple[str, int, int, int] | None:
    """(id namespace, batch, partition, attempt), or None when ``text`` is not a transaction id."""
    try:
        namespace, batch, partition, attempt = text.rsplit("/", 3)
        return namespace, int(batch), int(partition), int(attempt)
    except ValueError:
        return None


def _safe(name: str) -> str:
    """A folder name for an id namespace: its characters kept where path-safe, the rest %-escaped."""
    return "".join(c if c.isalnum() or c in "-_." else f"%{ord(c):02X}" for c in name) or "%"


@dataclass(frozen=True)
class Recorded:
    """A recorded batch: its handles' offset ids (what a check-back names) and the handles."""

    handles: list[TransactionHandle]
    offset_ids: frozenset[str]


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
        try:
            self._fs, self._root = pafs.FileSystem.from_uri(self.uri)
        except (ValueError, TypeError, OSError):
            try:  # a plain local path
                self._fs, self._root = pafs.LocalFileSystem(), self.uri
            except Exception as exc:
                raise ConfigError(f"option transaction_log_dir={self.uri!r}: cannot be opened: {exc}") from None
        self._root = self._root.rstrip("/") or "/"
        self._lock = threading.Lock()
        self._recorded: dict[tuple[str, int], Recorded] = {}

    # -- paths -------------------------------------------------------------------------------------
    def _path(self, id_namespace: str, batch_id: int, kind: str) -> str:
        return f"{self._root}/{_safe(id_namespace)}/batch-{batch_id}.{kind}.json"

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

    def record(self, id_namespace: str, batch_id: int, handles: list[TransactionHandle]) -> None:
        """The commit decision: written whole before any END_TRANSACTION COMMIT is sent."""
        rows = [h.to_row() for h in handles]
        self._write(
            self._path(id_namespace, batch_id, "recorded"),
            {"batch": batch_id, "time_ms": int(time.time() * 1000), "handles": rows},
        )
        with self._lock:
            self._recorded[(id_namespace, batch_id)] = Recorded(handles, frozenset(h.offset_msg_id for h in handles))

    def mark_committed(self, id_namespace: str, batch_id: int, info: dict[str, Any]) -> None:
        self._write(self._path(id_namespace, batch_id, "committed"), {"batch": batch_id, **info})

    def mark_aborted(self, id_namespace: str, batch_id: int, reason: str) -> None:
        self._write(self._path(id_namespace, batch_id, "aborted"), {"batch": batch_id, "reason": reason[:2000]})

    def recorded(self, id_namespace: str, batch_id: int) -> Recorded | None:
        """The batch's record (read once, then cached: a record never changes), or None."""
        key = (id_namespace, batch_id)
        with self._lock:
            found = self._recorded.get(key)
        if found is not None:
            return found
        path = self._path(id_namespace, batch_id, "recorded")
        if not self._exists(path):
            return None
        data = self._read(path)
        handles = [TransactionHandle.from_row(r) for r in data.get("handles", [])]
        found = Recorded(handles, frozenset(h.offset_msg_id for h in handles))
        with self._lock:
            self._recorded[key] = found
        return found

    # -- check-backs ---------------------------------------------------------------------------------
    def answer(self, txn: str | None, offset_msg_id: str) -> TransactionState:
        """The answer to a check-back of the half ``offset_msg_id`` whose SPARK_TXN property is ``txn``."""
        parsed = parse_transaction_id(txn) if txn else None
        if parsed is None:
            return TransactionState.UNKNOWN  # not a half of this sink's: its own producer decides
        namespace, batch_id, _, _ = parsed
        record = self.recorded(namespace, batch_id)
        if record is not None:
            return TransactionState.COMMIT if offset_msg_id in record.offset_ids else TransactionState.ROLLBACK
        if self._exists(self._path(namespace, batch_id, "aborted")):
            return TransactionState.ROLLBACK
        return TransactionState.UNKNOWN


# -- what every producer of the process answers ------------------------------------------------------
_LOGS: dict[str, TransactionLog] = {}
_LOGS_LOCK = threading.Lock()


def log_for(uri: str) -> TransactionLog:
    """The process's TransactionLog of ``uri`` (one per directory, its records cached)."""
    with _LOGS_LOCK:
        found = _LOGS.get(uri)
        if found is None:
            found = _LOGS[uri] = TransactionLog(uri)
        return found


_GROUP_LOGS: dict[str, TransactionLog] = {}


def serve_group(group: str, uri: str) -> TransactionLog:
    """From now on, this process's producers answer check-backs of ``group`` from the log at ``uri``."""
    tlog = log_for(uri)
    with _LOGS_LOCK:
        _GROUP_LOGS[group] = tlog
    return tlog


def answer_check(check: TransactionCheck) -> TransactionState:
    """Every sink producer's transaction listener: the answer of the log serving the half's group."""
    props = check.message.properties
    with _LOGS_LOCK:
        tlog = _GROUP_LOGS.get(props.get("PGROUP", ""))
    if tlog is None:
        log.warning("check-back of %s (group %s): no transaction log serves that group here", check.msg_id,
                    props.get("PGROUP"))  # fmt: skip
        return TransactionState.UNKNOWN
    state = tlog.answer(props.get(PROPERTY_SPARK_TXN), check.offset_msg_id)
    log.info("check-back of %s (%s): %s", check.msg_id, props.get(PROPERTY_SPARK_TXN), state.name)
    return state
