"""Arrow record batches -> encoded MessageBatch records, vectorised (no Python object per row).

A record in a batch body is (MessageDecoder.encodeMessage)::

    [4 totalSize][4 magic 0][4 bodyCRC 0][4 flag 0][4 bodyLen][body][2 propertiesLen][properties UTF-8]

Properties are built per row with Arrow string kernels (fixed keys in the Java client's HashMap
order, then the row's user properties in map order); the 20 fixed bytes and the 2-byte length come
from numpy big-endian arrays; ``binary_join_element_wise`` glues the pieces so that the resulting
array's data buffer is the concatenation of the records: a request body is a slice of it. Without a
column that gives rows properties of their own (tags, keys, ...), every row's properties are WAIT
and its UNIQ_KEY, of one width: length and properties are then one numpy array with the ids
written in place, and the join glues three pieces instead of four after a join of the properties.

Rows sent on their own (delayed and timer rows, every row of exactly_once) are checked and grouped
with the others, but sent as a Message built from the row's fields (``RowFields``), which the
producer encodes as a single message (protocol/requests.py): their batch record is never sent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidMessageError
from ..protocol.javamap import hashmap_order, java_string_hash
from ..protocol.message import (
    BATCH_RECORD_OVERHEAD,
    MAX_DELAY_LEVEL,
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    RESERVED_PROPERTY_NAMES,
    Message,
    encode_properties,
    validate_topic,
)
from ..protocol.timer import PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS
from .message_ids import UNIQ_PART_PREFIX, BatchContext, uniq_key_bytes, uniq_property_array, write_uniq_keys
from .schema import MessageColumns

#: Fixed property names in the order a java.util.HashMap of 16 buckets iterates them.
FIXED_ORDER = hashmap_order(
    [
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_WAIT_STORE_MSG_OK,
        PROPERTY_DELAY_TIME_LEVEL,
        PROPERTY_SHARDING_KEY,
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DELAY_MS,
    ]
)
_SEP = NAME_VALUE_SEPARATOR
_HEAD = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("flag", ">i4"), ("body_len", ">i4")])
_RESERVED = pa.array(sorted(RESERVED_PROPERTY_NAMES))
_DELAY_PARTS = pa.array(
    [None] + [f"{PROPERTY_DELAY_TIME_LEVEL}{_SEP}{i}" for i in range(1, MAX_DELAY_LEVEL + 1)], pa.string()
)


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


#: Rows sent alone whose fields are converted to Python at once (bounds the memory of exactly_once).
SINGLE_BLOCK_ROWS = 1024


class RowFields:
    """A record batch's columns by message field (plain types), what its rows' ids are made of, and the
    rows sent alone (ascending): their Messages, built a block of rows at a time."""

    def __init__(
        self, columns: dict[str, pa.Array], ctx: BatchContext, partition: int, row_start: int, singles: np.ndarray
    ) -> None:
        self.columns, self.ctx, self.partition, self.row_start = columns, ctx, partition, row_start
        self._singles = singles
        self._block: dict[int, tuple[Any, ...]] = {}

    def message(self, row: int, topic: str) -> Message:
        """Row ``row`` of the record batch (one sent alone) as a Message with the fields and UNIQ_KEY of its
        batch record."""
        fields = self._block.get(row)
        if fields is None:  # the first row of its block (one numpy search per block, not per row)
            at = int(np.searchsorted(self._singles, row))
            if at >= len(self._singles) or self._singles[at] != row:
                raise ValueError(f"row {row} is not a row sent alone")
            start = at - at % SINGLE_BLOCK_ROWS
            self._block = self._fields(self._singles[start : start + SINGLE_BLOCK_ROWS])
            fields = self._block[row]
        body, tags, keys, props, level, deliver, delay, key, uniq = fields
        return Message(
            topic=topic,
            body=body,
            tags=tags,
            keys=keys,
            properties=props,
            delay_level=level,
            deliver_time_ms=deliver,
            delay_time_ms=delay,
            uniq_key=uniq,
            _extra={PROPERTY_SHARDING_KEY: key} if key else None,
        )

    def _fields(self, rows: np.ndarray) -> dict[int, tuple[Any, ...]]:
        """Each row's (body, tags, keys, properties, delay_level, deliver_time_ms, delay_time_ms,
        sharding key, UNIQ_KEY), as the batch record has them (empty tags or keys: none)."""
        m = len(rows)
        taken = {
            name: arr.take(pa.array(rows)) for name, arr in self.columns.items() if name not in ("topic", "queue_id")
        }

        def values(name: str) -> list[Any]:
            return taken[name].to_pylist() if name in taken else [None] * m

        bodies = [b.encode() if isinstance(b, str) else b for b in values("body")]
        keys = [
            (None if None in k else " ".join(k)) if isinstance(k, list) else k  # as binary_join: a null, no KEYS
            for k in values("keys")
        ]
        props = [dict(p) if p else None for p in values("properties")]
        timers: dict[str, list[int | None]] = {}
        for name in ("deliver_time", "delay_ms"):
            if name in taken:
                ms, on = timer_millis(taken[name])
                if name == "delay_ms":
                    on &= ms != 0
                timers[name] = [int(v) if o else None for v, o in zip(ms.tolist(), on.tolist(), strict=True)]
            else:
                timers[name] = [None] * m
        first = int(rows[0]) if m else 0
        span = int(rows[-1]) + 1 - first if m else 0  # the blocks' spans add up to the batch at most
        ids = uniq_key_bytes(self.ctx, self.partition, self.row_start + first, span)[rows - first]
        return {
            row: (body, tags or None, key_text or None, prop, level or 0, deliver, delay, shard, uniq)
            for row, body, tags, key_text, prop, level, deliver, delay, shard, uniq in zip(
                rows.tolist(),
                bodies,
                values("tags"),
                keys,
                props,
                values("delay_level"),
                timers["deliver_time"],
                timers["delay_ms"],
                values("sharding_key"),
                (bytes(i).decode("ascii") for i in ids),
                strict=True,
            )
        }


def timer_millis(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(epoch or delay milliseconds, present) of a deliver_time (timestamp or epoch ms) or delay_ms column."""
    present = arr.is_valid().to_numpy(zero_copy_only=False)
    t = arr.type
    if pa.types.is_timestamp(t):
        raw = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        per_ms = {"s": -1000, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        ms = raw * 1000 if per_ms < 0 else raw // per_ms  # floor: a time never moves later
    else:
        ms = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return ms, present


#: What a list column (keys) becomes before the string kernels: Spark declares the elements of
#: F.split(...) or F.array(<non-null columns>) non-null, and Arrow's binary_join has no kernel for
#: list<element: string not null>.
_STRING_LIST = pa.list_(pa.field("item", pa.string(), nullable=True))


def _plain(arr: pa.Array) -> pa.Array:
    """Large string/binary (spark.sql.execution.arrow.useLargeVarTypes) to the 32-bit offset kinds;
    lists of strings, large or not, with nullable or non-null elements, to list<string>."""
    t = arr.type
    if pa.types.is_large_string(t):
        return arr.cast(pa.string())
    if pa.types.is_large_binary(t):
        return arr.cast(pa.binary())
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and t != _STRING_LIST:
        return arr.cast(_STRING_LIST)
    return arr


def _has_separator(arr: pa.Array) -> np.ndarray:
    hit = pc.or_(pc.match_substring(arr, "\x01"), pc.match_substring(arr, "\x02"))
    return pc.fill_null(hit, False).to_numpy(zero_copy_only=False)


def _mark(codes: np.ndarray, mask: np.ndarray, code: int) -> None:
    """Give the rows of ``mask`` not yet invalid the reason ``code`` (spark/invalid.py REASONS)."""
    codes[(codes == 0) & mask] = code


def _part(name: str, values: pa.Array) -> pa.Array:
    """``NAME\\x01value``, null where the value is null or empty (no property)."""
    joined = pc.binary_join_element_wise(f"{name}{_SEP}", values, "")
    empty = pc.fill_null(pc.equal(pc.binary_length(values), 0), True)
    return pc.if_else(empty, pa.scalar(None, pa.string()), joined)


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


#: Columns that give rows properties of their own (all but body and topic); without them every
#: row's properties are WAIT=true and its UNIQ_KEY, of one width.
PER_ROW_PROPERTY_COLUMNS = tuple(f.name for f in fields(MessageColumns) if f.name not in ("body", "topic", "queue_id"))


@functools.cache
def _fixed_tail_template() -> tuple[bytes, int]:
    """[2 properties length][WAIT and UNIQ_KEY properties, id left blank] and where the id goes."""
    values = {PROPERTY_WAIT_STORE_MSG_OK: "true", PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "0" * 32}
    text = encode_properties({k: values[k] for k in FIXED_ORDER if k in values}).encode()
    at = text.index(f"{PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}{_SEP}".encode()) + len(UNIQ_PART_PREFIX)
    return len(text).to_bytes(2, "big") + text, 2 + at


def _fixed_tail(ctx: BatchContext, partition: int, row_start: int, count: int) -> np.ndarray:
    """What follows each body when no column gives rows properties of their own: (count, width) bytes."""
    template, at = _fixed_tail_template()
    tail = np.empty((count, len(template)), dtype=np.uint8)
    tail[:] = np.frombuffer(template, dtype=np.uint8)
    write_uniq_keys(tail[:, at : at + 32], ctx, partition, row_start)
    return tail


def _properties(
    col: dict[str, pa.Array], codes: np.ndarray, ctx: BatchContext, partition: int, row_start: int
) -> pa.Array:
    """Each row's encoded properties (fixed ones in HashMap order, then its own), checked into ``codes``."""
    n = len(codes)
    parts: dict[str, pa.Array | str] = {PROPERTY_WAIT_STORE_MSG_OK: f"{PROPERTY_WAIT_STORE_MSG_OK}{_SEP}true"}
    if "tags" in col:
        _mark(codes, _has_separator(col["tags"]), 5)
        parts[PROPERTY_TAGS] = _part(PROPERTY_TAGS, col["tags"])
    if "keys" in col:
        keys = col["keys"]
        if pa.types.is_list(keys.type):
            keys = pc.binary_join(keys, " ")
        _mark(codes, _has_separator(keys), 6)
        parts[PROPERTY_KEYS] = _part(PROPERTY_KEYS, keys)
    if "delay_level" in col:
        level = pc.fill_null(col["delay_level"], 0).to_numpy(zero_copy_only=False).astype(np.int64)
        _mark(codes, (level < 0) | (level > MAX_DELAY_LEVEL), 10)
        parts[PROPERTY_DELAY_TIME_LEVEL] = _DELAY_PARTS.take(pa.array(np.clip(level, 0, MAX_DELAY_LEVEL)))
    if "sharding_key" in col:
        _mark(codes, _has_separator(col["sharding_key"]), 11)
        parts[PROPERTY_SHARDING_KEY] = _part(PROPERTY_SHARDING_KEY, col["sharding_key"])
    timed = np.zeros(n, dtype=np.int64)  # how many of delay_level, deliver_time, delay_ms a row sets
    if "delay_level" in col:
        timed += pc.fill_null(col["delay_level"], 0).to_numpy(zero_copy_only=False) != 0
    for name, prop, bad in (("deliver_time", PROPERTY_TIMER_DELIVER_MS, 17), ("delay_ms", PROPERTY_TIMER_DELAY_MS, 16)):
        if name in col:
            ms, present = timer_millis(col[name])
            _mark(codes, present & (ms < 0), bad)
            on = present & (ms != 0) if name == "delay_ms" else present
            timed += on
            values = pa.array(ms.astype(str), pa.string(), mask=~on)
            parts[prop] = _part(prop, values)
    _mark(codes, timed > 1, 15)
    parts[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_property_array(ctx, partition, row_start, n)
    ordered: list[pa.Array | str] = [parts[k] for k in FIXED_ORDER if k in parts]
    if "properties" in col:
        ordered.append(_user_properties(col["properties"], codes))
    return pc.binary_join_element_wise(*ordered, PROPERTY_SEPARATOR, null_handling="skip")


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
    col = {name: _plain(batch.column(src)) for name, src in columns.as_dict().items() if src is not None}
    topics = topics or TopicChecker()

    body = col["body"]
    if pa.types.is_string(body.type):
        body = body.cast(pa.binary())
    body_len = pc.fill_null(pc.binary_length(body), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    _mark(codes, body.is_null().to_numpy(zero_copy_only=False), 1)
    _mark(codes, body_len == 0, 2)

    # Topics: one dictionary entry per distinct topic.
    if topic_option is not None:
        topic_names = [topic_option]
        topic_idx = np.zeros(n, dtype=np.int32)
    else:
        enc = pc.dictionary_encode(col["topic"])
        topic_names = enc.dictionary.to_pylist()
        idx = enc.indices
        _mark(codes, idx.is_null().to_numpy(zero_copy_only=False), 3)
        topic_idx = pc.fill_null(idx, 0).to_numpy(zero_copy_only=False).astype(np.int32)
        bad = [i for i, t in enumerate(topic_names) if topics.problem(t) is not None]
        if bad:
            _mark(codes, np.isin(topic_idx, bad) & (codes == 0), 4)

    tail: np.ndarray | None = None  # [2 properties length][properties] of each row, when of one width
    props: pa.Array | None = None
    if not any(name in col for name in PER_ROW_PROPERTY_COLUMNS):
        tail = _fixed_tail(ctx, partition, row_start, n)
        props_len = np.full(n, tail.shape[1] - 2, dtype=np.int64)
    else:
        props = _properties(col, codes, ctx, partition, row_start)
        props_len = pc.binary_length(props).to_numpy(zero_copy_only=False).astype(np.int64)
    delayed = np.zeros(n, dtype=bool)  # rows sent alone: a delay level or a delivery time
    if "delay_level" in col:
        levelled = pc.fill_null(col["delay_level"], 0).to_numpy(zero_copy_only=False) > 0
        delayed |= levelled
        if transactional:
            _mark(codes, levelled, 14)
    timed_rows = np.zeros(n, dtype=bool)
    if "deliver_time" in col:
        timed_rows |= col["deliver_time"].is_valid().to_numpy(zero_copy_only=False)
    if "delay_ms" in col:
        timed_rows |= pc.fill_null(col["delay_ms"], 0).to_numpy(zero_copy_only=False) != 0
    delayed |= timed_rows
    if transactional:
        _mark(codes, timed_rows, 18)
        delayed = np.ones(n, dtype=bool)  # "single": one request per row
    shard_idx = col.get("sharding_key")
    queue_ids, queue_counts = _queue_ids(col, codes, topic_names, topic_idx, queue_count)
    _mark(codes, props_len > MAX_PROPERTIES_LENGTH, 12)
    total = BATCH_RECORD_OVERHEAD + body_len + props_len
    _mark(codes, total > max_message_size, 13)

    valid = codes == 0
    invalid_count = int(n - np.count_nonzero(valid))
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
        records, groups, n, codes, invalid_count, record_rows, row_fields, topic_names, row_topics, queue_counts
    )


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
    _mark(codes, chosen & ((ids < 0) | ((limit > 0) & (ids >= limit))), 19)
    return ids, {topic_names[i]: int(counts[i]) for i in np.unique(topic_idx[asked]).tolist()}


def _fixed_binary(data: np.ndarray, count: int, width: int) -> pa.Array:
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _user_properties(arr: pa.Array, codes: np.ndarray) -> pa.Array:
    """``name\\x01value`` pairs of each row's map joined by \\x02 (null for an empty or null map)."""
    offsets = arr.offsets.to_numpy().astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    names = _plain(arr.keys.slice(lo, hi - lo))
    values = _plain(arr.items.slice(lo, hi - lo))
    if hi > lo:
        rows = np.repeat(np.arange(len(arr)), np.diff(offsets))
        blank = pc.or_(
            pc.fill_null(pc.equal(pc.binary_length(pc.utf8_trim_whitespace(names)), 0), True),
            pc.fill_null(pc.equal(pc.binary_length(pc.utf8_trim_whitespace(values)), 0), True),
        ).to_numpy(zero_copy_only=False)
        reserved = pc.is_in(names, value_set=_RESERVED).to_numpy(zero_copy_only=False)
        sep = _has_separator(names) | _has_separator(values)
        for mask, code in ((blank, 7), (reserved, 8), (sep, 9)):
            if mask.any():
                hit = np.zeros(len(arr), dtype=bool)
                hit[rows[mask]] = True
                _mark(codes, hit, code)
    pairs = pc.binary_join_element_wise(names, values, _SEP)
    lists = pa.ListArray.from_arrays(pa.array(offsets - lo, pa.int32()), pairs, mask=arr.is_null())
    joined = pc.binary_join(lists, PROPERTY_SEPARATOR)
    empty = pc.fill_null(pc.equal(pc.list_value_length(lists), 0), True)
    return pc.if_else(empty, pa.scalar(None, pa.string()), joined)
