"""A broker's background service (Java's ServiceThread): one thread doing a round of work at a fixed
interval, holding while the broker is hung and leaving when it stops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .server import Freeze

log = logging.getLogger(__name__)


class ServiceThread:
    """Calls ``work`` every ``interval_s`` seconds from start() until stop(), or until the broker's
    server shuts down (``freeze``); while the broker is hung the thread holds before the next round.
    A round that raises is logged as ``failure`` and the next one runs: a bad record must not end
    the service. ``work`` may watch ``stopping`` to leave a long round early."""

    def __init__(self, name: str, interval_s: float, work: Callable[[], object], freeze: Freeze, failure: str) -> None:
        self.name = name
        self.interval_s = interval_s
        self._work = work
        self._freeze = freeze
        self._failure = failure
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.stopping.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the thread to leave and wait at most ``timeout_s`` for the round under way to end."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self.stopping.wait(self.interval_s) and self._freeze.passage():
            try:
                self._work()
            except Exception:
                log.exception("%s: %s", self.name, self._failure)
