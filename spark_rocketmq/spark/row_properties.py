"""Each row's encoded properties, vectorised: the Arrow columns of a record batch -> ``name\x01value``
pairs joined by ``\x02``, checked as they are built (invalid rows get a reason code, spark/invalid.py).

Properties are built per row with Arrow string kernels (fixed keys in the Java client's HashMap
order, then the row's user properties in map order). Without a column that gives rows properties of
their own (tags, keys, ...), every row's properties are WAIT and its UNIQ_KEY, of one width:
``fixed_tail`` gives length and properties as one numpy array with the ids written in place.

A ``properties`` map may hold names RocketMQ reserves (a row read with ``format("rocketmq")`` holds
every property the broker stored): ``user_properties`` leaves them out, on the map's flattened entries
and rebuilt offsets, and says which, per row; the rule is in spark/schema.py's docstring.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..protocol.javamap import hashmap_order
from ..protocol.message import (
    MAX_DELAY_LEVEL,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    RESERVED_PROPERTY_NAMES,
    encode_properties,
)
from ..protocol.timer import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
)
from .message_ids import UNIQ_PART_PREFIX, BatchContext, uniq_property_array, write_uniq_keys
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
#: Names a row's map does not give as user properties: RocketMQ's reserved ones, and __SHARDINGKEY (not
#: reserved by the Java client, but the sink's sharding key: a queue per key, ``user_properties``).
_RESERVED = pa.array(sorted(RESERVED_PROPERTY_NAMES | {PROPERTY_SHARDING_KEY}))
#: Reserved names that ask for a delivery time: left out of a row whose map shows it was delivered by
#: the broker's schedule or timer wheel already (``_SERVED``), otherwise the row is invalid (code 8).
_ASKS_DELAY = pa.array(
    [PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC]
)
#: What a broker puts in a message it holds for later and leaves there once it delivers it: REAL_TOPIC
#: (ScheduleMessageService, TimerMessageStore) and TIMER_OUT_MS (TimerMessageStore; a broker never
#: holds a message that has it, HookUtils.checkIfTimerMessage).
_SERVED = pa.array([PROPERTY_REAL_TOPIC, PROPERTY_TIMER_OUT_MS])
_DELAY_PARTS = pa.array(
    [None] + [f"{PROPERTY_DELAY_TIME_LEVEL}{_SEP}{i}" for i in range(1, MAX_DELAY_LEVEL + 1)], pa.string()
)


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


def plain_column(arr: pa.Array) -> pa.Array:
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


def mark_invalid(codes: np.ndarray, mask: np.ndarray, code: int) -> None:
    """Give the rows of ``mask`` not yet invalid the reason ``code`` (spark/invalid.py REASONS)."""
    codes[(codes == 0) & mask] = code


def _part(name: str, values: pa.Array) -> pa.Array:
    """``NAME\\x01value``, null where the value is null or empty (no property)."""
    joined = pc.binary_join_element_wise(f"{name}{_SEP}", values, "")
    empty = pc.fill_null(pc.equal(pc.binary_length(values), 0), True)
    return pc.if_else(empty, pa.scalar(None, pa.string()), joined)


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


def fixed_tail(ctx: BatchContext, partition: int, row_start: int, count: int) -> np.ndarray:
    """What follows each body when no column gives rows properties of their own: (count, width) bytes."""
    template, at = _fixed_tail_template()
    tail = np.empty((count, len(template)), dtype=np.uint8)
    tail[:] = np.frombuffer(template, dtype=np.uint8)
    write_uniq_keys(tail[:, at : at + 32], ctx, partition, row_start)
    return tail


def encoded_properties(
    col: dict[str, pa.Array],
    codes: np.ndarray,
    ctx: BatchContext,
    partition: int,
    row_start: int,
    user: pa.Array | None = None,
) -> pa.Array:
    """Each row's encoded properties (fixed ones in HashMap order, then ``user``: its own, as
    ``UserProperties.pairs``), checked into ``codes``."""
    n = len(codes)
    parts: dict[str, pa.Array | str] = {PROPERTY_WAIT_STORE_MSG_OK: f"{PROPERTY_WAIT_STORE_MSG_OK}{_SEP}true"}
    if "tags" in col:
        mark_invalid(codes, _has_separator(col["tags"]), 5)
        parts[PROPERTY_TAGS] = _part(PROPERTY_TAGS, col["tags"])
    if "keys" in col:
        keys = col["keys"]
        if pa.types.is_list(keys.type):
            keys = pc.binary_join(keys, " ")
        mark_invalid(codes, _has_separator(keys), 6)
        parts[PROPERTY_KEYS] = _part(PROPERTY_KEYS, keys)
    if "delay_level" in col:
        level = pc.fill_null(col["delay_level"], 0).to_numpy(zero_copy_only=False).astype(np.int64)
        mark_invalid(codes, (level < 0) | (level > MAX_DELAY_LEVEL), 10)
        parts[PROPERTY_DELAY_TIME_LEVEL] = _DELAY_PARTS.take(pa.array(np.clip(level, 0, MAX_DELAY_LEVEL)))
    if "sharding_key" in col:
        mark_invalid(codes, _has_separator(col["sharding_key"]), 11)
        parts[PROPERTY_SHARDING_KEY] = _part(PROPERTY_SHARDING_KEY, col["sharding_key"])
    timed = np.zeros(n, dtype=np.int64)  # how many of delay_level, deliver_time, delay_ms a row sets
    if "delay_level" in col:
        timed += pc.fill_null(col["delay_level"], 0).to_numpy(zero_copy_only=False) != 0
    for name, prop, bad in (("deliver_time", PROPERTY_TIMER_DELIVER_MS, 17), ("delay_ms", PROPERTY_TIMER_DELAY_MS, 16)):
        if name in col:
            ms, present = timer_millis(col[name])
            mark_invalid(codes, present & (ms < 0), bad)
            on = present & (ms != 0) if name == "delay_ms" else present
            timed += on
            values = pa.array(ms.astype(str), pa.string(), mask=~on)
            parts[prop] = _part(prop, values)
    mark_invalid(codes, timed > 1, 15)
    parts[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_property_array(ctx, partition, row_start, n)
    ordered: list[pa.Array | str] = [parts[k] for k in FIXED_ORDER if k in parts]
    if user is not None:
        ordered.append(user)
    return pc.binary_join_element_wise(*ordered, PROPERTY_SEPARATOR, null_handling="skip")


@dataclass
class UserProperties:
    """A properties column with the reserved names not sent left out."""

    #: ``name\x01value`` pairs of each row's kept entries joined by \x02 (null: none).
    pairs: pa.Array
    #: The map with the kept entries only (the column itself when nothing was left out).
    kept: pa.Array
    #: Each row's __SHARDINGKEY entry (null: none), when the map gives the row its sharding key.
    sharding_key: pa.Array | None
    #: The row of each entry left out, and its name.
    left_rows: np.ndarray
    left_names: pa.Array


def user_properties(arr: pa.Array, codes: np.ndarray, *, adopt_sharding_key: bool) -> UserProperties:
    """The user properties of a map column, checked into ``codes``. Reserved names are left out (noted
    in ``left_rows``/``left_names``), but a delay or delivery time not yet served makes its row invalid
    (8); with ``adopt_sharding_key`` (no sharding_key column) a __SHARDINGKEY entry is the row's key."""
    n = len(arr)
    offsets = arr.offsets.to_numpy().astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    names = plain_column(arr.keys.slice(lo, hi - lo))
    values = plain_column(arr.items.slice(lo, hi - lo))
    offsets -= lo
    kept, sharding_key = arr, None
    left_rows, left_names = _NO_ROWS, _NO_NAMES
    if hi > lo:
        rows = np.repeat(np.arange(n), np.diff(offsets))
        blank = pc.or_(
            pc.fill_null(pc.equal(pc.binary_length(pc.utf8_trim_whitespace(names)), 0), True),
            pc.fill_null(pc.equal(pc.binary_length(pc.utf8_trim_whitespace(values)), 0), True),
        ).to_numpy(zero_copy_only=False)
        sep = _has_separator(names) | _has_separator(values)
        reserved = pc.is_in(names, value_set=_RESERVED).to_numpy(zero_copy_only=False)
        if reserved.any():
            keep = ~reserved
            blank &= keep
            sep &= keep
            served = _rows_with(rows[pc.is_in(names, value_set=_SERVED).to_numpy(zero_copy_only=False)], n)
            asks = pc.is_in(names, value_set=_ASKS_DELAY).to_numpy(zero_copy_only=False)
            mark_invalid(codes, _rows_with(rows[asks & ~served[rows]], n), 8)
            if adopt_sharding_key:
                shard = pc.equal(names, PROPERTY_SHARDING_KEY).to_numpy(zero_copy_only=False)
                if shard.any():
                    at = np.full(n, -1, dtype=np.int64)
                    at[rows[shard]] = np.flatnonzero(shard)
                    sharding_key = values.take(pa.array(at, mask=at < 0))
                    reserved &= ~shard
            left_rows, left_names = rows[reserved], names.filter(pa.array(reserved))
            names, values = names.filter(pa.array(keep)), values.filter(pa.array(keep))
            offsets = np.concatenate(([0], np.cumsum(np.bincount(rows[keep], minlength=n))))
            kept = pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), names, values, mask=arr.is_null())
        for mask, code in ((blank, 7), (sep, 9)):
            if mask.any():
                mark_invalid(codes, _rows_with(rows[mask], n), code)
    pairs = pc.binary_join_element_wise(names, values, _SEP)
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pairs, mask=arr.is_null())
    joined = pc.binary_join(lists, PROPERTY_SEPARATOR)
    empty = pc.fill_null(pc.equal(pc.list_value_length(lists), 0), True)
    user = pc.if_else(empty, pa.scalar(None, pa.string()), joined)
    return UserProperties(user, kept, sharding_key, left_rows, left_names)


_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_NAMES = pa.array([], pa.string())


def _rows_with(rows: np.ndarray, n: int) -> np.ndarray:
    hit = np.zeros(n, dtype=bool)
    hit[rows] = True
    return hit
