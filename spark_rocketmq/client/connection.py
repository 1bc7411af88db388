"""One connection to a NameServer or broker: frames written without ever blocking a caller, answers
matched by opaque, every request ended by its deadline.

The connection's socket belongs to an I/O loop (io_loop.py: one thread per producer). Callers queue
frames and return; the loop writes every frame queued meanwhile in one non-blocking ``sendmsg``, waits
for room when the socket does not take it all (a frozen broker, a full receive buffer), reads, and
settles the requests: their callbacks run on the loop's thread and must not block
(``in_flight.in_reader_thread``). A short-lived thread opens the connection (TCP, then TLS) and hands the socket
to the loop, so a caller never waits for a connect either.

A request still queued when its deadline passes is never written. A connection on which a request
timed out is closed (as the Java client's clientCloseSocketIfTimeout does): whatever else was in
flight on it fails at once with a RemotingConnectError and can be retried elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from ..errors import CannotConnectError, ProtocolError, RemotingConnectError, RemotingError, RemotingTimeoutError
from ..protocol.codes import ResponseCode
from ..protocol.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, rocketmq_request_head
from ..protocol.frame import FrameDecoder
from .config import split_addr
from .futures import SendFuture
from .in_flight import AnswerCallback, InFlight, future_callback
from .io_loop import IOLoop
from .tls import TlsChannel

log = logging.getLogger(__name__)

#: Frames at most per sendmsg call (Linux IOV_MAX is 1024; a frame takes one or two buffers).
_MAX_IOV = 512
#: Small frames are joined into one buffer before sendmsg (fewer iovecs, one copy of little data).
_JOIN_BELOW = 16 * 1024

#: Handles a request the peer sent (not an answer); returns False for a code it does not serve.
RequestHandler = Callable[["Connection", RemotingCommand], bool]
#: A frame waiting for the writer: (opaque of a request, or None), head (length words + header), body.
_Frame = tuple[int | None, bytes, bytes | memoryview]


class Connection:
    """One socket to ``addr``, opened by a short-lived thread, then driven by an I/O loop (``loop``, or one
    of its own, stopped with it); safe to share between threads."""

    def __init__(
        self,
        addr: str,
        *,
        connect_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        on_request: RequestHandler | None = None,
        loop: IOLoop | None = None,
    ) -> None:
        self.addr = addr
        self._connect_timeout_s = connect_timeout_s
        self._ssl_context = ssl_context
        self._on_request = on_request
        self._own_loop = loop is None
        self._loop = loop if loop is not None else IOLoop(name=f"rocketmq-io-{addr}")
        self._sock: socket.socket | None = None
        self._tls: TlsChannel | None = None
        self._decoder = FrameDecoder()
        self._lock = threading.Lock()
        self._in_flight: dict[int, InFlight] = {}
        #: Frames queued by callers; the loop moves them to _backlog, then to the socket.
        self._out: deque[_Frame] = deque()
        self._backlog: deque[memoryview] = deque()
        #: Whether the loop has been asked to flush and has not started to yet.
        self._flush_asked = False
        #: Set once the connection is up, or closed.
        self._ready = threading.Event()
        self._opaques = itertools.count(1)
        self._closed = False
        self.close_reason: BaseException | None = None
        self.last_active = self._opened_at = time.monotonic()
        #: Whether the peer has sent a frame yet (a peer that closes before that refused the conversation).
        self._heard = False
        threading.Thread(target=self._open, name=f"rocketmq-connect-{addr}", daemon=True).start()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def idle_for(self, now: float) -> float:
        """Seconds since the last request or answer; 0 while anything is in flight or queued."""
        if self._in_flight or self._out or self._backlog:
            return 0.0
        return now - self.last_active

    def wait_connected(self, timeout_s: float) -> None:
        """Wait until the connection is up; RemotingConnectError when it failed, closed or took too long."""
        if not self._ready.wait(timeout_s):
            raise RemotingConnectError(f"cannot connect to {self.addr} within {timeout_s:.1f} s", self.addr)
        if self._closed:
            raise self._closed_error()

    # -- callers -----------------------------------------------------------------------------------
    def request(self, cmd: RemotingCommand, deadline: float) -> Future[RemotingCommand]:
        """Queue a request; the future gets the answer, or a RemotingError by ``deadline`` (monotonic)."""
        fut: Future[RemotingCommand] = SendFuture()
        self.request_with_callback(cmd, deadline, future_callback(fut))
        return fut

    def request_with_callback(self, cmd: RemotingCommand, deadline: float, done: AnswerCallback) -> None:
        """Queue a request; ``done(answer, None)`` or ``done(None, error)`` runs once, by ``deadline``.

        Raises RemotingConnectError (without calling ``done``) when the connection is already closed.
        """
        if self._closed:
            raise self._closed_error()
        cmd.opaque = opaque = next(self._opaques) & 0x7FFFFFFF
        head, body = cmd.encode_parts()
        self._queue_request(opaque, head, body, cmd.code, deadline, done)

    def request_rocketmq(
        self, code: int, ext: bytes, deadline: float, done: AnswerCallback, body: bytes | memoryview = b""
    ) -> None:
        """request_with_callback of a request in the ROCKETMQ serialization, given as its extFields bytes and
        its body: its frame is written without a RemotingCommand (command.rocketmq_request_head)."""
        if self._closed:
            raise self._closed_error()
        opaque = next(self._opaques) & 0x7FFFFFFF
        self._queue_request(opaque, rocketmq_request_head(code, opaque, ext, len(body)), body, code, deadline, done)

    def _queue_request(
        self, opaque: int, head: bytes, body: bytes | memoryview, code: int, deadline: float, done: AnswerCallback
    ) -> None:
        # No lock on this path: dict and deque operations are atomic, and a caller that blocked on a
        # lock held by the reader would wait out the reader's whole GIL slice.
        self._in_flight[opaque] = InFlight(done, deadline, code)
        self.last_active = time.monotonic()
        self._push((opaque, head, body))
        if self._closed and self._in_flight.pop(opaque, None) is not None:  # close() ran meanwhile
            raise self._closed_error()

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.flag |= FLAG_ONEWAY
        cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        self._enqueue(cmd)

    def respond(self, cmd: RemotingCommand) -> None:
        self._enqueue(cmd)

    def _enqueue(self, cmd: RemotingCommand) -> None:
        if self._closed:
            raise self._closed_error()
        head, body = cmd.encode_parts()
        self._push((None, head, body))

    def _closed_error(self) -> RemotingConnectError:
        reason = self.close_reason
        if isinstance(reason, CannotConnectError):  # it never opened: say so, as its own requests were told
            return CannotConnectError(str(reason), self.addr, reason.os_error)
        why = f": {reason}" if reason is not None else ""
        return RemotingConnectError(f"connection to {self.addr} is closed{why}", self.addr)

    # -- opening (its own short-lived thread) -------------------------------------------------------
    def _connect(self) -> socket.socket:
        host, port = split_addr(self.addr)
        try:
            sock = socket.create_connection((host, port), timeout=self._connect_timeout_s)
        except OSError as exc:
            raise CannotConnectError(f"cannot connect to {self.addr}: {exc}", self.addr, str(exc)) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl_context is not None:
                self._tls = TlsChannel(sock, self._ssl_context, host)  # within the connect timeout
            sock.setblocking(False)  # from here on the loop reads and writes without ever blocking
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise CannotConnectError(
                f"cannot set up the connection to {self.addr}: {exc}", self.addr, f"TLS handshake failed: {exc}"
            ) from exc
        return sock

    def _open(self) -> None:
        """Connect, then hand the socket to the loop and have it write what callers queued meanwhile."""
        try:
            sock = self._connect()
        except RemotingConnectError as exc:
            self.close(exc)
            return
        with self._lock:
            if not self._closed:
                self._sock = sock
        if self._sock is not sock or not self._loop.add(self):
            sock.close()
            self.close(RemotingConnectError(f"connection to {self.addr} closed while it opened", self.addr))
            return
        self._ready.set()
        self._ask_flush()

    # -- writing (the loop) ----------------------------------------------------------------------------
    def _push(self, frame: _Frame) -> None:
        """Queue a frame; the loop writes it with whatever else is queued by then, many frames per syscall."""
        self._out.append(frame)
        if not self._flush_asked and self._sock is not None:
            self._ask_flush()

    def _ask_flush(self) -> None:
        self._flush_asked = True
        self._loop.flush(self)

    def loop_socket(self) -> socket.socket | None:
        return self._sock

    def on_flush(self) -> bool:
        """Write what is queued without blocking; False when the socket took not all of it (stalled)."""
        self._flush_asked = False  # a frame queued from now on asks again
        sock = self._sock
        if sock is None or self._closed:
            return True
        try:
            return self._write_some(sock)
        except (OSError, ssl.SSLError) as exc:
            self.close(RemotingConnectError(f"cannot write to {self.addr}: {exc}", self.addr))
            return True

    def _write_some(self, sock: socket.socket) -> bool:
        backlog = self._backlog
        out = self._out
        while not self._closed:
            if not backlog:
                if not out:
                    return True
                frames = []
                while out:
                    frames.append(out.popleft())
                in_flight = self._in_flight
                buffers = _coalesce(f for f in frames if f[0] is None or f[0] in in_flight)
                if self._tls is not None and buffers:
                    buffers = [self._tls.encrypt(buffers)]
                backlog.extend(memoryview(b) for b in buffers)
                continue
            chunk = [backlog[i] for i in range(min(len(backlog), _MAX_IOV))]
            try:
                sent = sock.sendmsg(chunk)
            except (BlockingIOError, InterruptedError):
                return False
            while sent:
                first = backlog[0]
                if len(first) <= sent:
                    sent -= len(first)
                    backlog.popleft()
                else:
                    backlog[0] = first[sent:]
                    sent = 0
        return True

    # -- reading (the loop) ----------------------------------------------------------------------------
    def on_readable(self) -> None:
        sock = self._sock
        if sock is None or self._closed:
            return
        reason: BaseException
        try:
            view = self._loop.recv_buffer
            received = sock.recv_into(view)
            data: bytes | memoryview | None = view[:received]
            if not received:
                reason = self._lost("closed by the peer")
            elif self._tls is not None and (data := self._tls.decrypt(bytes(view[:received]))) is None:
                reason = RemotingConnectError(f"TLS connection to {self.addr} closed", self.addr)
            else:
                if data:
                    self._dispatch(self._decoder.feed(data))
                return
        except (BlockingIOError, InterruptedError):
            return
        except ProtocolError as exc:
            if self._heard:
                reason = RemotingConnectError(f"protocol error from {self.addr}, connection closed: {exc}", self.addr)
            else:  # the first bytes are not RocketMQ remoting: another service, or a proxy, at that address
                reason = CannotConnectError(
                    f"protocol error from {self.addr}, connection closed: {exc}",
                    self.addr,
                    f"not a RocketMQ peer: {exc}",
                )
            log.warning("%s", reason)
        except (OSError, ValueError, ssl.SSLError) as exc:
            reason = self._lost(f"lost: {exc}")
        self.close(reason)

    def on_loop_error(self, exc: BaseException) -> None:
        self.close(RemotingConnectError(f"connection to {self.addr} failed: {exc!r}", self.addr))

    def _lost(self, what: str) -> RemotingConnectError:
        """The error of a connection that ended; a CannotConnectError when the peer never sent a frame."""
        if self._heard:
            return RemotingConnectError(f"connection to {self.addr} {what}", self.addr)
        return CannotConnectError(
            f"connection to {self.addr} {what} before it answered anything", self.addr, f"{what} before any answer"
        )

    def _dispatch(self, commands: list[RemotingCommand]) -> None:
        self._heard = True
        for cmd in commands:
            if not cmd.flag & FLAG_RESPONSE:
                self._handle_request(cmd)
                continue
            entry = self._in_flight.pop(cmd.opaque, None)
            if entry is not None:
                entry.settle(cmd, None, self.addr)
        if commands:
            self.last_active = time.monotonic()

    def _handle_request(self, cmd: RemotingCommand) -> None:
        if self._on_request is not None and self._on_request(self, cmd):
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
        late = [
            e
            for o, e in list(self._in_flight.items())
            if e.deadline <= now and self._in_flight.pop(o, None) is not None
        ]
        if late and self._sock is None and not self._closed:  # still connecting: the connect timed out
            waited = now - self._opened_at
            unreachable = CannotConnectError(
                f"cannot connect to {self.addr}: no connection after {waited:.1f} s", self.addr, "connect timed out"
            )
            for entry in late:
                entry.settle(None, unreachable, self.addr)
            self.close(unreachable)
            return len(late)
        for entry in late:
            error = RemotingTimeoutError(f"no answer from {self.addr} to request code {entry.code} in time", self.addr)
            entry.settle(None, error, self.addr)
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
            sock = self._sock
        self._ready.set()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the peer sees it closed now; the loop closes the socket
            self._loop.drop(self)
        if self._own_loop:
            self._loop.stop(join_s=0.0)
        err = reason or RemotingConnectError(f"connection to {self.addr} closed", self.addr)
        # One entry at a time from the live table: a request adding itself meanwhile either is taken
        # here, or sees _closed and takes its own entry back (request_with_callback); never both, never none.
        in_flight = self._in_flight
        while in_flight:
            try:
                _, entry = in_flight.popitem()
            except KeyError:
                break
            entry.settle(None, err, self.addr)


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
