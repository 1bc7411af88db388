"""Byte spans of a buffer as Arrow arrays, and properties texts split into them, without a Python
object per span: what spark/decoder.py builds its columns with.

A span is (position, length) in a buffer. Spans in order that do not overlap become one Arrow array
in one copy: the buffer is described as a binary array whose values alternate between a span and the
bytes up to the next one, and every other value is taken. Fixed-width fields are gathered with numpy
as rows of a sliding window over the buffer. Properties texts (name\\x01value pairs separated by
\\x02) are split by finding their separator bytes with numpy, so a map column and the values of
TAGS, UNIQ_KEY and KEYS come out of a few array operations, whatever the number of messages.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..protocol.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)

_STRINGS = pa.list_(pa.string())
_PROPERTIES = pa.map_(pa.string(), pa.string())
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def _name_code(name: str) -> int:
    """A property name of at most 8 bytes as the big-endian number of its bytes, zero-padded."""
    return int.from_bytes(name.encode().ljust(8, b"\0"), "big")


def split_properties(props: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """(map, TAGS, UNIQ_KEY, KEYS split on spaces) of each row's properties text, split as
    MessageDecoder.string2messageProperties splits it: pairs separated by \\x02, a name and a value by
    the pair's first \\x01, pairs without a name or a value skipped, a repeated name's last value kept."""
    n = len(props)
    offsets = np.frombuffer(props.buffers()[1], dtype=np.int32)[: n + 1].astype(np.int64)
    buffer = props.buffers()[2] or pa.py_buffer(b"")
    text = np.frombuffer(buffer, dtype=np.uint8)[: offsets[-1]]
    row, start, end = split(text, offsets[:-1], offsets[1:], 2)
    ones = np.flatnonzero(text == 1)
    sep = np.append(ones, len(text) + 1)[np.searchsorted(ones, start)]
    ok = (sep > start) & (sep < end - 1)
    if not ok.all():
        row, start, end, sep = row[ok], start[ok], end[ok], sep[ok]
    name_len = sep - start
    padded = np.concatenate((text, np.zeros(8, np.uint8)))
    first = gather(padded, start, 8)
    first[np.arange(8) >= name_len[:, None]] = 0
    name = first.view(">u8").reshape(-1)
    names = spans(buffer, start, name_len, pa.string())
    values = spans(buffer, sep + 1, end - sep - 1, pa.string())
    value_sep, value_end = sep, end
    if _may_repeat_names(row, name_len, name, np.where(name_len > 8, ints(padded, np.maximum(sep - 8, 0), ">u8"), 0)):
        # a repeated name: its last value is kept, at its first place
        keep, last = _first_and_last(row, names)
        row, name_len, name, names = row[keep], name_len[keep], name[keep], names.take(pa.array(keep))
        values, value_sep, value_end = values.take(pa.array(last)), sep[last], end[last]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(row, minlength=n))))
    properties = pa.MapArray.from_arrays(pa.array(bounds.astype(np.int32)), names, values)

    def value_spans(wanted: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        found = (name_len == len(wanted)) & (name == _name_code(wanted))
        at, length, valid = offsets[:-1].copy(), np.zeros(n, np.int64), np.zeros(n, bool)
        rows = row[found]
        at[rows], length[rows], valid[rows] = value_sep[found] + 1, (value_end - value_sep - 1)[found], True
        return at, length, valid

    tags_at, tags_len, has_tags = value_spans(PROPERTY_TAGS)
    uniq_at, uniq_len, has_uniq = value_spans(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    keys_at, keys_len, has_keys = value_spans(PROPERTY_KEYS)
    key_row, key_start, key_end = split(text, keys_at[has_keys], (keys_at + keys_len)[has_keys], 32)
    per_row = np.zeros(n, np.int64)
    per_row[has_keys] = np.bincount(key_row, minlength=int(has_keys.sum()))
    keys = pa.ListArray.from_arrays(
        pa.array(np.concatenate(([0], np.cumsum(per_row))).astype(np.int32)),
        spans(buffer, key_start, key_end - key_start, pa.string()),
    )
    return (
        properties,
        spans(buffer, tags_at, tags_len, pa.string(), has_tags),
        spans(buffer, uniq_at, uniq_len, pa.string(), has_uniq),
        keys,
    )


def _first_and_last(row: np.ndarray, names: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """For each (row, name) of the pairs, in the order of their first pair: the index of its first pair and
    of its last one. Names are compared exactly (dictionary-encoded), whatever the cheap look found."""
    encoded = pc.dictionary_encode(names)
    ids = np.asarray(encoded.indices, dtype=np.int64)
    key = row.astype(np.int64) * max(1, len(encoded.dictionary)) + ids
    order = np.lexsort((np.arange(len(key)), key))  # by key, then pair index
    sorted_key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_key[1:] != sorted_key[:-1])))
    ends = np.append(starts[1:], len(key)) - 1
    first, last = order[starts], order[ends]
    by_first = np.argsort(first)
    return first[by_first], last[by_first]


def _may_repeat_names(row: np.ndarray, length: np.ndarray, first: np.ndarray, last: np.ndarray) -> bool:
    """Whether a row may name a property twice: two of its pairs whose names have the same length, first
    and last 8 bytes (names that only look the same are told apart by the caller, as strings)."""
    look = first ^ (last * np.uint64(0x9E3779B97F4A7C15)) ^ (length.astype(np.uint64) << np.uint64(48))
    widest = int(np.bincount(row).max()) if len(row) else 0
    if widest > 16:  # many properties in a row: sort instead of comparing each pair with the next ones
        order = np.lexsort((look, row))
        row, look = row[order], look[order]
        widest = 2
    return any(((row[k:] == row[:-k]) & (look[k:] == look[:-k])).any() for k in range(1, widest))


def split(text: np.ndarray, starts: np.ndarray, ends: np.ndarray, separator: int) -> tuple[np.ndarray, ...]:
    """(region, start, end) of each piece of the regions starts[i]:ends[i] of text split on a separator
    byte, as str.split: k separators make k + 1 pieces, empty ones included. Regions are in order."""
    found = np.flatnonzero(text == separator)
    region = np.searchsorted(starts, found, side="right") - 1
    inside = (region >= 0) & (found < np.append(ends, 0)[region])
    found, region = found[inside], region[inside]
    count = np.bincount(region, minlength=len(starts)) + 1
    first = np.cumsum(count) - count
    last = first + count - 1
    start = np.empty(int(count.sum()), dtype=np.int64)
    end = np.empty_like(start)
    is_first = np.zeros(len(start), dtype=bool)
    is_first[first] = True
    start[is_first], start[~is_first] = starts, found + 1
    is_last = np.zeros(len(start), dtype=bool)
    is_last[last] = True
    end[is_last], end[~is_last] = ends, found
    return np.repeat(np.arange(len(starts)), count), start, end


def spans(
    buffer: pa.Buffer, at: np.ndarray, length: np.ndarray, dtype: pa.DataType, valid: np.ndarray | None = None
) -> pa.Array:
    """The bytes at[i]:at[i]+length[i] of each span as an array of ``dtype`` (binary or string), null
    where ``valid`` is False. Spans are in order and do not overlap: the buffer is described as an array
    whose values alternate between a span and the bytes up to the next one, and every other is taken."""
    n = len(at)
    large = buffer.size >= 1 << 31
    offsets = np.empty(2 * n + 1, dtype=np.int64 if large else np.int32)
    offsets[0 : 2 * n : 2] = at
    offsets[1 : 2 * n : 2] = at + length
    offsets[2 * n] = max(buffer.size, int(offsets[2 * n - 1]) if n else 0)
    validity = None
    if valid is not None:
        both = np.ones(2 * n, dtype=bool)
        both[0::2] = valid
        validity = pa.py_buffer(np.packbits(both, bitorder="little"))
    gapped_type = (pa.large_binary() if dtype == pa.binary() else pa.large_string()) if large else dtype
    gapped = pa.Array.from_buffers(gapped_type, 2 * n, [validity, pa.py_buffer(offsets), buffer])
    taken = gapped.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    return taken.cast(dtype) if large else taken


def gather(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position, one row per position: rows of a sliding window over the
    buffer, copied (several times faster than indexing each byte). Positions are at most len - width."""
    window = np.ndarray((len(buf) - width + 1, width), dtype=np.uint8, buffer=buf, strides=(1, 1))
    return window[at]


def ints(buf: np.ndarray, at: np.ndarray, dtype: str) -> np.ndarray:
    """The big-endian integer at each position, in native byte order."""
    big = np.dtype(dtype)
    return gather(buf, at, big.itemsize).view(big).reshape(-1).astype(big.newbyteorder("="))


def ints_array(values: np.ndarray, dtype: type[np.signedinteger]) -> pa.Array:
    native = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(pa.from_numpy_dtype(native.dtype), len(native), [None, pa.py_buffer(native)])


def fixed_width(text: np.ndarray, n: int, width: int) -> pa.Array:
    offsets = np.arange(0, width * n + 1, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def repeat(value: str, n: int) -> pa.Array:
    raw = value.encode("utf-8")
    return fixed_width(np.frombuffer(raw * n, dtype=np.uint8) if raw else np.zeros(0, np.uint8), n, len(raw))


def timestamps(millis: np.ndarray) -> pa.Array:
    micros = millis.astype(np.int64) * 1000
    return pa.Array.from_buffers(_TIMESTAMP, len(micros), [None, pa.py_buffer(micros)])
