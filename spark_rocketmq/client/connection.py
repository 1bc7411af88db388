"""One connection to a NameServer or broker: callers enqueue frames, a writer coalesces them, a reader
matches answers by opaque, and every request ends by its deadline.

Threads: a caller of ``request`` only encodes its frame and appends it to the write queue; it never
touches the socket, so a peer that stops reading (a frozen broker, a full receive buffer) cannot block
it. The writer thread opens the connection (TCP, then TLS), then drains the queue: every frame queued
meanwhile goes out in one ``sendmsg`` (up to the kernel's iovec limit), written without blocking so it
notices a close at once. The reader thread decodes frames and completes the waiting futures; callbacks
on those futures run on it and must not block (``in_reader_thread``).

A request still queued when its deadline passes is never written. A connection on which a request
timed out is closed (as the Java client's clientCloseSocketIfTimeout does): whatever else was in
flight on it fails at once with a RemotingConnectError and can be retried elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import select
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from ..errors import ProtocolError, RemotingConnectError, RemotingError, RemotingTimeoutError
from ..protocol.codes import ResponseCode
from ..protocol.frame import FLAG_ONEWAY, FLAG_RESPONSE, FrameDecoder, RemotingCommand
from .config import split_addr

log = logging.getLogger(__name__)

_HEAD = struct.Struct(">II")
_RECV_SIZE = 256 * 1024
#: Frames at most per sendmsg call (Linux IOV_MAX is 1024; a frame takes one or two buffers).
_MAX_IOV = 512
#: Small frames are joined into one buffer before sendmsg (fewer iovecs, one copy of little data).
_JOIN_BELOW = 16 * 1024
#: How often a writer waiting for the socket to drain checks whether the connection was closed.
_WRITE_POLL_MS = 100

RequestHandler = Callable[["Connection", RemotingCommand], None]
#: A frame waiting for the writer: (opaque of a request, or None), head (length words + header), body.
_Frame = tuple[int | None, bytes, bytes | memoryview]


class ReaderThread(threading.Thread):
    """The thread that reads one connection and completes its futures."""


def in_reader_thread() -> bool:
    """True on a connection's reader thread (where future callbacks run): it must never block."""
    return isinstance(threading.current_thread(), ReaderThread)


class _InFlight:
    __slots__ = ("code", "deadline", "future")

    def __init__(self, future: Future[RemotingCommand], deadline: float, code: int) -> None:
        self.future = future
        self.deadline = deadline
        self.code = code


class _TlsChannel:
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
                data = sock.recv(_RECV_SIZE)
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
                    chunks.append(self._obj.read(_RECV_SIZE))
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return None
        return b"".join(chunks)


class Connection:
    """One socket to ``addr``, opened by its writer thread; safe to share between threads."""

    def __init__(
        self,
        addr: str,
        *,
        connect_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        on_request: RequestHandler | None = None,
    ) -> None:
        self.addr = addr
        self._connect_timeout_s = connect_timeout_s
        self._ssl_context = ssl_context
        self._on_request = on_request
        self._sock: socket.socket | None = None
        self._tls: _TlsChannel | None = None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._in_flight: dict[int, _InFlight] = {}
        self._queue: deque[_Frame] = deque()
        self._opaques = itertools.count(1)
        self._closed = False
        self.close_reason: BaseException | None = None
        self.last_active = time.monotonic()
        self._writer = threading.Thread(target=self._write_loop, name=f"rocketmq-writer-{addr}", daemon=True)
        self._writer.start()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def idle_for(self, now: float) -> float:
        """Seconds since the last request or answer; 0 while anything is in flight or queued."""
        if self._in_flight or self._queue:
            return 0.0
        return now - self.last_active

    # -- callers -----------------------------------------------------------------------------------
    def _frame(self, cmd: RemotingCommand) -> tuple[bytes, bytes | memoryview]:
        header = cmd.encode_header()
        body = cmd.body or b""
        head = _HEAD.pack(4 + len(header) + len(body), (int(cmd.serialize_type) << 24) | len(header)) + header
        return head, body

    def request(self, cmd: RemotingCommand, deadline: float) -> Future[RemotingCommand]:
        """Queue a request; the future gets the answer, or a RemotingError by ``deadline`` (monotonic)."""
        fut: Future[RemotingCommand] = Future()
        with self._lock:
            if self._closed:
                raise self._closed_error()
            cmd.opaque = opaque = next(self._opaques) & 0x7FFFFFFF
        head, body = self._frame(cmd)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._in_flight[opaque] = _InFlight(fut, deadline, cmd.code)
            self._queue.append((opaque, head, body))
            self.last_active = time.monotonic()
            self._wake.notify()
        return fut

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.flag |= FLAG_ONEWAY
        self._enqueue(cmd, assign_opaque=True)

    def respond(self, cmd: RemotingCommand) -> None:
        self._enqueue(cmd, assign_opaque=False)

    def _enqueue(self, cmd: RemotingCommand, *, assign_opaque: bool) -> None:
        if assign_opaque:
            cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        head, body = self._frame(cmd)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._queue.append((None, head, body))
            self._wake.notify()

    def _closed_error(self) -> RemotingConnectError:
        why = f": {self.close_reason}" if self.close_reason is not None else ""
        return RemotingConnectError(f"connection to {self.addr} is closed{why}", self.addr)

    # -- writer ------------------------------------------------------------------------------------
    def _connect(self) -> socket.socket:
        host, port = split_addr(self.addr)
        try:
            sock = socket.create_connection((host, port), timeout=self._connect_timeout_s)
        except OSError as exc:
            raise RemotingConnectError(f"cannot connect to {self.addr}: {exc}", self.addr) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl_context is not None:
                self._tls = _TlsChannel(sock, self._ssl_context, host)  # within the connect timeout
            sock.settimeout(None)  # reads block; writes pass MSG_DONTWAIT
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise RemotingConnectError(f"cannot set up the connection to {self.addr}: {exc}", self.addr) from exc
        return sock

    def _write_loop(self) -> None:
        try:
            sock = self._connect()
        except RemotingConnectError as exc:
            self.close(exc)
            return
        with self._lock:
            if self._closed:
                sock.close()
                return
            self._sock = sock
        ReaderThread(target=self._read_loop, args=(sock,), name=f"rocketmq-reader-{self.addr}", daemon=True).start()
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        try:
            while True:
                with self._lock:
                    while not self._queue and not self._closed:
                        self._wake.wait()
                    if self._closed:
                        return
                    frames, self._queue = self._queue, deque()
                    in_flight = self._in_flight
                    buffers = _coalesce(f for f in frames if f[0] is None or f[0] in in_flight)
                if buffers:
                    self._send_all(sock, poller, buffers)
        except (OSError, ssl.SSLError) as exc:
            self.close(RemotingConnectError(f"cannot write to {self.addr}: {exc}", self.addr))
        except Exception as exc:  # a bug must not leave callers waiting for ever
            log.exception("writer of %s failed", self.addr)
            self.close(RemotingConnectError(f"writer of {self.addr} failed: {exc!r}", self.addr))

    def _send_all(self, sock: socket.socket, poller: select.poll, buffers: list[bytes | memoryview]) -> None:
        if self._tls is not None:
            buffers = [self._tls.encrypt(buffers)]
        pending = deque(memoryview(b) for b in buffers)
        while pending:
            if self._closed:
                return
            chunk = [pending[i] for i in range(min(len(pending), _MAX_IOV))]
            try:
                sent = sock.sendmsg(chunk, [], socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                poller.poll(_WRITE_POLL_MS)  # the peer is not reading: wait, but look at close() often
                continue
            while sent:
                first = pending[0]
                if len(first) <= sent:
                    sent -= len(first)
                    pending.popleft()
                else:
                    pending[0] = first[sent:]
                    sent = 0

    # -- reader ------------------------------------------------------------------------------------
    def _read_loop(self, sock: socket.socket) -> None:
        decoder = FrameDecoder()
        reason: BaseException
        try:
            while True:
                data = sock.recv(_RECV_SIZE)
                if not data:
                    reason = RemotingConnectError(f"connection to {self.addr} closed by the peer", self.addr)
                    break
                if self._tls is not None:
                    plain = self._tls.decrypt(data)
                    if plain is None:
                        reason = RemotingConnectError(f"TLS connection to {self.addr} closed", self.addr)
                        break
                    data = plain
                if data:
                    self._dispatch(decoder.feed(data))
        except ProtocolError as exc:
            reason = RemotingConnectError(f"protocol error from {self.addr}, connection closed: {exc}", self.addr)
            log.warning("%s", reason)
        except (OSError, ValueError, ssl.SSLError) as exc:
            reason = RemotingConnectError(f"connection to {self.addr} lost: {exc}", self.addr)
        except Exception as exc:
            log.exception("reader of %s failed", self.addr)
            reason = RemotingConnectError(f"connection to {self.addr} failed: {exc!r}", self.addr)
        self.close(reason)

    def _dispatch(self, commands: list[RemotingCommand]) -> None:
        for cmd in commands:
            if not cmd.flag & FLAG_RESPONSE:
                self._handle_request(cmd)
                continue
            with self._lock:
                entry = self._in_flight.pop(cmd.opaque, None)
                self.last_active = time.monotonic()
            if entry is not None and not entry.future.done():
                try:
                    entry.future.set_result(cmd)
                except Exception:
                    log.exception("callback of a request to %s failed", self.addr)

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

    # -- deadlines and closing -----------------------------------------------------------------------
    def expire(self, now: float) -> int:
        """Fail the requests whose deadline passed and close the connection if there were any."""
        with self._lock:
            late = [(o, e) for o, e in self._in_flight.items() if e.deadline <= now]
            for opaque, _ in late:
                del self._in_flight[opaque]
        for _, entry in late:
            if not entry.future.done():
                entry.future.set_exception(
                    RemotingTimeoutError(f"no answer from {self.addr} to request code {entry.code} in time", self.addr)
                )
        if late:
            self.close(
                RemotingConnectError(
                    f"connection to {self.addr} closed after {len(late)} request(s) got no answer in time", self.addr
                )
            )
        return len(late)

    def close(self, reason: BaseException | None = None) -> None:
        """Fail everything in flight, shut the socket; never blocks on the peer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.close_reason = reason
            in_flight, self._in_flight = self._in_flight, {}
            self._queue.clear()
            sock = self._sock
            self._wake.notify_all()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the reader
            with contextlib.suppress(OSError):
                sock.close()
        err = reason or RemotingConnectError(f"connection to {self.addr} closed", self.addr)
        for entry in in_flight.values():
            if not entry.future.done():
                entry.future.set_exception(err)


def _coalesce(frames: Iterable[_Frame]) -> list[bytes | memoryview]:
    """The buffers to write for queued frames: runs of small pieces joined, large bodies kept as they are."""
    out: list[bytes | memoryview] = []
    small: list[bytes | memoryview] = []
    for _, head, body in frames:
        small.append(head)
        if body:
            if len(body) < _JOIN_BELOW:
                small.append(body)
            else:
                out.append(b"".join(small))
                small = []
                out.append(body)
    if small:
        out.append(b"".join(small))
    return out
