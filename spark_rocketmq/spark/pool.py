"""Clients of one executor Python process, per configuration: acquire, release, idle expiry. The sink's
producers are pooled here (``ProducerPool``), and so are the reader's pull consumers (spark/consumers.py).

Spark reuses its Python workers across tasks and micro-batches, so a producer (its connections,
route table and heartbeats) outlives the task that created it. ``ProducerPool`` keeps one producer
per configuration fingerprint:

- ``acquire(config)`` hands out the pooled producer (creating it on first use) and counts the use;
  ``release(lease)`` ends the use; a producer nobody uses is *idle*.
- An idle producer is closed once it has been idle for its idle timeout (the sink's
  ``producer_idle_timeout_ms``): by the pass every acquire and release makes, and by a light
  daemon thread (the reaper) for a worker that runs no more tasks.
- A closed producer (``producer.closed``: closed or broken) is never handed out again: the next
  acquire creates a new one.

Spark ends forked Python workers with ``os._exit`` (and idle ones, when the application stops, with
its daemon's SIGHUP); exit handlers never run there, so nothing relies on them: each task waits for
its own requests before it reports, and for their message trace (task_producer.py), and idle
producers close on expiry. A process forked from one that holds producers starts with an empty pool
(the parent's threads and sockets are not usable in the child).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ..client.config import ProducerConfig
from .contract import SinkProducer

log = logging.getLogger("spark_rocketmq.spark")

#: Default idle timeout (the sink option producer_idle_timeout_ms): 10 minutes.
DEFAULT_IDLE_TIMEOUT_S = 600.0
#: How often the reaper thread of the process's pool looks for expired producers.
REAPER_INTERVAL_S = 15.0


class PooledConfig(Protocol):
    """A client configuration: equal fingerprints share one pooled client."""

    def fingerprint(self) -> str: ...


class PooledClient(Protocol):
    """A pooled client: a closed (or broken) one is never handed out again."""

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=PooledConfig)
T = TypeVar("T", bound=PooledClient)


def new_producer(config: ProducerConfig) -> SinkProducer:
    """The pool's default factory: a client Producer (mypy checks here that it honours SinkProducer).

    It does not join its group: brokers ask check-backs of an exactly_once sink's halves of its driver
    alone (spark/commit.py). A broker that a kill -9 restarts has lost up to 5 s of its check progress
    and checks some halves back twice in one round, a copy each time; asked in two processes, both
    copies could be answered COMMIT before either was published."""
    from ..client.producer import Producer

    return Producer(config, join_group=False)


@dataclass(eq=False)
class _Entry(Generic[T]):
    client: T
    fingerprint: str
    idle_timeout_s: float
    uses: int = 0
    idle_since: float = 0.0


@dataclass(eq=False)
class Lease(Generic[T]):
    """One use of a pooled client; give it back with ``ClientPool.release`` (once is enough)."""

    client: T
    fingerprint: str
    #: Producers the pool has created for this fingerprint so far (1 unless one expired or broke).
    created: int
    _entry: _Entry[T] = field(repr=False)
    released: bool = False


class ClientPool(Generic[C, T]):
    """Clients keyed by configuration fingerprint, with use counts and idle expiry (thread-safe).

    ``factory`` makes a producer from a configuration; ``clock`` is a monotonic clock in seconds
    (injectable for tests); ``reaper_interval_s`` starts a daemon thread on the first acquire that
    closes expired producers every so many seconds (None: only acquire/release and
    ``expire_idle()`` close them).
    """

    def __init__(
        self,
        factory: Callable[[C], T],
        *,
        clock: Callable[[], float] = time.monotonic,
        reaper_interval_s: float | None = None,
    ) -> None:
        self._factory = factory
        self._clock = clock
        self._reaper_interval_s = reaper_interval_s
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry[T]] = {}
        self._created: dict[str, int] = {}
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()

    # -- use ---------------------------------------------------------------------------------------
    def acquire(self, config: C, *, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S) -> Lease[T]:
        """The pooled producer for ``config`` (a new one if there is none, or it is closed).

        Raises what the factory raises (for example ConfigError); nothing is pooled then.
        """
        key = config.fingerprint()
        with self._lock:
            expired = self._take_expired()
            entry = self._entries.get(key)
            if entry is not None and entry.client.closed:
                # Closed or broken: never handed out again. Its current users keep their lease.
                del self._entries[key]
                entry = None
            if entry is None:
                entry = _Entry(self._factory(config), key, idle_timeout_s)
                self._entries[key] = entry
                self._created[key] = self._created.get(key, 0) + 1
            entry.uses += 1
            entry.idle_timeout_s = idle_timeout_s
            lease = Lease(entry.client, key, self._created[key], entry)
            self._start_reaper()
        self._close_all(expired)
        return lease

    def release(self, lease: Lease[T]) -> None:
        """End one use; an idle producer whose timeout is 0, or a closed one, leaves the pool now."""
        with self._lock:
            if lease.released:
                return
            lease.released = True
            entry = lease._entry
            entry.uses -= 1
            if entry.uses == 0:
                entry.idle_since = self._clock()
                if entry.client.closed and self._entries.get(entry.fingerprint) is entry:
                    del self._entries[entry.fingerprint]
            expired = self._take_expired()
        self._close_all(expired)

    def expire_idle(self) -> int:
        """Close every producer idle for longer than its idle timeout; how many were closed."""
        with self._lock:
            expired = self._take_expired()
        self._close_all(expired)
        return len(expired)

    # -- what a caller may look at -----------------------------------------------------------------
    def created(self) -> dict[str, int]:
        """Producers this pool has created, per configuration fingerprint."""
        with self._lock:
            return dict(self._created)

    def uses(self) -> dict[str, int]:
        """Current uses of each pooled producer, per configuration fingerprint (0: idle)."""
        with self._lock:
            return {k: e.uses for k, e in self._entries.items()}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # -- end ---------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Close every pooled producer (in use or not), forget the counts, stop the reaper (tests)."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            self._created.clear()
            reaper, self._reaper = self._reaper, None
            self._stop.set()
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join(timeout=5)
        self._close_all(entries)
        self._stop = threading.Event()

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent's producers have no threads here; drop them unclosed."""
        self._lock = threading.Lock()
        self._entries.clear()
        self._created.clear()
        self._reaper = None
        self._stop = threading.Event()

    # -- internals (call with the lock held, close outside it) --------------------------------------
    def _take_expired(self) -> list[_Entry[T]]:
        now = self._clock()
        expired = [
            e
            for e in self._entries.values()
            if e.uses == 0 and (e.client.closed or now - e.idle_since >= e.idle_timeout_s)
        ]
        for e in expired:
            del self._entries[e.fingerprint]
        return expired

    def _close_all(self, entries: list[_Entry[T]]) -> None:
        for e in entries:
            if e.client.closed:
                continue
            try:
                e.client.close()
            except Exception:  # a broken producer: it leaves the pool all the same
                log.warning("closing an idle RocketMQ producer failed", exc_info=True)

    def _start_reaper(self) -> None:
        if self._reaper_interval_s is None or self._reaper is not None:
            return
        ref = weakref.ref(self)
        stop, interval = self._stop, self._reaper_interval_s

        def reap() -> None:
            while not stop.wait(interval):
                pool = ref()
                if pool is None:
                    return
                try:
                    pool.expire_idle()
                except Exception:
                    log.warning("expiring idle RocketMQ producers failed", exc_info=True)
                del pool

        self._reaper = threading.Thread(target=reap, name="rocketmq-producer-reaper", daemon=True)
        self._reaper.start()


class ProducerPool(ClientPool[ProducerConfig, SinkProducer]):
    """The sink's producers (new_producer makes them unless a test gives another factory)."""

    def __init__(
        self,
        factory: Callable[[ProducerConfig], SinkProducer] = new_producer,
        *,
        clock: Callable[[], float] = time.monotonic,
        reaper_interval_s: float | None = None,
    ) -> None:
        super().__init__(factory, clock=clock, reaper_interval_s=reaper_interval_s)


_default_pool = ProducerPool(reaper_interval_s=REAPER_INTERVAL_S)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_default_pool._forget_after_fork)


def default_pool() -> ProducerPool:
    """This process's pool, used by every partition writer that is not given one."""
    return _default_pool


def producers_created() -> dict[str, int]:
    """Producers this process has created, per configuration fingerprint."""
    return _default_pool.created()
