"""The one I/O thread of a producer: it owns the sockets of all its connections, writes what callers
queued (every frame queued meanwhile in one non-blocking ``sendmsg`` per connection), reads, and
settles the answers, whose callbacks run on it.

Callers only enqueue: a frame goes on its connection's queue, the connection on the loop's flush
list, and the loop is woken (one byte on a socket pair) only when it sleeps in ``select``. Under load
the loop never sleeps: each pass reads every answer that arrived, settles them (callbacks may queue
new frames), then flushes every connection with something queued, so requests and answers move in
batches and no thread hands work to another per message.

Connecting (TCP, then TLS) happens on a short-lived thread per connection, which hands the socket to
the loop; a caller never waits for a connect, and the loop never blocks on one.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import selectors
import socket
import threading
from collections import deque
from typing import Protocol

log = logging.getLogger(__name__)

#: Bytes one read takes at most.
RECV_SIZE = 256 * 1024


#: ``settling.on`` is True on a thread where request callbacks run (an I/O loop's, and threads marked
#: so by in_flight.mark_settling_thread): such a thread must never block.
settling = threading.local()


class IOThread(threading.Thread):
    """The thread of an IOLoop: callbacks of requests run on it and must never block."""

    def run(self) -> None:
        settling.on = True
        super().run()


class Channel(Protocol):
    """What the loop drives: a connection with a socket (set before ``add``)."""

    addr: str

    def loop_socket(self) -> socket.socket | None: ...

    def on_readable(self) -> None: ...

    def on_flush(self) -> bool:
        """Write what is queued; False when the socket took not all of it (wait until it is writable)."""
        ...

    def on_loop_error(self, exc: BaseException) -> None: ...


class IOLoop:
    """One selector thread for many connections. ``add``, ``flush``, ``drop`` and ``stop`` are safe from
    any thread and never block."""

    def __init__(self, name: str = "rocketmq-io") -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._adds: deque[Channel] = deque()
        self._flushes: deque[Channel] = deque()
        self._drops: deque[Channel] = deque()
        #: Channels whose socket is full: also watched for EVENT_WRITE until it drained.
        self._stalled: set[Channel] = set()
        #: Where every read of the loop's connections lands (read on the loop's thread alone, one at a
        #: time), instead of a new bytes object of this size per read.
        self.recv_buffer = memoryview(bytearray(RECV_SIZE))
        self._sleeping = False
        self._woken = False
        self._stopped = False
        self._thread = IOThread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    # -- any thread --------------------------------------------------------------------------------------
    def add(self, channel: Channel) -> bool:
        """Watch the channel's (connected) socket; False when the loop has stopped (the caller closes it)."""
        if self._stopped:
            return False
        self._adds.append(channel)
        self._wake()
        return True

    def flush(self, channel: Channel) -> None:
        """Have the loop write what the channel queued."""
        self._flushes.append(channel)
        self._wake()

    def drop(self, channel: Channel) -> None:
        """Stop watching the channel and close its socket (on the loop thread)."""
        self._drops.append(channel)
        self._wake()

    def stop(self, join_s: float = 1.0) -> None:
        """Stop the loop and close the sockets it watches; waits at most ``join_s`` for the thread."""
        self._stopped = True
        self._sleeping = True  # make sure the wake-up byte is written
        self._wake()
        if not self.on_loop_thread():
            self._thread.join(timeout=join_s)

    def _wake(self) -> None:
        if self._sleeping and not self._woken:
            self._woken = True
            with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed (stopped)
                self._wake_w.send(b"\0")

    # -- the loop thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        selector = self._selector
        try:
            while not self._stopped:
                self._sleeping = True  # before looking at the queues: a caller queueing after the look wakes us
                busy = self._adds or self._flushes or self._drops
                events = selector.select(0 if busy else None)
                self._sleeping = False
                for key, mask in events:
                    channel = key.data
                    if channel is None:
                        self._drain_wake()
                        continue
                    if mask & selectors.EVENT_READ:
                        self._guard(channel, channel.on_readable)
                    if mask & selectors.EVENT_WRITE and channel in self._stalled:
                        self._flush_one(channel)
                self._apply()
        except Exception as exc:
            log.exception("the I/O loop failed")
            self._fail_watched(exc)
        finally:
            self._stopped = True
            self._close_all()

    def _apply(self) -> None:
        """Register new sockets, write what was queued (callbacks above may have queued more), drop closed."""
        while self._adds:
            channel = self._adds.popleft()
            sock = channel.loop_socket()
            # Closed already: a close() between the connect and add() queued its drop, which an earlier pass
            # ran (closing the socket) before this add.
            if sock is None or sock.fileno() < 0:
                continue
            # a channel whose first write stalled before this also waits to write
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if channel in self._stalled else 0)
            self._guard(channel, functools.partial(self._selector.register, sock, events, channel))
        flushes = self._flushes
        while flushes:
            channel = flushes.popleft()
            if channel not in self._stalled:  # a stalled one is written when its socket has room
                self._flush_one(channel)
        while self._drops:
            self._unwatch(self._drops.popleft())

    def _flush_one(self, channel: Channel) -> None:
        sock = channel.loop_socket()
        if sock is None:
            return
        drained = self._guard(channel, channel.on_flush)
        stalled = channel in self._stalled
        if drained is False and not stalled:
            self._stalled.add(channel)
            self._modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, channel)
        elif drained is not False and stalled:
            self._stalled.discard(channel)
            self._modify(sock, selectors.EVENT_READ, channel)

    def _modify(self, sock: socket.socket, events: int, channel: Channel) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):  # dropped meanwhile
            self._selector.modify(sock, events, channel)

    def _guard(self, channel: Channel, step: object) -> object:
        try:
            return step()  # type: ignore[operator]
        except Exception as exc:  # a bug must not stop the loop, nor leave the channel's callers waiting
            log.exception("I/O on %s failed", channel.addr)
            channel.on_loop_error(exc)
            return None

    def _unwatch(self, channel: Channel) -> None:
        self._stalled.discard(channel)
        sock = channel.loop_socket()
        if sock is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        with contextlib.suppress(OSError):
            sock.close()

    def _drain_wake(self) -> None:
        self._woken = False
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass

    def _fail_watched(self, exc: BaseException) -> None:
        """The loop itself failed (a bug): its channels' callers learn it now, not at their deadlines."""
        for key in list(self._selector.get_map().values()):
            if key.data is not None:
                with contextlib.suppress(Exception):
                    key.data.on_loop_error(exc)

    def _close_all(self) -> None:
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        with contextlib.suppress(OSError):
            self._wake_w.close()
