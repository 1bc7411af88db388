"""Client identity: this host's IPv4, the client id, and UNIQ_KEY message ids (MessageClientIDSetter)."""

from __future__ import annotations

import itertools
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable

from ..protocol.uniq_id import make_uniq_id, month_start_ms, uniq_id_prefix


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
        self._counter = itertools.count()
        #: (first ms of the current month, first ms of the next one), replaced as one object so that a
        #: reader without the lock never pairs a new bound with an old start (a time field later than
        #: the send, which protocol/uniq_id.py forbids).
        self._month: tuple[int, int] = (0, 0)
        self._lock = threading.Lock()

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

    def next_id(self) -> str:
        return make_uniq_id(self.prefix, self._time_offset(), next(self._counter))

    def next_ids(self, count: int) -> list[str]:
        """``count`` ids at once (one clock read)."""
        head = self.prefix + f"{self._time_offset() & 0xFFFFFFFF:08X}"
        counter = self._counter
        return [f"{head}{next(counter) & 0xFFFF:04X}" for _ in range(count)]
