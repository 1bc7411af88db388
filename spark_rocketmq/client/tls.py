"""TLS on a connection's non-blocking socket: the handshake on the connecting thread, then records
encrypted and decrypted in memory (the I/O loop does the socket reads and writes)."""

from __future__ import annotations

import socket
import ssl
import threading

from .io_loop import RECV_SIZE


class TlsChannel:
    """TLS through memory BIOs: the writer encrypts and the reader decrypts under one short lock
    (one SSL object must not be used by two threads at once); socket I/O runs outside the lock."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, host: str) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_hostname=host)
        self._lock = threading.Lock()
        while True:  # the socket is blocking with the connect timeout here
            try:
                self._obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                pending = self._out.read()
                if pending:
                    sock.sendall(pending)
                data = sock.recv(RECV_SIZE)
                if not data:
                    raise ssl.SSLEOFError("connection closed during the TLS handshake") from None
                self._in.write(data)
        pending = self._out.read()
        if pending:
            sock.sendall(pending)

    def encrypt(self, buffers: list[bytes | memoryview]) -> bytes:
        with self._lock:
            for buf in buffers:
                self._obj.write(buf)
            return self._out.read()

    def decrypt(self, raw: bytes) -> bytes | None:
        """Plain bytes from raw ones (may be b"" until a record is complete); None when TLS closed."""
        chunks: list[bytes] = []
        with self._lock:
            self._in.write(raw)
            try:
                while True:
                    chunks.append(self._obj.read(RECV_SIZE))
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return None
        return b"".join(chunks)
