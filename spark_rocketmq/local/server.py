"""A small threaded remoting server: one reader thread per connection, frames in, answers out.

Hostile input (bad lengths, garbled headers) closes that connection; the server keeps serving.
A server can be frozen (as a SIGSTOP freezes a process): nothing is accepted, read, answered or
written until it thaws, and stop() still ends it at once.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable

from ..errors import ProtocolError
from ..protocol.codes import MQ_VERSION_V4_9_8, RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.frame import FrameDecoder, decode_frame_body

log = logging.getLogger(__name__)

Handler = Callable[["Connection", RemotingCommand], "RemotingCommand | None"]

#: A frame at least this long is received into a buffer of its own (no copy on the way in).
LARGE_FRAME = 64 * 1024
#: Requests whose large body stays a view of its frame's buffer; other bodies are bytes.
_VIEW_BODY_CODES = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})


class FrameReader:
    """Frames off one socket: small ones through a FrameDecoder; a large one is received straight
    into a buffer of its own, a send request's body left a view of it (a real broker's Netty reads
    into pooled buffers without copying; here that saves two copies of every batch body)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._decoder = FrameDecoder()
        self._large: bytearray | None = None
        self._filled = 0

    def read(self) -> list[RemotingCommand] | None:
        """The commands completed by one receive; None once the peer closed. ProtocolError on garbage."""
        if self._large is not None:
            with memoryview(self._large) as view:
                n = self._sock.recv_into(view[self._filled :])
            if not n:
                return None
            self._filled += n
            if self._filled < len(self._large):
                return []
            frame, self._large = self._large, None
            cmd = decode_frame_body(memoryview(frame), copy_body=False)
            if cmd.code not in _VIEW_BODY_CODES:
                cmd.body = bytes(cmd.body)
            return [cmd]
        # At most LARGE_FRAME: past that, a large frame's bytes go straight into its own buffer (what
        # a larger receive took would be copied twice more, into the decoder and out of it).
        data = self._sock.recv(LARGE_FRAME)
        if not data:
            return None
        commands = self._decoder.feed(data)
        length = self._decoder.pending_frame_length()
        if length is not None and length >= LARGE_FRAME:
            self._large = bytearray(length)
            self._filled = self._decoder.take_pending(self._large)
        return commands


class Freeze:
    """The run state every thread of one server generation passes through: running, frozen (each
    thread holds where it is until thaw()) or shut down (each thread leaves)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._frozen = False
        self._shut = False

    @property
    def frozen(self) -> bool:
        return self._frozen

    def freeze(self) -> None:
        with self._cond:
            self._frozen = True

    def thaw(self) -> None:
        with self._cond:
            self._frozen = False
            self._cond.notify_all()

    def shutdown(self) -> None:
        with self._cond:
            self._shut = True
            self._cond.notify_all()

    def passage(self) -> bool:
        """Wait while frozen; True to go on, False once shut down."""
        if not self._frozen:
            return not self._shut
        with self._cond:
            while self._frozen and not self._shut:
                self._cond.wait()
            return not self._shut


def answer_request(handler: Handler, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
    """handler's answer; a malformed request or a handler's bug becomes a SYSTEM_ERROR answer."""
    try:
        return handler(conn, cmd)
    except ProtocolError as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
    except Exception as exc:  # a bug must not kill the server
        log.exception("%s: request %s failed", conn.server.name, cmd.code)
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")


class Connection:
    """One accepted client connection."""

    def __init__(self, server: RemotingServer, sock: socket.socket, peer: tuple[str, int]) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.peer_addr = f"{peer[0]}:{peer[1]}"
        self.freeze = server.freeze
        self._write_lock = threading.Lock()
        self._closed = threading.Event()

    def send(self, cmd: RemotingCommand) -> None:
        """Write one frame (held while the server is frozen; dropped once it is shut down). An answer
        carries the server's version, as every answer of a broker does (MQVersion.CURRENT_VERSION)."""
        if cmd.is_response:
            cmd.version = self.server.version
        data = cmd.encode()
        if not self.freeze.passage():
            return
        with self._write_lock:
            self.sock.sendall(data)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def serve(self) -> None:
        reader = FrameReader(self.sock)
        freeze = self.freeze
        dispatch = self.server.dispatch
        try:
            while not self._closed.is_set() and freeze.passage():
                try:
                    commands = reader.read()
                except OSError:
                    break
                except ProtocolError as exc:
                    log.info("%s: closing %s: %s", self.server.name, self.peer_addr, exc)
                    break
                if commands is None:
                    break
                # Frozen while blocked in recv: what was read waits, unanswered.
                if not freeze.passage():
                    break
                for cmd in commands:
                    if cmd.is_response:
                        continue
                    answer = answer_request(dispatch, self, cmd)
                    if answer is not None and not cmd.is_oneway:
                        try:
                            self.send(answer)
                        except OSError:
                            return
        finally:
            self.close()
            self.server._forget(self)


class RemotingServer:
    """Listens on host:port (0 = a free port) and hands each request to `dispatch`."""

    def __init__(self, name: str, dispatch: Handler, host: str = "127.0.0.1", port: int = 0) -> None:
        self.name = name
        self.dispatch = dispatch
        self.host = host
        self.port = port
        self._listener: socket.socket | None = None
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self.on_close: Callable[[Connection], None] | None = None
        self.freeze = Freeze()
        #: The version code written in every answer's header.
        self.version = MQ_VERSION_V4_9_8

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._listener is not None

    def start(self) -> None:
        if self._listener is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self.freeze = Freeze()
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock, self.freeze), name=f"{self.name}-accept", daemon=True).start()

    def hang(self) -> None:
        """Freeze: connections stay open, nothing more is accepted, read, answered or written
        (the kernel still completes handshakes into the listen backlog and buffers what arrives)."""
        self.freeze.freeze()

    def resume(self) -> None:
        """Thaw: every thread continues where it held."""
        self.freeze.thaw()

    def _accept(self, listener: socket.socket, freeze: Freeze) -> None:
        while freeze.passage():
            try:
                sock, peer = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock, peer)
            with self._lock:
                if self._listener is not listener:
                    conn.close()
                    return
                self._connections.add(conn)
            threading.Thread(target=conn.serve, name=f"{self.name}-{peer[1]}", daemon=True).start()

    def _forget(self, conn: Connection) -> None:
        with self._lock:
            self._connections.discard(conn)
        if self.on_close is not None:
            self.on_close(conn)

    def drop_connections(self) -> None:
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            conn.close()

    def stop(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        self.freeze.shutdown()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self.drop_connections()
