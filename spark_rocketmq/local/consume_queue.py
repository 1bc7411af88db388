"""A consume queue: per queue offset, where a message is in the commit log, its store time and its tags
hash code (the broker's ConsumeQueue unit), and the queue's min offset once older messages are deleted;
and the search of a queue offset by store time as each broker version does it."""

from __future__ import annotations

from array import array

from ..protocol.codes import SysFlag

_TAGS = b"TAGS\x01"


def java_string_hash(text: str) -> int:
    """Java's String.hashCode(): over UTF-16 code units, as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """The tags hash code a broker writes into a message's consume-queue unit: 0 without tags."""
    return java_string_hash(tags) if tags else 0


def unit_fields(record: bytes | memoryview) -> tuple[int, int]:
    """(store timestamp, tags hash code) of one stored record."""
    sys_flag = int.from_bytes(record[36:40], "big", signed=True)
    store_at = 56 + (12 if sys_flag & SysFlag.BORNHOST_V6 else 0)
    store_timestamp = int.from_bytes(record[store_at : store_at + 8], "big", signed=True)
    body_len_at = store_at + 8 + 8 + (12 if sys_flag & SysFlag.STOREHOST_V6 else 0) + 4 + 8
    body_len = int.from_bytes(record[body_len_at : body_len_at + 4], "big", signed=True)
    topic_at = body_len_at + 4 + body_len
    props_at = topic_at + 1 + record[topic_at]
    props_len = int.from_bytes(record[props_at : props_at + 2], "big")
    props = bytes(record[props_at + 2 : props_at + 2 + props_len])
    if props.startswith(_TAGS):
        value_at = len(_TAGS)
    else:
        at = props.find(b"\x02" + _TAGS)
        if at < 0:
            return store_timestamp, 0
        value_at = at + 1 + len(_TAGS)
    end = props.find(b"\x02", value_at)
    tags = props[value_at : end if end >= 0 else len(props)].decode("utf-8", "replace")
    return store_timestamp, tags_code(tags)


class ConsumeQueue:
    """The units of one queue by queue offset; offsets below min_offset are deleted (retention)."""

    __slots__ = ("min_offset", "positions", "sizes", "store_times", "tags_codes")

    def __init__(self) -> None:
        self.positions = array("q")
        self.sizes = array("i")
        self.store_times = array("q")
        self.tags_codes = array("q")
        self.min_offset = 0

    def __len__(self) -> int:
        """The max offset: the queue offset the next message takes."""
        return len(self.positions)

    def add(self, position: int, record: bytes | memoryview) -> None:
        store_time, code = unit_fields(record)
        self.positions.append(position)
        self.sizes.append(len(record))
        self.store_times.append(store_time)
        self.tags_codes.append(code)

    def offset_by_time(self, timestamp: int, version: str, upper: bool = False) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP's answer (`upper`: 5.x's boundaryType=upper; 4.9.8 has none)."""
        if version.startswith("4."):
            return self._closest_by_time(timestamp)
        return self._boundary_by_time(timestamp, upper)

    def _binary_search(self, timestamp: int) -> tuple[int, int, int]:
        """(exact, left, right): the unit the broker's binary search hits with exactly `timestamp`, else -1,
        and the last units it saw before (left) and after (right) it, -1 when none."""
        times = self.store_times
        low, high = self.min_offset, len(times) - 1
        left = right = -1
        while high >= low:
            mid = (low + high) // 2
            if times[mid] == timestamp:
                return mid, left, right
            if times[mid] > timestamp:
                high, right = mid - 1, mid
            else:
                low, left = mid + 1, mid
        return -1, left, right

    def _closest_by_time(self, timestamp: int) -> int:
        """4.9.8: the unit the search hits with that store time, else the closer of its neighbours (the
        earlier on a tie), the first or last unit past either end; 0 for an empty queue."""
        if len(self) == 0:
            return 0
        exact, left, right = self._binary_search(timestamp)
        if exact >= 0:
            return exact
        if left < 0:
            return max(right, 0)  # nothing left of the time: the first unit after it (none: 0)
        if right < 0:
            return left
        times = self.store_times
        return right if abs(timestamp - times[left]) > abs(timestamp - times[right]) else left

    def _boundary_by_time(self, timestamp: int, upper: bool) -> int:
        """5.x: lower, the first unit stored at or after the time (the max offset past the end); upper, the
        last stored at or before it (0 before the start); kept within [min offset, max offset]."""
        if len(self) == 0 or self.min_offset >= len(self):
            return self._clamp(0)
        times = self.store_times
        first, last = self.min_offset, len(times) - 1
        if times[last] < timestamp:
            return self._clamp(last if upper else last + 1)
        if times[first] > timestamp:
            return self._clamp(0)
        exact, left, right = self._binary_search(timestamp)
        if exact < 0:
            return self._clamp(left if upper else right)
        step = 1 if upper else -1
        while first <= exact + step <= last and times[exact + step] == timestamp:
            exact += step
        return self._clamp(exact)

    def _clamp(self, offset: int) -> int:
        return min(max(offset, self.min_offset), len(self))
