"""Transport: one TCP (or TLS) connection per address, shared by every thread, requests matched by opaque.

Each connection has one reader thread that decodes frames and completes the waiting futures; a
scanner thread per client fails requests whose timeout passed. A connection that breaks (or
receives bytes that are not a RocketMQ frame) fails all its requests in flight at once and is
opened again by the next request to that address.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from ..errors import ProtocolError, RemotingConnectError, RemotingError, RemotingTimeoutError
from ..protocol.acl import sign_fields
from ..protocol.codes import ResponseCode
from ..protocol.frame import FLAG_ONEWAY, FLAG_RESPONSE, FrameDecoder, RemotingCommand
from .config import split_addr

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">II")
_OPAQUES = itertools.count(1)
_SCAN_INTERVAL_S = 0.02
_IDLE_SCAN_INTERVAL_S = 0.1
_RECV_SIZE = 256 * 1024


_reader_thread = threading.local()


def in_reader_thread() -> bool:
    """True on a connection's reader thread (where future callbacks run): it must never block."""
    return getattr(_reader_thread, "active", False)


def next_opaque() -> int:
    return next(_OPAQUES) & 0x7FFFFFFF


class _Pending:
    __slots__ = ("code", "deadline", "future")

    def __init__(self, future: Future, deadline: float, code: int) -> None:
        self.future = future
        self.deadline = deadline
        self.code = code


class _TlsChannel:
    """TLS over a plain socket through memory BIOs.

    One SSL object must not be used by two threads at once; here the reader thread decrypts and the
    writers encrypt under one short lock, while the socket reads and writes themselves run unlocked.
    """

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, host: str) -> None:
        self._sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_hostname=host)
        self._lock = threading.Lock()
        while True:
            try:
                self._obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = sock.recv(_RECV_SIZE)
                if not data:
                    raise ssl.SSLEOFError("connection closed during the TLS handshake") from None
                self._in.write(data)
        self._flush()

    def _flush(self) -> None:
        data = self._out.read()
        if data:
            self._sock.sendall(data)

    def send(self, head: bytes, body: bytes | memoryview) -> None:
        """Callers hold the connection's write lock, which keeps encrypted records in order."""
        with self._lock:
            self._obj.write(head)
            if body:
                self._obj.write(body)
            data = self._out.read()
        self._sock.sendall(data)

    def recv(self, size: int) -> bytes:
        """Plain bytes; b"" at the end of the stream."""
        while True:
            raw = self._sock.recv(size)
            if not raw:
                return b""
            chunks = []
            with self._lock:
                self._in.write(raw)
                try:
                    while True:
                        chunks.append(self._obj.read(size))
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    return b"".join(chunks)
            if chunks:
                return b"".join(chunks)


class Connection:
    """One socket to a NameServer or broker, with its reader thread."""

    def __init__(
        self,
        addr: str,
        *,
        connect_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        on_request: Callable[[Connection, RemotingCommand], None] | None = None,
    ) -> None:
        self.addr = addr
        host, port = split_addr(addr)
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        except OSError as exc:
            raise RemotingConnectError(f"cannot connect to {addr}: {exc}", addr) from exc
        self._tls: _TlsChannel | None = None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                self._tls = _TlsChannel(sock, ssl_context, host)  # handshake within the connect timeout
            sock.settimeout(None)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise RemotingConnectError(f"cannot set up the connection to {addr}: {exc}", addr) from exc
        self._sock = sock
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._closed = False
        self.close_reason: BaseException | None = None
        self._on_request = on_request
        self._reader = threading.Thread(target=self._read_loop, name=f"rocketmq-reader-{addr}", daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # -- writing -------------------------------------------------------------------------------
    def _write(self, cmd: RemotingCommand) -> None:
        header = cmd.encode_header()
        body = cmd.body or b""
        head = _HEAD.pack(4 + len(header) + len(body), (int(cmd.serialize_type) << 24) | len(header)) + header
        with self._write_lock:
            if self._closed:
                raise RemotingConnectError(f"connection to {self.addr} is closed", self.addr)
            try:
                if self._tls is not None:
                    self._tls.send(head, body)
                elif not body:
                    self._sock.sendall(head)
                    if body:
                        self._sock.sendall(body)
                else:
                    sent = self._sock.sendmsg([head, body])
                    total = len(head) + len(body)
                    if sent < total:  # partial write: finish without copying the body
                        if sent < len(head):
                            self._sock.sendall(memoryview(head)[sent:])
                            sent = len(head)
                        self._sock.sendall(memoryview(body)[sent - len(head) :])
            except (OSError, ssl.SSLError) as exc:
                err = RemotingConnectError(f"cannot write to {self.addr}: {exc}", self.addr)
                self.close(err)  # close() does not take the write lock
                raise err from exc

    def request(self, cmd: RemotingCommand, timeout_s: float) -> Future:
        """Send a request; the future gets the response command, or a RemotingError."""
        fut: Future = Future()
        cmd.opaque = next_opaque()
        pending = _Pending(fut, time.monotonic() + timeout_s, cmd.code)
        with self._lock:
            if self._closed:
                raise RemotingConnectError(f"connection to {self.addr} is closed", self.addr)
            self._pending[cmd.opaque] = pending
        try:
            self._write(cmd)
        except RemotingError:
            with self._lock:
                self._pending.pop(cmd.opaque, None)
            raise
        return fut

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag |= FLAG_ONEWAY
        self._write(cmd)

    def respond(self, cmd: RemotingCommand) -> None:
        self._write(cmd)

    # -- reading -------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        _reader_thread.active = True
        decoder = FrameDecoder()
        recv = self._tls.recv if self._tls is not None else self._sock.recv
        reason: BaseException
        try:
            while True:
                data = recv(_RECV_SIZE)
                if not data:
                    reason = RemotingConnectError(f"connection to {self.addr} closed by the peer", self.addr)
                    break
                for cmd in decoder.feed(data):
                    if cmd.flag & FLAG_RESPONSE:
                        with self._lock:
                            pending = self._pending.pop(cmd.opaque, None)
                        if pending is not None and not pending.future.done():
                            try:
                                pending.future.set_result(cmd)
                            except Exception:
                                log.exception("callback of a request to %s failed", self.addr)
                    else:
                        self._handle_request(cmd)
        except ProtocolError as exc:
            reason = RemotingConnectError(f"protocol error from {self.addr}, connection closed: {exc}", self.addr)
            log.warning("%s", reason)
        except (OSError, ValueError, ssl.SSLError) as exc:
            reason = RemotingConnectError(f"connection to {self.addr} lost: {exc}", self.addr)
        except Exception as exc:
            log.exception("reader of %s failed", self.addr)
            reason = RemotingConnectError(f"connection to {self.addr} failed: {exc!r}", self.addr)
        self.close(reason)

    def _handle_request(self, cmd: RemotingCommand) -> None:
        if self._on_request is not None:
            self._on_request(self, cmd)
            return
        if not cmd.flag & FLAG_ONEWAY:
            answer = cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {cmd.code} not supported by this producer",
                language="PYTHON",
            )
            with contextlib.suppress(RemotingError):
                self.respond(answer)

    # -- lifecycle -----------------------------------------------------------------------------
    def expire(self, now: float) -> None:
        """Fail the requests whose deadline passed."""
        with self._lock:
            late = [(o, p) for o, p in self._pending.items() if p.deadline <= now]
            for opaque, _ in late:
                del self._pending[opaque]
        for _, p in late:
            if not p.future.done():
                p.future.set_exception(
                    RemotingTimeoutError(f"no answer from {self.addr} to request code {p.code} in time", self.addr)
                )

    def forget(self, future: Future) -> None:
        with self._lock:
            for opaque, p in list(self._pending.items()):
                if p.future is future:
                    del self._pending[opaque]

    def close(self, reason: BaseException | None = None) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.close_reason = reason
            pending, self._pending = self._pending, {}
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        err = reason or RemotingConnectError(f"connection to {self.addr} closed", self.addr)
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(err)


class RemotingClient:
    """Connections by address, request/response with timeouts, oneway, optional TLS and ACL signing."""

    def __init__(
        self,
        *,
        connect_timeout_ms: int = 3000,
        use_tls: bool = False,
        tls_verify: bool = False,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self._connect_timeout_s = connect_timeout_ms / 1000.0
        self._ssl: ssl.SSLContext | None = None
        if use_tls:
            ctx = ssl.create_default_context()
            if not tls_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        self._access_key = access_key
        self._secret_key = secret_key
        self._conns: dict[str, Connection] = {}
        self._addr_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._scanner = threading.Thread(target=self._scan_loop, name="rocketmq-timeouts", daemon=True)
        self._scanner.start()

    def _scan_loop(self) -> None:
        interval = _SCAN_INTERVAL_S
        while not self._stop.wait(interval):
            now = time.monotonic()
            busy = False
            for conn in list(self._conns.values()):
                conn.expire(now)
                busy = busy or conn.in_flight > 0
            # Idle producers (a Spark executor between batches) wake up rarely.
            interval = _SCAN_INTERVAL_S if busy else _IDLE_SCAN_INTERVAL_S

    def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        with self._lock:
            if self._closed:
                raise RemotingConnectError("the client is closed", addr)
            lock = self._addr_locks.setdefault(addr, threading.Lock())
        with lock:
            conn = self._conns.get(addr)
            if conn is None or conn.closed:
                conn = Connection(addr, connect_timeout_s=self._connect_timeout_s, ssl_context=self._ssl)
                with self._lock:
                    if self._closed:
                        conn.close()
                        raise RemotingConnectError("the client is closed", addr)
                    self._conns[addr] = conn
            return conn

    def _sign(self, cmd: RemotingCommand) -> None:
        if self._access_key is not None and self._secret_key is not None:
            cmd.ext_fields = sign_fields(cmd.ext_fields, cmd.body, self._access_key, self._secret_key)

    def invoke_async(self, addr: str, cmd: RemotingCommand, timeout_ms: float) -> Future:
        """Future of the response command; connection failures and timeouts arrive as RemotingError."""
        self._sign(cmd)
        try:
            return self.connection(addr).request(cmd, max(timeout_ms, 1) / 1000.0)
        except RemotingError as exc:
            fut: Future = Future()
            fut.set_exception(exc)
            return fut

    def invoke_sync(self, addr: str, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        fut = self.invoke_async(addr, cmd, timeout_ms)
        try:
            # The scanner fails it at its deadline; the margin only guards against a stuck scanner.
            return fut.result(timeout=timeout_ms / 1000.0 + 1.0)
        except FutureTimeout:
            conn = self._conns.get(addr)
            if conn is not None:
                conn.forget(fut)
            raise RemotingTimeoutError(f"no answer from {addr} to request code {cmd.code} in time", addr) from None

    def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        self._sign(cmd)
        self.connection(addr).oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    def addresses(self) -> list[str]:
        return [a for a, c in self._conns.items() if not c.closed]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
        self._stop.set()
        for conn in conns:
            conn.close()
        if self._scanner is not threading.current_thread():
            self._scanner.join(timeout=2)
