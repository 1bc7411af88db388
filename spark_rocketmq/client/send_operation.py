"""SendOperation: one logical send (sync, async, oneway, batch or pre-encoded batch body) as the send
engine (sender.py) drives it through its attempts: its target (a pinned queue or a sharding key), its
retry count and deadline (send_msg_timeout_ms), what its attempts left (a stored result, the last
error), and its future, settled once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from ..protocol.requests import SendRequest
from ..protocol.route import MessageQueue
from .futures import SendFuture
from .results import SendResult


class SendOperation:
    """One logical send and its attempts."""

    def __init__(
        self,
        req: SendRequest,
        *,
        queue: MessageQueue | None,
        sharding_key: str | None,
        retries: int,
        timeout_ms: int,
        oneway: bool = False,
        sync: bool = True,
        on_settled: Callable[[], None] | None = None,
        settle_as: Callable[[SendResult], Any] | None = None,
    ) -> None:
        self.req = req
        #: Run once, just before the future is settled (and its callbacks run): the producer's send slot.
        self._on_settled = [on_settled] if on_settled is not None else []
        #: What the future holds in place of the SendResult (a half's TransactionHandle); an error it
        #: raises fails the future.
        self._settle_as = settle_as
        #: Sync sends also retry error answers and not-stored-OK ones; async sends (Java's
        #: sendMessageAsync / onExceptionImpl) retry only failures to reach the broker and timeouts.
        self.sync = sync
        self.queue = queue
        self.sharding_key = sharding_key
        self.max_attempts = 1 + retries
        self.timeout_ms = timeout_ms
        self.deadline = time.monotonic() + timeout_ms / 1000.0
        self.oneway = oneway
        self.attempts = 0
        self.busy = 0
        self.last_broker: str | None = None
        self.stored: SendResult | None = None
        #: Why the last attempt failed: the cause reported when the time runs out before the next one.
        self.last_error: BaseException | None = None
        self.future: Future[Any] = SendFuture()

    def settle(self, result: SendResult | None, exc: BaseException | None) -> None:
        """Complete the future once (a second settlement, a race with close(), is ignored)."""
        if self.future.done():
            return
        settled: Any = result
        if exc is None and result is not None and self._settle_as is not None:
            try:
                settled = self._settle_as(result)
            except Exception as bad:
                settled, exc = None, bad
        if self._on_settled:
            try:
                release = self._on_settled.pop()  # atomic: only one settling thread gets it
            except IndexError:
                return
            release()
        try:
            if exc is not None:
                self.future.set_exception(exc)
            else:
                self.future.set_result(settled)
        except InvalidStateError:
            pass
