"""Arrow record batches -> encoded MessageBatch records, vectorised (no Python object per row).

A record in a batch body is (MessageDecoder.encodeMessage)::

    [4 totalSize][4 magic 0][4 bodyCRC 0][4 flag 0][4 bodyLen][body][2 propertiesLen][properties UTF-8]

Each row's properties are built with Arrow string kernels (spark/row_properties.py: fixed keys in the
Java client's HashMap order, then the row's user properties in map order); the 20 fixed bytes and the
2-byte length come from numpy big-endian arrays; ``binary_join_element_wise`` glues the pieces so that
the resulting array's data buffer is the concatenation of the records: a request body is a slice of it.
Without a column that gives rows properties of their own (tags, keys, ...), every row's properties are
WAIT and its UNIQ_KEY, of one width: length and properties are then one numpy array with the ids
written in place, and the join glues three pieces instead of four after a join of the properties.

Rows sent on their own (delayed and timer rows, every row of exactly_once) are checked and grouped
with the others, but sent as a Message built from the row's fields (spark/row_fields.py ``RowFields``),
which the producer encodes as a single message (protocol/requests.py): their batch record is never sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidMessageError
from ..protocol.javamap import java_string_hash
from ..protocol.message import BATCH_RECORD_OVERHEAD, MAX_PROPERTIES_LENGTH, Message, validate_topic
from .message_ids import BatchContext
from .row_fields import RowFields
from .row_properties import (
    PER_ROW_PROPERTY_COLUMNS,
    UserProperties,
    encoded_properties,
    fixed_tail,
    mark_invalid,
    plain_column,
    user_properties,
)
from .schema import MessageColumns

_HEAD = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("flag", ">i4"), ("body_len", ">i4")])


@dataclass
class Group:
    """Consecutive records (in the encoded array) for one topic, and one queue when sharded."""

    topic: str
    #: Index into the topic's publish queues (rows with one sharding key), None: the producer chooses.
    queue_slot: int | None
    start: int
    stop: int
    #: Rows sent one per request: delayed and timer rows (a broker ignores DELAY and TIMER_* inside a batch,
    #: MessageExtBatch) and, in exactly_once mode, every row (a broker refuses a transactional batch).
    single: bool = False


@dataclass
class EncodedRows:
    records: pa.BinaryArray
    groups: list[Group]
    rows: int
    invalid_codes: np.ndarray
    invalid_count: int
    #: Each record's row in the record batch (records are grouped by topic, so not in row order).
    record_rows: np.ndarray
    #: The rows' fields, for the rows sent on their own.
    row_fields: RowFields
    #: Each row's topic (an index into topic_names; rows with no topic: 0), for describing invalid rows.
    topic_names: list[str]
    topic_index: np.ndarray
    #: Writable queues of each topic a queue_id column names (0: no route known).
    queue_counts: dict[str, int]
    #: Valid rows whose properties map had reserved names left out, and rows per name left out.
    reserved_left_out_rows: int = 0
    reserved_left_out: dict[str, int] = field(default_factory=dict)

    def request_slices(self, limit: int) -> list[tuple[Group, int, int]]:
        """(group, first record, end record) pieces whose encoded size is <= limit bytes each."""
        offsets = np.frombuffer(self.records.buffers()[1], dtype=np.int32)[
            self.records.offset : self.records.offset + len(self.records) + 1
        ].astype(np.int64)
        out: list[tuple[Group, int, int]] = []
        for g in self.groups:
            start = g.start
            while start < g.stop:
                if g.single:
                    out.append((g, start, start + 1))
                    start += 1
                    continue
                end = int(np.searchsorted(offsets, offsets[start] + limit, side="right")) - 1
                end = min(max(end, start + 1), g.stop)
                out.append((g, start, end))
                start = end
        return out

    def message(self, index: int, topic: str) -> Message:
        """Record ``index`` (of a ``single`` group of ``topic``) as a Message built from its row's fields; the
        producer encodes it as a single message. The rows sent alone are converted in blocks of
        SINGLE_BLOCK_ROWS (one Arrow take and one Python list per column and block)."""
        return self.row_fields.message(int(self.record_rows[index]), topic)

    def body(self, start: int, end: int) -> bytes:
        """The batch body of records start..end-1, as bytes (a copy; the writer sends ``view``)."""
        return self.view(start, end).to_pybytes()

    def view(self, start: int, end: int) -> pa.Buffer:
        """The batch body of records start..end-1: a slice of the records' data buffer, no copy.

        The slice keeps the whole data buffer alive while it is referenced (the writer holds it
        until its request settles).
        """
        buffers = self.records.buffers()
        base = self.records.offset
        offsets = np.frombuffer(buffers[1], dtype=np.int32)
        lo = int(offsets[base + start])
        hi = int(offsets[base + end])
        return buffers[2].slice(lo, hi - lo)


class TopicChecker:
    """Validates each distinct topic once per process (a topic column has few distinct values)."""

    def __init__(self) -> None:
        self._seen: dict[str, str | None] = {}

    def problem(self, topic: str) -> str | None:
        if topic not in self._seen:
            try:
                validate_topic(topic)
                self._seen[topic] = None
            except InvalidMessageError as exc:
                self._seen[topic] = str(exc)
        return self._seen[topic]


def encode_rows(
    batch: pa.RecordBatch,
    columns: MessageColumns,
    *,
    topic_option: str | None,
    ctx: BatchContext,
    partition: int,
    row_start: int,
    max_message_size: int,
    queue_count: Callable[[str], int],
    topics: TopicChecker | None = None,
    transactional: bool = False,
) -> EncodedRows:
    """Encode the rows of one record batch; invalid rows get a reason code and are left out.

    ``transactional``: every row goes on its own (as a half message) and a delayed row is invalid."""
    n = batch.num_rows
    codes = np.zeros(n, dtype=np.int8)
    col = {name: plain_column(batch.column(src)) for name, src in columns.as_dict().items() if src is not None}
    topics = topics or TopicChecker()

    body = col["body"]
    if pa.types.is_string(body.type):
        body = body.cast(pa.binary())
    body_len = pc.fill_null(pc.binary_length(body), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    mark_invalid(codes, body.is_null().to_numpy(zero_copy_only=False), 1)
    mark_invalid(codes, body_len == 0, 2)

    # Topics: one dictionary entry per distinct topic.
    if topic_option is not None:
        topic_names = [topic_option]
        topic_idx = np.zeros(n, dtype=np.int32)
    else:
        enc = pc.dictionary_encode(col["topic"])
        topic_names = enc.dictionary.to_pylist()
        idx = enc.indices
        mark_invalid(codes, idx.is_null().to_numpy(zero_copy_only=False), 3)
        topic_idx = pc.fill_null(idx, 0).to_numpy(zero_copy_only=False).astype(np.int32)
        bad = [i for i, t in enumerate(topic_names) if topics.problem(t) is not None]
        if bad:
            mark_invalid(codes, np.isin(topic_idx, bad) & (codes == 0), 4)

    tail: np.ndarray | None = None  # [2 properties length][properties] of each row, when of one width
    props: pa.Array | None = None
    user: UserProperties | None = None
    if "properties" in col:  # reserved names left out: the rows sent alone see the kept map only
        user = user_properties(col["properties"], codes, adopt_sharding_key="sharding_key" not in col)
        col["properties"] = user.kept
        if user.sharding_key is not None:
            col["sharding_key"] = user.sharding_key
    if not any(name in col for name in PER_ROW_PROPERTY_COLUMNS):
        tail = fixed_tail(ctx, partition, row_start, n)
        props_len = np.full(n, tail.shape[1] - 2, dtype=np.int64)
    else:
        props = encoded_properties(col, codes, ctx, partition, row_start, user.pairs if user else None)
        props_len = pc.binary_length(props).to_numpy(zero_copy_only=False).astype(np.int64)
    delayed = np.zeros(n, dtype=bool)  # rows sent alone: a delay level or a delivery time
    if "delay_level" in col:
        levelled = pc.fill_null(col["delay_level"], 0).to_numpy(zero_copy_only=False) > 0
        delayed |= levelled
        if transactional:
            mark_invalid(codes, levelled, 14)
    timed_rows = np.zeros(n, dtype=bool)
    if "deliver_time" in col:
        timed_rows |= col["deliver_time"].is_valid().to_numpy(zero_copy_only=False)
    if "delay_ms" in col:
        timed_rows |= pc.fill_null(col["delay_ms"], 0).to_numpy(zero_copy_only=False) != 0
    delayed |= timed_rows
    if transactional:
        mark_invalid(codes, timed_rows, 18)
        delayed = np.ones(n, dtype=bool)  # "single": one request per row
    shard_idx = col.get("sharding_key")
    queue_ids, queue_counts = _queue_ids(col, codes, topic_names, topic_idx, queue_count)
    mark_invalid(codes, props_len > MAX_PROPERTIES_LENGTH, 12)
    total = BATCH_RECORD_OVERHEAD + body_len + props_len
    mark_invalid(codes, total > max_message_size, 13)

    valid = codes == 0
    invalid_count = int(n - np.count_nonzero(valid))
    left_out_rows, left_out = _left_out(user, valid)
    record_rows = np.flatnonzero(valid) if invalid_count else np.arange(n)
    row_topics = topic_idx
    if invalid_count:
        mask = pa.array(valid)
        body = body.filter(mask)
        if props is not None:
            props = props.filter(mask)
        if tail is not None:
            tail = tail[valid]
        body_len, props_len, total, topic_idx = body_len[valid], props_len[valid], total[valid], topic_idx[valid]
        delayed = delayed[valid]
        if shard_idx is not None:
            shard_idx = shard_idx.filter(mask)
        if queue_ids is not None:
            queue_ids = queue_ids[valid]
    m = len(body)
    head = np.zeros(m, dtype=_HEAD)
    head["total"] = total
    head["body_len"] = body_len
    if tail is None:
        assert props is not None
        plen = props_len.astype(">i2")
        tail_parts = [_fixed_binary(plen.view(np.uint8), m, 2), props.cast(pa.binary())]
    else:
        tail_parts = [_fixed_binary(tail.reshape(-1), m, tail.shape[1])]
    records = pc.binary_join_element_wise(_fixed_binary(head.view(np.uint8), m, 20), body, *tail_parts, b"")

    # Group by topic, then by queue for rows with a sharding key, keeping row order within a group.
    slot = np.full(m, -1, dtype=np.int64)
    if shard_idx is not None and m:
        enc = pc.dictionary_encode(shard_idx)
        keys_idx = enc.indices
        present = pc.fill_null(pc.greater(pc.binary_length(shard_idx), 0), False).to_numpy(zero_copy_only=False)
        kidx = pc.fill_null(keys_idx, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        hashes = np.array([abs(java_string_hash(k)) for k in enc.dictionary.to_pylist()] or [0], dtype=np.int64)
        sharded_topics = set(np.unique(topic_idx[present]).tolist())
        counts = np.ones(len(topic_names), dtype=np.int64)
        for i in sharded_topics:
            counts[i] = max(queue_count(topic_names[i]), 1)
        slot = np.where(present, hashes[kidx] % counts[topic_idx], -1)
    if queue_ids is not None:
        slot = np.where(queue_ids >= 0, queue_ids, slot)
    group_key = topic_idx.astype(np.int64) * (1 << 32) + delayed.astype(np.int64) * (1 << 31) + (slot + 1)
    order = np.argsort(group_key, kind="stable")
    if m and not np.array_equal(order, np.arange(m)):
        records = records.take(pa.array(order))
        group_key = group_key[order]
        record_rows = record_rows[order]
    groups: list[Group] = []
    if m:
        bounds = np.flatnonzero(np.diff(group_key)) + 1
        starts = np.concatenate(([0], bounds))
        stops = np.concatenate((bounds, [m]))
        for s, e in zip(starts.tolist(), stops.tolist(), strict=True):
            gk = int(group_key[s])
            q = (gk & 0x7FFFFFFF) - 1
            groups.append(Group(topic_names[gk >> 32], None if q < 0 else q, s, e, bool(gk & (1 << 31))))
    singles = np.sort(record_rows[delayed[order]])  # the rows sent alone, ascending
    row_fields = RowFields(col, ctx, partition, row_start, singles)
    return EncodedRows(
        records,
        groups,
        n,
        codes,
        invalid_count,
        record_rows,
        row_fields,
        topic_names,
        row_topics,
        queue_counts,
        left_out_rows,
        left_out,
    )


def _left_out(user: UserProperties | None, valid: np.ndarray) -> tuple[int, dict[str, int]]:
    """How many valid rows had reserved names left out of their properties, and rows per name."""
    if user is None or not len(user.left_rows):
        return 0, {}
    sent = valid[user.left_rows]
    counts = pc.value_counts(user.left_names.filter(pa.array(sent))).to_pylist()
    return int(np.unique(user.left_rows[sent]).size), {c["values"]: int(c["counts"]) for c in counts}


def _queue_ids(
    col: dict[str, pa.Array],
    codes: np.ndarray,
    topic_names: list[str],
    topic_idx: np.ndarray,
    queue_count: Callable[[str], int],
) -> tuple[np.ndarray | None, dict[str, int]]:
    """Each row's queue_id (-1: null), ids outside its topic's writable queues marked invalid (19); the
    queue counts asked. A topic with no known route (0 queues) marks nothing: its rows fail to be sent,
    with the route's error, as keyed rows do."""
    if "queue_id" not in col:
        return None, {}
    arr = col["queue_id"]
    chosen = arr.is_valid().to_numpy(zero_copy_only=False)
    ids = np.where(chosen, pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).astype(np.int64), -1)
    asked = chosen & (codes == 0)
    counts = np.zeros(len(topic_names), dtype=np.int64)
    for i in np.unique(topic_idx[asked]).tolist():
        counts[i] = queue_count(topic_names[i])
    limit = counts[topic_idx]
    mark_invalid(codes, chosen & ((ids < 0) | ((limit > 0) & (ids >= limit))), 19)
    return ids, {topic_names[i]: int(counts[i]) for i in np.unique(topic_idx[asked]).tolist()}


def _fixed_binary(data: np.ndarray, count: int, width: int) -> pa.Array:
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
