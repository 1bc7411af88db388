"""SendFuture: a concurrent.futures.Future that makes its lock only when a thread needs one.

A plain Future allocates a Condition (a lock and a deque) and two lists when it is made: five objects
the cyclic garbage collector tracks. A producer with auto_batch hands out one future per message, and
a caller that keeps 100,000 of them pays for every full collection walking all five of each; that was
a third of the CPU time of send_async.

A SendFuture starts with none of them. The Condition and the lists are made on first use (under one
module lock, so every thread gets the same ones): by a waiter (result/exception with the future
pending, ``concurrent.futures.wait``/``as_completed``) or by cancel. A future completed before anyone
waited for it is completed without them, and result(), exception() and done() of a completed future
read its final state without them. add_done_callback on such a future keeps its callbacks in a plain
list (under the same lock) that completing it runs, as Future runs its own; a Condition made later
takes them over. Once the Condition exists, every method is Future's own. The attribute names are
those of CPython's Future, unchanged since Python 3.2.

``result_within`` and ``results_within``: how a sync call waits for the futures of its sends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, InvalidStateError
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING
from typing import Any, TypeVar

from .results import SendResult

T = TypeVar("T")

log = logging.getLogger(__name__)

_MAKE = threading.Lock()
_LAZY = ("_condition", "_waiters", "_done_callbacks")
_DONE = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))


class SendFuture(Future[T]):
    def __init__(self) -> None:  # Future.__init__ without the Condition and the lists
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None

    def __getattr__(self, name: str) -> Any:
        if name not in _LAZY:
            raise AttributeError(name)
        with _MAKE:
            made = self.__dict__
            if "_condition" not in made:
                made["_condition"] = threading.Condition()
                made["_waiters"] = []
                made["_done_callbacks"] = made.pop("_unwatched_callbacks", [])
            return made[name]

    def add_done_callback(self, fn: Callable[[Future[T]], object]) -> None:
        with _MAKE:
            made = self.__dict__
            unwatched = "_condition" not in made
            if unwatched and self._state == PENDING:
                made.setdefault("_unwatched_callbacks", []).append(fn)
                return
        if not unwatched:
            super().add_done_callback(fn)
            return
        self._run_callback(fn)  # completed already: at once, on this thread, as Future does

    def _run_callback(self, fn: Callable[[Future[T]], object]) -> None:
        try:
            fn(self)
        except Exception:
            log.exception("exception calling callback for %r", self)

    def _settle_unwatched(self, result: Any, exception: BaseException | None) -> bool:
        """Complete the future if no thread has made its Condition (so none waits on it); True if done."""
        callbacks = None
        with _MAKE:
            made = self.__dict__
            if "_condition" in made:
                return False
            settled = self._state == PENDING
            if settled:
                self._result = result
                self._exception = exception
                self._state = FINISHED
                callbacks = made.pop("_unwatched_callbacks", None)
        if not settled:  # repr() makes the Condition: outside the lock
            raise InvalidStateError(f"{self._state}: {self!r}")
        if callbacks:
            for fn in callbacks:
                self._run_callback(fn)
        return True

    def set_result(self, result: T) -> None:
        if not self._settle_unwatched(result, None):
            super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        if not self._settle_unwatched(None, exception):
            super().set_exception(exception)

    def done(self) -> bool:
        # One attribute read (Future.done takes its Condition for it, which would make one here).
        return self._state in _DONE

    def result(self, timeout: float | None = None) -> T:
        if self._state == FINISHED:  # final: nothing changes it any more
            if self._exception is not None:
                raise self._exception
            return self._result  # type: ignore[no-any-return]
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == FINISHED:
            return self._exception
        return super().exception(timeout)


def result_within(fut: Future[T], timeout_ms: int) -> T:
    """The future's result; the engine settles every send by its deadline (``timeout_ms``), the margin
    only guards against a stuck thread."""
    return fut.result(timeout=timeout_ms / 1000.0 + 2.0)


def results_within(futures: list[Future[SendResult]], timeout_ms: int) -> list[SendResult]:
    """Every future's result, in order; the first error is raised once all have finished."""
    results: list[SendResult] = []
    first: BaseException | None = None
    for f in futures:
        try:
            results.append(result_within(f, timeout_ms))
        except BaseException as exc:
            if first is None:
                first = exc
    if first is not None:
        raise first
    return results


__all__ = ["CancelledError", "SendFuture", "result_within", "results_within"]
