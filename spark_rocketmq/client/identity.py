"""Client identity: this host's IPv4, the client id, and UNIQ_KEY message ids (MessageClientIDSetter)."""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable

from ..protocol.uniq_id import make_uniq_id, make_uniq_ids, month_start_ms, uniq_id_prefix


def _is_usable_ipv4(addr: str) -> bool:
    try:
        raw = socket.inet_aton(addr)
    except OSError:
        return False
    return raw[0] not in (0, 127) and not raw.startswith(b"\xa9\xfe")  # not 0/8, loopback, link-local


def local_ipv4() -> str | None:
    """A non-loopback IPv4 address of this host, or None."""
    # The address the kernel would use for an outbound route (no packet is sent for UDP connect).
    for probe in ("192.0.2.1", "10.255.255.255"):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                addr: str = s.getsockname()[0]
            if _is_usable_ipv4(addr):
                return addr
        except OSError:
            pass
    try:
        for addr in socket.gethostbyname_ex(socket.gethostname())[2]:
            if _is_usable_ipv4(addr):
                return addr
    except OSError:
        pass
    return None


def fake_ipv4() -> bytes:
    """MessageClientIDSetter.createFakeIP: the low 4 bytes of the current time in ms."""
    return struct.pack(">q", time.time_ns() // 1_000_000)[4:]


_IP_LOCK = threading.Lock()
_IP_CACHE: list[str | None] = []


def client_ip() -> str | None:
    with _IP_LOCK:
        if not _IP_CACHE:
            _IP_CACHE.append(local_ipv4())
        return _IP_CACHE[0]


def make_client_id(instance_name: str, unit_name: str | None = None) -> str:
    """MQClientInstance's clientId: "<ip>@<instanceName>[@<unitName>]"."""
    cid = f"{client_ip() or '127.0.0.1'}@{instance_name}"
    if unit_name:
        cid += f"@{unit_name}"
    return cid


def default_instance_name() -> str:
    """What 4.9.8 uses for the default instance name: "<pid>#<nanoTime>"."""
    return f"{os.getpid()}#{time.monotonic_ns()}"


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


class UniqIdGenerator:
    """UNIQ_KEY ids: IPv4, pid, a per-instance hash, ms since the month began (local time), counter.

    ``clock`` returns epoch milliseconds (the system clock unless a test gives another).
    """

    def __init__(
        self,
        ip: str | None = None,
        pid: int | None = None,
        instance_hash: int | None = None,
        clock: Callable[[], int] = _epoch_ms,
    ) -> None:
        ip = ip if ip is not None else client_ip()
        ip_bytes = socket.inet_aton(ip) if ip else fake_ipv4()
        self.prefix = uniq_id_prefix(
            ip_bytes,
            os.getpid() if pid is None else pid,
            random.getrandbits(32) if instance_hash is None else instance_hash,
        )
        self._clock = clock
        #: The next id's counter (the last 2 bytes, wrapping as Java's short does); under _counter_lock.
        self._counter = 0
        #: The time offset of the last ids handed out, and how many had it; under _counter_lock.
        self._offset = -1
        self._issued = 0
        #: (first ms of the current month, first ms of the next one), replaced as one object so that a
        #: reader without the lock never pairs a new bound with an old start (a time field later than
        #: the send, which protocol/uniq_id.py forbids).
        self._month: tuple[int, int] = (0, 0)
        self._lock = threading.Lock()
        self._counter_lock = threading.Lock()

    def _time_offset(self) -> int:
        now = self._clock()
        start, bound = self._month
        if not start <= now < bound:
            start = month_start_ms(now)
            with self._lock:
                if start > self._month[0]:
                    # The first instant of the next month: 32 days on always lands in it.
                    self._month = (start, month_start_ms(start + 32 * 86_400_000))
        return now - start

    def _take(self, count: int) -> tuple[int, int, int]:
        """(time offset, first counter, how many) for up to ``count`` ids: never more than 65,536 ids
        with one time offset, so no (time, counter) pair is handed out twice; (.., .., 0) when this
        millisecond has had its 65,536."""
        offset = self._time_offset()
        with self._counter_lock:
            if offset != self._offset:
                self._offset, self._issued = offset, 0
            take = min(count, 0x10000 - self._issued)
            first = self._counter
            self._counter = (first + take) & 0xFFFF
            self._issued += take
        return offset, first, take

    def next_id(self) -> str:
        offset, counter, took = self._take(1)
        return make_uniq_id(self.prefix, offset, counter) if took else self.next_ids(1)[0]

    def next_ids(self, count: int) -> list[str]:
        """``count`` ids, in order."""
        ids: list[str] = []
        while len(ids) < count:
            offset, first, take = self._take(count - len(ids))
            if not take:
                time.sleep(0)  # 65,536 ids this millisecond, as many as the id can tell apart: next one
                continue
            ids += make_uniq_ids(self.prefix, offset, first, take)
        return ids
