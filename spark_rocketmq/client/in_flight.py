"""A request in flight on a connection: the callback that gets its answer or error once, its deadline,
and the threads such callbacks run on (which must never block)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future

from ..errors import RemotingError
from ..protocol.command import RemotingCommand
from .io_loop import settling

log = logging.getLogger("spark_rocketmq.client.connection")  # the name it had before it moved here


def mark_settling_thread() -> None:
    """Mark this thread as one that settles requests and sends besides the I/O loop (the timeout scanner,
    the retry pool): callbacks run on it too, so it must never block either."""
    settling.on = True


def in_reader_thread() -> bool:
    """True on a thread where future callbacks run (an I/O loop's, or a thread marked with
    mark_settling_thread): it must never block."""
    return getattr(settling, "on", False)


#: Called once with the answer or the error of a request.
AnswerCallback = Callable[[RemotingCommand | None, BaseException | None], None]


class InFlight:
    """A request waiting for its answer: its callback, its deadline (monotonic) and its request code."""

    __slots__ = ("code", "deadline", "done")

    def __init__(self, done: AnswerCallback, deadline: float, code: int) -> None:
        self.done = done
        self.deadline = deadline
        self.code = code

    def settle(self, answer: RemotingCommand | None, error: BaseException | None, addr: str) -> None:
        try:
            self.done(answer, error)
        except Exception:
            log.exception("callback of a request to %s failed", addr)


def future_callback(fut: Future[RemotingCommand]) -> AnswerCallback:
    def done(answer: RemotingCommand | None, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        elif answer is not None:
            fut.set_result(answer)
        else:  # not done by any caller: done(answer, None) or done(None, error)
            fut.set_exception(RemotingError("a request was settled without an answer or an error"))

    return done
