"""Iteration order of java.util.HashMap<String, ?>, so encoded maps match the Java client's bytes.

Message properties and request extFields are HashMaps in the Java client: their serialized order
is bucket order (spread hash & (capacity - 1)), insertion order within a bucket. Parsers must not
depend on it; an encoder that wants byte-identical frames has to reproduce it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

_DEFAULT_CAPACITY = 16
_LOAD_FACTOR = 0.75


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """String.hashCode(), as a signed 32-bit int (over UTF-16 code units); the names of properties
    and fields that come back again and again are remembered."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _spread(h: int) -> int:
    h &= 0xFFFFFFFF
    return h ^ (h >> 16)


def hashmap_capacity(size: int, initial: int = _DEFAULT_CAPACITY) -> int:
    """Table size of a HashMap that grew from `initial` by puts to `size` entries."""
    cap = initial
    while size > cap * _LOAD_FACTOR:
        cap *= 2
    return cap


def hashmap_order(keys: Iterable[str], initial_capacity: int = _DEFAULT_CAPACITY) -> list[str]:
    """The order a HashMap iterates `keys` put in this order (later duplicates keep the first slot)."""
    unique = list(dict.fromkeys(keys))
    hashes = [_spread(java_string_hash(k)) for k in unique]
    if len(unique) > _TREEIFY_THRESHOLD:
        cap = _capacity_with_crowded_bins(hashes, initial_capacity)
    else:
        cap = hashmap_capacity(len(unique), initial_capacity)
    mask = cap - 1
    indexed = [(hashes[i] & mask, i, k) for i, k in enumerate(unique)]
    indexed.sort()
    return [k for _, _, k in indexed]


#: HashMap.TREEIFY_THRESHOLD and MIN_TREEIFY_CAPACITY: putting a 9th key into one bin of a table
#: smaller than 64 doubles the table instead of making the bin a tree.
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


@functools.lru_cache(maxsize=1024)
def hashmap_order_of(keys: tuple[str, ...]) -> tuple[str, ...]:
    """hashmap_order of a sequence of names, computed once per sequence (messages repeat a few shapes)."""
    return tuple(hashmap_order(keys))


def hashmap_ordered(fields: Mapping[str, str]) -> dict[str, str]:
    """``fields`` in the order a java.util.HashMap they were put into iterates them (byte-identical
    headers and properties), the order computed once per sequence of names."""
    return {k: fields[k] for k in hashmap_order_of(tuple(fields))}


def _capacity_with_crowded_bins(hashes: list[int], initial: int) -> int:
    """Table size after putting these spread hashes one by one, counting treeifyBin's resizes.

    (Bins that do become trees, at 64 buckets and more, iterate in tree order: not modelled.)
    """
    cap = initial
    for size, h in enumerate(hashes, start=1):
        mask = cap - 1
        in_bin = sum(1 for other in hashes[: size - 1] if other & mask == h & mask)
        if in_bin >= _TREEIFY_THRESHOLD and cap < _MIN_TREEIFY_CAPACITY:
            cap *= 2
        if size > cap * _LOAD_FACTOR:
            cap *= 2
    return cap
