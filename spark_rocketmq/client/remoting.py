"""Connections by address (NettyRemotingClient): opened on demand, shared by every thread, closed when
idle, when no route names them any more, or when a request on them timed out. All of them are driven
by one I/O loop (io_loop.py), the client's one thread for reading and writing.

An address has one connection per *lane*: the default lane carries everything but what a caller puts
on a lane of its own (END_TRANSACTION: a heartbeat that times out on a frozen broker closes its
connection, and must not close the one holding COMMITs the broker will still run once it wakes).

A scanner thread fails requests at their deadline (which closes their connection) and closes
connections idle for longer than ``max_idle_ms`` (clientChannelMaxIdleTimeSeconds: 120 s).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Collection, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol

from ..errors import RemotingConnectError, RemotingError, RemotingTimeoutError
from ..protocol.acl import sign_fields
from ..protocol.codes import SerializeType
from ..protocol.command import RemotingCommand
from .connection import Connection, RequestHandler
from .in_flight import AnswerCallback, mark_settling_thread
from .io_loop import IOLoop

_SCAN_INTERVAL_S = 0.02
_IDLE_SCAN_INTERVAL_S = 0.1
#: How long close() waits for the scanner thread.
_JOIN_TIMEOUT_S = 1.0


class ConnectionOptions(Protocol):
    """The connection options a client's config has (ProducerConfig and ConsumerConfig do)."""

    @property
    def connect_timeout_ms(self) -> int: ...
    @property
    def use_tls(self) -> bool: ...
    @property
    def tls_verify(self) -> bool: ...
    @property
    def access_key(self) -> str | None: ...
    @property
    def secret_key(self) -> str | None: ...
    @property
    def client_channel_max_idle_ms(self) -> int: ...


class RemotingClient:
    """Request/response with deadlines, oneway, optional TLS and ACL 1.0 signing."""

    def __init__(
        self,
        *,
        connect_timeout_ms: int = 3000,
        use_tls: bool = False,
        tls_verify: bool = False,
        access_key: str | None = None,
        secret_key: str | None = None,
        max_idle_ms: int = 120_000,
        on_request: RequestHandler | None = None,
    ) -> None:
        self._connect_timeout_s = connect_timeout_ms / 1000.0
        self._max_idle_s = max_idle_ms / 1000.0
        self._ssl: ssl.SSLContext | None = None
        if use_tls:
            ctx = ssl.create_default_context()
            if not tls_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        self._on_request = on_request
        self._access_key = access_key
        self._secret_key = secret_key
        self._conns: dict[str, Connection] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._loop = IOLoop()
        self._scanner = threading.Thread(target=self._scan_loop, name="rocketmq-timeouts", daemon=True)
        self._scanner.start()

    @classmethod
    def for_config(cls, config: ConnectionOptions, on_request: RequestHandler | None = None) -> RemotingClient:
        """A client with a config's connection options (TLS, ACL signing, timeouts, idle close)."""
        return cls(
            connect_timeout_ms=config.connect_timeout_ms,
            use_tls=config.use_tls,
            tls_verify=config.tls_verify,
            access_key=config.access_key,
            secret_key=config.secret_key,
            max_idle_ms=config.client_channel_max_idle_ms,
            on_request=on_request,
        )

    def _scan_loop(self) -> None:
        mark_settling_thread()  # requests failed at their deadline run their callbacks here
        interval = _SCAN_INTERVAL_S
        while not self._stop.wait(interval):
            now = time.monotonic()
            busy = False
            for key, conn in list(self._conns.items()):
                conn.expire(now)
                if conn.closed:
                    self._forget(key, conn)
                elif conn.idle_for(now) > self._max_idle_s:
                    self._forget(key, conn)
                    conn.close(RemotingConnectError(f"connection to {conn.addr} closed: idle", conn.addr))
                else:
                    busy = busy or conn.in_flight > 0
            # Idle producers (a Spark executor between batches) wake up rarely.
            interval = _SCAN_INTERVAL_S if busy else _IDLE_SCAN_INTERVAL_S

    def _forget(self, key: str, conn: Connection) -> None:
        with self._lock:
            if self._conns.get(key) is conn:
                del self._conns[key]

    @property
    def broken(self) -> bool:
        """Its I/O loop failed (a bug, logged) though the client was not closed: it can send no more, and
        whoever owns it makes a new one (the sink's producer pool does)."""
        return self._loop.stopped and not self._closed

    def connection(self, addr: str, lane: str = "") -> Connection:
        """The open connection to addr on ``lane``, or a new one (connecting in its own thread: this never
        blocks)."""
        key = f"{addr}#{lane}" if lane else addr
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return conn
        with self._lock:
            if self._closed:
                raise RemotingConnectError("the client is closed", addr)
            if self._loop.stopped:
                raise RemotingConnectError(f"cannot connect to {addr}: the client's I/O loop failed (logged)", addr)
            conn = self._conns.get(key)
            if conn is None or conn.closed:
                conn = Connection(
                    addr,
                    connect_timeout_s=self._connect_timeout_s,
                    ssl_context=self._ssl,
                    on_request=self._on_request,
                    loop=self._loop,
                )
                self._conns[key] = conn
            return conn

    def _sign(self, cmd: RemotingCommand) -> None:
        if self._access_key is not None and self._secret_key is not None:
            cmd.ext_fields = sign_fields(cmd.fields(), cmd.body, self._access_key, self._secret_key)

    def invoke_async(self, addr: str, cmd: RemotingCommand, timeout_ms: float) -> Future[RemotingCommand]:
        """Future of the answer; connection failures and timeouts arrive in it as RemotingError."""
        self._sign(cmd)
        deadline = time.monotonic() + max(timeout_ms, 1) / 1000.0
        try:
            return self.connection(addr).request(cmd, deadline)
        except RemotingError as exc:
            fut: Future[RemotingCommand] = Future()
            fut.set_exception(exc)
            return fut

    def invoke_with_callback(
        self, addr: str, cmd: RemotingCommand, timeout_ms: float, done: AnswerCallback, lane: str = ""
    ) -> None:
        """``done(answer, None)`` or ``done(None, RemotingError)`` runs once (on a reader thread, or here when
        the request cannot be queued); a lighter form of invoke_async for the send path."""
        self._sign(cmd)
        deadline = time.monotonic() + max(timeout_ms, 1) / 1000.0
        try:
            self.connection(addr, lane).request_with_callback(cmd, deadline, done)
        except RemotingError as exc:
            done(None, exc)

    def invoke_rocketmq(
        self, addr: str, code: int, ext: bytes, body: bytes | memoryview, timeout_ms: float, done: AnswerCallback
    ) -> None:
        """invoke_with_callback of a request in the ROCKETMQ serialization given as its extFields bytes (an
        ExtFieldsTemplate's render) and its body: written without a RemotingCommand, unless requests are
        signed (which needs the fields)."""
        if self._access_key is not None and self._secret_key is not None:
            cmd = RemotingCommand(code=code, body=body, serialize_type=SerializeType.ROCKETMQ, ext_bytes=ext)
            self.invoke_with_callback(addr, cmd, timeout_ms, done)
            return
        deadline = time.monotonic() + max(timeout_ms, 1) / 1000.0
        try:
            self.connection(addr).request_rocketmq(code, ext, deadline, done, body)
        except RemotingError as exc:
            done(None, exc)

    def invoke_each_rocketmq(
        self,
        addr: str,
        code: int,
        requests: Iterable[tuple[bytes, AnswerCallback]],
        timeout_ms: float,
        lane: str = "",
    ) -> None:
        """invoke_with_callback of body-less requests of one code in the ROCKETMQ serialization, each given as
        its extFields bytes (an ExtFieldsTemplate's render) and its callback: one connection look-up and
        deadline for all, and no RemotingCommand each (unless requests are signed, which needs the fields)."""
        if self._access_key is not None and self._secret_key is not None:
            for ext, done in requests:
                cmd = RemotingCommand(code=code, serialize_type=SerializeType.ROCKETMQ, ext_bytes=ext)
                self.invoke_with_callback(addr, cmd, timeout_ms, done, lane)
            return
        deadline = time.monotonic() + max(timeout_ms, 1) / 1000.0
        conn: Connection | None = None
        for ext, done in requests:
            try:
                if conn is None or conn.closed:
                    conn = self.connection(addr, lane)
                conn.request_rocketmq(code, ext, deadline, done)
            except RemotingError as exc:
                done(None, exc)

    def invoke_sync(self, addr: str, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        fut = self.invoke_async(addr, cmd, timeout_ms)
        try:
            # The scanner fails it at its deadline; the margin only guards against a stuck scanner.
            return fut.result(timeout=timeout_ms / 1000.0 + 1.0)
        except FutureTimeout:
            raise RemotingTimeoutError(f"no answer from {addr} to request code {cmd.code} in time", addr) from None

    def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Write without an answer, once the connection is up (a broker that cannot be reached raises
        RemotingConnectError here, as the Java client's invokeOneway does, instead of losing the frame)."""
        self._sign(cmd)
        conn = self.connection(addr)
        conn.wait_connected(self._connect_timeout_s)
        conn.oneway(cmd)

    def oneway_on(self, conn: Connection, cmd: RemotingCommand) -> None:
        """Write ``cmd`` without an answer on this very connection (an answer to a broker's request)."""
        self._sign(cmd)
        conn.oneway(cmd)

    def close_connection(self, addr: str) -> None:
        with self._lock:
            conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    def retain(self, addrs: Collection[str]) -> list[str]:
        """Close the connections to other addresses that have nothing in flight; returns those closed."""
        closed = []
        for key, conn in list(self._conns.items()):
            if conn.addr not in addrs and conn.idle_for(time.monotonic()) > 0:
                self._forget(key, conn)
                conn.close(RemotingConnectError(f"connection to {conn.addr} closed: no route names it", conn.addr))
                closed.append(conn.addr)
        return closed

    def addresses(self) -> list[str]:
        """The addresses with an open connection (on any lane)."""
        return sorted({c.addr for c in list(self._conns.values()) if not c.closed})

    def close(self, join_s: float = _JOIN_TIMEOUT_S) -> None:
        """Close every connection (failing what is in flight); returns without waiting for any peer, and
        waits at most ``join_s`` for the scanner thread."""
        with self._lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
        self._stop.set()
        for conn in conns:
            conn.close()
        deadline = time.monotonic() + join_s
        self._loop.stop(join_s)
        if self._scanner is not threading.current_thread():
            self._scanner.join(timeout=max(0.0, deadline - time.monotonic()))
