"""A tiny frame server for the transport tests (test_remoting.py): it decodes frames, keeps every
request it read (``requests``) and answers through a handler. It binds 127.0.0.1 on a free port;
each test stops what it started. Producer tests run against spark_rocketmq.local instead.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable

from spark_rocketmq.protocol.command import FLAG_ONEWAY, RemotingCommand
from spark_rocketmq.protocol.frame import FrameDecoder

Handler = Callable[[RemotingCommand], RemotingCommand | None]


class FrameServer:
    """Accepts connections; one thread per connection decodes frames and answers through ``handle``."""

    def __init__(self, handle: Handler, port: int = 0, ssl_context: ssl.SSLContext | None = None) -> None:
        self._handle = handle
        self._ssl = ssl_context
        self.port = port
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.requests: list[RemotingCommand] = []

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        sock.listen(64)
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(conn)  # before the thread starts: stop() must find every connection
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        if self._ssl is not None:
            raw = conn
            try:
                conn = self._ssl.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                raw.close()
                return
            with self._lock:
                self._conns.discard(raw)
                self._conns.add(conn)
        try:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    break
                for cmd in decoder.feed(data):
                    if self._listener is None:
                        return  # stopped: answer nothing more
                    with self._lock:
                        self.requests.append(cmd)
                    answer = self._handle(cmd)
                    if answer is not None and not cmd.flag & FLAG_ONEWAY:
                        conn.sendall(answer.encode())
        except Exception:
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def drop_connections(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            self._listener.close()
            self._listener = None
        self.drop_connections()
