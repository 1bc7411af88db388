"""Each row's encoded properties, vectorised: the Arrow columns of a record batch -> ``name\x01value``
pairs joined by ``\x02``, checked as they are built (invalid rows get a reason code, spark/invalid.py).

Properties are built per row with Arrow string kernels (fixed keys in the Java client's HashMap
order, then the row's user properties in map order). Without a column that gives rows properties of
their own (tags, keys, ...), every row's properties are WAIT and its UNIQ_KEY, of one width:
``fixed_tail`` gives length and properties as one numpy array with the ids written in place.
"""

from __future__ import annotations

import functools
from dataclasses import fields

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
from ..protocol.timer import PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS
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
_RESERVED = pa.array(sorted(RESERVED_PROPERTY_NAMES))
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
    col: dict[str, pa.Array], codes: np.ndarray, ctx: BatchContext, partition: int, row_start: int
) -> pa.Array:
    """Each row's encoded properties (fixed ones in HashMap order, then its own), checked into ``codes``."""
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
    if "properties" in col:
        ordered.append(_user_properties(col["properties"], codes))
    return pc.binary_join_element_wise(*ordered, PROPERTY_SEPARATOR, null_handling="skip")


def _user_properties(arr: pa.Array, codes: np.ndarray) -> pa.Array:
    """``name\\x01value`` pairs of each row's map joined by \\x02 (null for an empty or null map)."""
    offsets = arr.offsets.to_numpy().astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    names = plain_column(arr.keys.slice(lo, hi - lo))
    values = plain_column(arr.items.slice(lo, hi - lo))
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
                mark_invalid(codes, hit, code)
    pairs = pc.binary_join_element_wise(names, values, _SEP)
    lists = pa.ListArray.from_arrays(pa.array(offsets - lo, pa.int32()), pairs, mask=arr.is_null())
    joined = pc.binary_join(lists, PROPERTY_SEPARATOR)
    empty = pc.fill_null(pc.equal(pc.list_value_length(lists), 0), True)
    return pc.if_else(empty, pa.scalar(None, pa.string()), joined)
