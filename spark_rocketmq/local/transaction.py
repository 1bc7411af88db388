"""Transactional messages as a 4.9.8 broker keeps them (TransactionalMessageServiceImpl,
EndTransactionProcessor, TransactionalMessageCheckService).

A half message (a single send with the TRANSACTION_PREPARED sysFlag) is stored in queue 0 of
RMQ_SYS_TRANS_HALF_TOPIC with REAL_TOPIC / REAL_QID, its sysFlag cleared: no consumer of its topic
sees it. END_TRANSACTION finds it by commit-log offset, checks group, half-queue offset and commit-log
offset, and on COMMIT stores it again in its real topic (sysFlag TRANSACTION_COMMIT); COMMIT or
ROLLBACK then writes an op message (RMQ_SYS_TRANS_OP_HALF_TOPIC, body the half's queue offset, tag
"d") that marks it resolved. As on a 4.9.8 broker, a second COMMIT of one half stores it again.

Every ``check_interval_ms`` the check service asks a producer of the half's group (a connection
that sent HEART_BEAT with that producer group) about each unresolved half older than
``timeout_ms`` (or its CHECK_IMMUNITY_TIME_IN_SECONDS), with CHECK_TRANSACTION_STATE, oneway; a
half checked ``check_max`` times is discarded (never published), as transactionCheckMax does.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import ProtocolError
from ..protocol.codes import RequestCode, ResponseCode, SysFlag
from ..protocol.command import FLAG_ONEWAY, RemotingCommand
from ..protocol.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_WAIT_STORE_MSG_OK,
    decode_properties,
    encode_hashmap_properties,
)
from ..protocol.stored import StoredMessage, decode_stored_message, offset_msg_id
from ..protocol.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    TransactionState,
)
from .delivery import deliver_held
from .server import Connection, Freeze
from .service import ServiceThread
from .stamp import put_stamp
from .store import MessageStore

log = logging.getLogger(__name__)

DEFAULT_CHECK_INTERVAL_MS = 60_000
DEFAULT_TIMEOUT_MS = 6_000
DEFAULT_CHECK_MAX = 15
#: TransactionalMessageUtil.REMOVETAG
REMOVE_TAG = "d"


def half_properties(properties: str, stamp: Mapping[str, str], topic: str, queue_id: int) -> bytes:
    """The properties a half message is stored with: the request's, CLUSTER put in, WAIT out and back,
    then REAL_TOPIC and REAL_QID (TransactionalMessageBridge.parseHalfMessageInner)."""
    props = put_stamp(decode_properties(properties), stamp)
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return encode_hashmap_properties(props).encode()


def _matches(msg: StoredMessage, key: str, begin_ms: int, end_ms: int) -> bool:
    keys = msg.properties.get(PROPERTY_KEYS, "")
    return (msg.uniq_key == key or key in keys.split(" ")) and begin_ms <= msg.store_timestamp <= end_ms


def is_half(sys_flag: int) -> bool:
    return sys_flag & SysFlag.TRANSACTION_ROLLBACK == SysFlag.TRANSACTION_PREPARED


@dataclass
class TransactionCounters:
    """What the service did since the broker started (tests read these)."""

    commits: int = 0
    rollbacks: int = 0
    checks_sent: int = 0
    #: END_TRANSACTION answers to check-backs, by state name.
    check_answers: dict[str, int] = field(default_factory=dict)
    discarded: int = 0


class TransactionService:
    """One broker's half messages: END_TRANSACTION and the periodic check-back. A check-back goes to
    one of ``producer_connections(group)``: the open connections of the half's producer group."""

    def __init__(
        self,
        name: str,
        store: MessageStore,
        freeze: Freeze,
        producer_connections: Callable[[str], list[Connection]],
        *,
        check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        check_max: int = DEFAULT_CHECK_MAX,
    ) -> None:
        self.name = name
        self._store = store
        self._producer_connections = producer_connections
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.counters = TransactionCounters()
        self._lock = threading.Lock()
        #: Half-queue offsets resolved by an op message.
        self._resolved: set[int] = set()
        self._check_times: dict[int, int] = {}
        self._service = ServiceThread(
            f"{name}-tx-check", check_interval_ms / 1000.0, self.check_once, freeze, "transaction check failed"
        )
        self._opaques = itertools.count(1)
        self._next_channel = itertools.count()

    def start(self) -> TransactionService:
        store = self._store
        for op in store.messages(OP_HALF_TOPIC):
            try:
                self._resolved.add(int(op.body))
            except ValueError:
                log.warning("%s: op message with body %r ignored", self.name, op.body[:40])
        self._service.start()
        return self

    def stop(self) -> None:
        self._service.stop()

    def unresolved(self) -> list[int]:
        """Half-queue offsets of the halves neither committed, rolled back nor discarded."""
        end = self._store.max_offset(HALF_TOPIC, 0)
        with self._lock:
            return [o for o in range(end) if o not in self._resolved]

    # -- END_TRANSACTION -----------------------------------------------------------------------------
    def end_transaction(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            header = EndTransactionRequestHeader.from_command(cmd)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        state = header.commit_or_rollback
        if header.from_transaction_check:
            with self._lock:
                answers = self.counters.check_answers
                answers[state.name] = answers.get(state.name, 0) + 1
        if state is TransactionState.UNKNOWN:
            return None  # pending: no answer, the next check asks again
        store = self._store
        with self._lock:
            half_offset = self._half_offset(header.commit_log_offset)
            if half_offset is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, remark="Find prepared transaction message failed")
            (record,) = store.read(HALF_TOPIC, 0, half_offset, 1)
            half = decode_stored_message(record)
            if half.properties.get(PROPERTY_PRODUCER_GROUP) != header.producer_group:
                return cmd.response(ResponseCode.SYSTEM_ERROR, remark="The producer group wrong")
            if half_offset != header.tran_state_table_offset:
                return cmd.response(ResponseCode.SYSTEM_ERROR, remark="The transaction state table offset wrong")
            if state is TransactionState.COMMIT:
                deliver_held(
                    store,
                    half,
                    half.properties,
                    sys_flag=(half.sys_flag & ~SysFlag.TRANSACTION_ROLLBACK) | SysFlag.TRANSACTION_COMMIT,
                    store_timestamp=half.store_timestamp,
                )
                self.counters.commits += 1
            else:
                self.counters.rollbacks += 1
            self._resolve(half_offset, half.born_host, half.store_host)
        return cmd.response(ResponseCode.SUCCESS)

    def _half_offset(self, commit_log_offset: int) -> int | None:
        cq = self._store.queues.get((HALF_TOPIC, 0))
        if cq is None:
            return None
        try:
            return cq.positions.index(commit_log_offset)
        except ValueError:
            return None

    def _resolve(self, half_offset: int, born_host: tuple[str, int], store_host: tuple[str, int]) -> None:
        """Write the op message of a half (under the lock)."""
        props = encode_hashmap_properties({PROPERTY_TAGS: REMOVE_TAG, PROPERTY_WAIT_STORE_MSG_OK: "false"}).encode()
        self._store.append_messages(
            OP_HALF_TOPIC,
            0,
            [(0, str(half_offset).encode(), props)],
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            born_host=born_host,
            store_host=store_host,
            reconsume_times=0,
        )
        self._resolved.add(half_offset)
        self._check_times.pop(half_offset, None)

    # -- QUERY_MESSAGE by unique key ------------------------------------------------------------------------
    def query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The messages of a topic with a UNIQ_KEY or a KEYS entry (QueryMessageProcessor: the broker indexes
        both as topic#key); a scan of the topic stands in for the broker's index."""
        topic, key = cmd.require("topic"), cmd.require("key")
        begin, end = cmd.int_field("beginTimestamp"), cmd.int_field("endTimestamp")
        store = self._store
        found = [
            rec
            for (t, q), cq in sorted(store.queues.items())
            if t == topic
            for rec in store.read(t, q, 0, len(cq))
            if _matches(decode_stored_message(rec), key, begin, end)
        ]
        if not found:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND, remark="can not find message, maybe time range not correct"
            )
        return cmd.response(ResponseCode.SUCCESS, body=b"".join(found))

    # -- check-back ----------------------------------------------------------------------------------
    def check_once(self, now_ms: int | None = None) -> int:
        """One pass of the check service: check-backs sent for the unresolved halves that are due."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        store = self._store
        sent = 0
        for offset in self.unresolved():
            (record,) = store.read(HALF_TOPIC, 0, offset, 1)
            half = decode_stored_message(record)
            immunity = half.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
            wait_ms = self.timeout_ms
            if immunity is not None and immunity.isdigit():
                wait_ms = max(wait_ms, int(immunity) * 1000)
            if now - half.store_timestamp < wait_ms:
                continue
            with self._lock:
                if offset in self._resolved:
                    continue
                times = self._check_times.get(offset, 0)
                if times >= self.check_max:
                    log.warning("%s: half %d checked %d times, discarded", self.name, offset, times)
                    self.counters.discarded += 1
                    self._resolve(offset, half.born_host, half.store_host)
                    continue
                self._check_times[offset] = times + 1
            group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
            channels = self._producer_connections(group)
            if not channels:
                log.warning("%s: no producer of group %s to check half %d back", self.name, group, offset)
                continue
            conn = channels[next(self._next_channel) % len(channels)]
            header = CheckTransactionStateRequestHeader(
                tran_state_table_offset=offset,
                commit_log_offset=half.commit_log_offset,
                msg_id=half.uniq_key,
                transaction_id=half.uniq_key,
                offset_msg_id=offset_msg_id(half.store_host[0], half.store_host[1], half.commit_log_offset),
            )
            cmd = RemotingCommand(
                code=RequestCode.CHECK_TRANSACTION_STATE,
                opaque=next(self._opaques),
                flag=FLAG_ONEWAY,
                ext_fields=header.to_fields(),
                body=record,
                language="JAVA",
            )
            try:
                conn.send(cmd)
            except OSError as exc:
                log.warning("%s: check-back to %s failed: %s", self.name, conn.peer_addr, exc)
                continue
            sent += 1
            with self._lock:
                self.counters.checks_sent += 1
        return sent
