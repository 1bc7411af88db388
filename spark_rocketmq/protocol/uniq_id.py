"""Client message ids (MessageClientIDSetter): the UNIQ_KEY a consumer sees as the message id.

16 bytes, written as 32 upper-case hex characters::

    [4 client IPv4][2 pid][4 class-loader hash][4 ms since the month began][2 counter]

RocketMQ's tools read the time field back (getNearlyTimeFromID), so it must not lie later than
the real send time. Functions here are pure: the caller supplies the clock.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import struct

from ..errors import InvalidMessageError

UNIQ_ID_HEX_LENGTH = 32
#: 32 upper-case hex characters, nothing else (fullmatch; [0-9] only: \d would take other digits).
_UNIQ_ID = re.compile(f"[0-9A-F]{{{UNIQ_ID_HEX_LENGTH}}}")


def uniq_id_prefix(ip: bytes, pid: int, instance_hash: int) -> str:
    """The fixed first 20 hex characters of every id a client makes (FIX_STRING)."""
    if len(ip) != 4:
        raise ValueError("uniq id prefix needs a 4-byte IPv4 address")
    return (ip + struct.pack(">HI", pid & 0xFFFF, instance_hash & 0xFFFFFFFF)).hex().upper()


def month_start_ms(now_ms: int, tz: dt.tzinfo | None = None) -> int:
    """Epoch ms of the first instant of the month now_ms falls in, in time zone tz (local if None)."""
    moment = dt.datetime.fromtimestamp(now_ms / 1000.0, tz=tz)
    start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return round(start.timestamp() * 1000)


def make_uniq_id(prefix: str, ms_since_month_start: int, counter: int) -> str:
    """createUniqID: prefix + 4-byte time offset + 2-byte counter (both wrap as Java's casts do)."""
    return f"{prefix}{ms_since_month_start & 0xFFFFFFFF:08X}{counter & 0xFFFF:04X}"


def make_uniq_ids(prefix: str, ms_since_month_start: int, first_counter: int, count: int) -> list[str]:
    """make_uniq_id for ``count`` consecutive counters from ``first_counter`` (wrapping after 0xFFFF).
    The counters' hex is cut from one table of them all, not formatted one by one."""
    if count <= 1:
        return [make_uniq_id(prefix, ms_since_month_start, first_counter)] if count == 1 else []
    head = prefix + f"{ms_since_month_start & 0xFFFFFFFF:08X}"
    table = _counter_table()
    first = first_counter & 0xFFFF
    runs: list[str] = []
    while count > 0:  # to the end of the table, then on from counter 0
        take = min(count, 0x10000 - first)
        runs.append(table[first * 5 : (first + take) * 5 - 1])
        count -= take
        first = 0
    return (head + ",".join(runs).replace(",", "," + head)).split(",")


@functools.cache
def _counter_table() -> str:
    """Every 2-byte counter as 4 upper-case hex characters, comma-separated, in order (327,679 characters)."""
    return ",".join(f"{i:04X}" for i in range(0x10000))


def check_uniq_id(value: str) -> str:
    if not isinstance(value, str) or _UNIQ_ID.fullmatch(value) is None:
        raise InvalidMessageError(
            f"message id {str(value)[:40]!r} is not 32 upper-case hex characters (the UNIQ_KEY layout)"
        )
    return value


def uniq_id_time_offset(value: str) -> int:
    """The ms-since-month-start field of an id (hex characters 20..27)."""
    return int(check_uniq_id(value)[20:28], 16)
