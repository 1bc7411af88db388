"""A broker's own connection to one NameServer (REGISTER_BROKER, UNREGISTER_BROKER): one request at a
time, each waiting for its answer."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading

from ..errors import ProtocolError
from ..protocol.command import RemotingCommand
from ..protocol.frame import FrameDecoder


class NamesrvLink:
    """The broker's own connection to one NameServer (request, then wait for its answer)."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._opaque = itertools.count(1)

    def request(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send and wait for the answer. A kept connection the NameServer closed meanwhile (it was
        restarted) is replaced by a new one once, as the Java broker's client opens a new channel."""
        with self._lock:
            reused = self._sock is not None
            try:
                return self._request_locked(cmd, timeout)
            except (OSError, ProtocolError):
                self._close_locked()
                if not reused:
                    raise
            try:
                return self._request_locked(cmd, timeout)
            except (OSError, ProtocolError):
                self._close_locked()
                raise

    def _request_locked(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if self._sock is None:
            host, _, port = self.addr.rpartition(":")
            self._sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock = self._sock
        sock.settimeout(timeout)
        cmd.opaque = next(self._opaque)
        sock.sendall(cmd.encode())
        decoder = FrameDecoder()
        while True:
            data = sock.recv(65536)
            if not data:
                raise OSError("NameServer closed the connection")
            for answer in decoder.feed(data):
                if answer.opaque == cmd.opaque:
                    return answer

    def _close_locked(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()
