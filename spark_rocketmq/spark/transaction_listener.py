"""The driver's transaction listener (the producer of spark/commit.py's TransactionCoordinator; executor
producers do not join their group, so brokers check halves back on the driver alone): the logs this
process answers each producer group's check-backs from (``serve_group``; a driver ``claim_group``s its
group for its log directory), and the answer of the log that decides the half's batch (``answer_check``)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..client.config import ProducerConfig
from ..client.transaction import TransactionCheck
from ..errors import ConfigError
from ..protocol.requests import wrap_namespace
from ..protocol.transaction import PROPERTY_PRODUCER_GROUP, TransactionState
from .transaction_ids import PROPERTY_SPARK_TXN, parse_transaction_id
from .transaction_log import BatchState, TransactionLog

log = logging.getLogger("spark_rocketmq.spark")

_LOGS: dict[str, TransactionLog] = {}
_LOGS_LOCK = threading.Lock()


def log_for(uri: str) -> TransactionLog:
    """The process's TransactionLog of ``uri`` (one per directory, its records cached)."""
    with _LOGS_LOCK:
        found = _LOGS.get(uri)
    if found is not None:
        return found
    opened = TransactionLog(uri)  # outside the lock: opening an hdfs:// or s3:// file system takes a while
    with _LOGS_LOCK:
        return _LOGS.setdefault(uri, opened)


#: The logs each producer group's check-backs are answered from in this process, newest first: a
#: driver may run several sinks of one group in turn, each with its own log.
_GROUP_LOGS: dict[str, list[TransactionLog]] = {}
#: Logs a group keeps at most (the oldest is forgotten).
MAX_LOGS_PER_GROUP = 8
#: The log directory each group's open driver (TransactionCoordinator) commits to, and how many are open.
_DRIVER_CLAIMS: dict[str, tuple[str, int]] = {}


def serve_group(group: str, uri: str) -> TransactionLog:
    """From now on, this process's producers answer check-backs of ``group`` from the log at ``uri``
    (too: a check-back is answered by the newest of the group's logs that knows the half's batch)."""
    tlog = log_for(uri)
    with _LOGS_LOCK:
        logs = _GROUP_LOGS.setdefault(group, [])
        if tlog in logs:
            logs.remove(tlog)
        logs.insert(0, tlog)
        del logs[MAX_LOGS_PER_GROUP:]
    return tlog


def sink_group(config: ProducerConfig) -> str:
    """The producer group a sink's halves carry (PGROUP): its namespace applied."""
    return wrap_namespace(config.namespace, config.group)


def claim_group(group: str, uri: str) -> TransactionLog:
    """serve_group for a driver that commits to ``uri``: ConfigError when another open driver of this
    process commits batches of ``group`` to another directory (their check-backs, asked of any producer
    of the group, would be answered from either log). ``release_group`` when done."""
    with _LOGS_LOCK:
        claimed, count = _DRIVER_CLAIMS.get(group, (uri, 0))
        if claimed != uri:
            raise ConfigError(
                f"producer group {group!r} already commits exactly_once batches to transaction_log_dir={claimed!r} "
                f"in this process; a sink with transaction_log_dir={uri!r} needs a producer group of its own"
            )
        _DRIVER_CLAIMS[group] = (uri, count + 1)
    try:
        return serve_group(group, uri)
    except BaseException:
        release_group(group)
        raise


def release_group(group: str) -> None:
    """A driver of ``group`` is done (claim_group)."""
    with _LOGS_LOCK:
        uri, count = _DRIVER_CLAIMS.get(group, ("", 1))
        if count <= 1:
            _DRIVER_CLAIMS.pop(group, None)
        else:
            _DRIVER_CLAIMS[group] = (uri, count - 1)


def _log_answering(group: str, txn: str | None) -> TransactionLog | None:
    """The group's log that decides the batch named by ``txn``: the only one, else the newest that
    recorded or aborted it (the newest, when none did: the batch is still running)."""
    with _LOGS_LOCK:
        logs = list(_GROUP_LOGS.get(group, ()))
    if len(logs) <= 1:
        return logs[0] if logs else None
    parsed = parse_transaction_id(txn) if txn else None
    if parsed is not None:
        for tlog in logs:
            if tlog.state(*parsed) is not BatchState.NEW:
                return tlog
    return logs[0]


def answer_check(check: TransactionCheck, producer: Any) -> TransactionState:
    """The driver producer's transaction listener: the answer of the log serving the half's group;
    ``producer`` (the one asked) looks the row up on the asking broker."""
    props = check.message.properties
    tlog = _log_answering(props.get(PROPERTY_PRODUCER_GROUP, ""), props.get(PROPERTY_SPARK_TXN))
    if tlog is None:
        log.warning("check-back of %s (group %s): no transaction log serves that group here", check.msg_id,
                    props.get(PROPERTY_PRODUCER_GROUP))  # fmt: skip
        return TransactionState.UNKNOWN
    return tlog.answer_check(check, producer)
