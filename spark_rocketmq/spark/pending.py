"""A partition writer's requests between their first send and their end: each request's rows and sends,
the order kept per queue for keyed rows, and the requests waiting for their resend time.

- ``PendingRequest``: the rows of one request (a batch body, or one row sent alone) until a broker
  stores them or they fail for good.
- ``KeyOrder``: keyed requests per queue, in row order. Only the first of a queue is ever in flight or
  waiting to be resent; once one is undelivered, its queue sends nothing more (rows of one key keep
  their order: the batch replays them).
- ``Resends``: requests that failed and are resent when due: client/policy.py's resend backoff,
  within ``delivery_timeout_ms`` of the writer taking their rows.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future

import pyarrow as pa

from ..client import SendResult
from ..client.policy import resend_backoff
from ..protocol.message import Message
from ..protocol.route import MessageQueue

__all__ = ["KeyOrder", "PendingRequest", "Resends", "queue_name"]


class PendingRequest:
    """The rows of one request (a batch body, or one delayed row) until a broker stores them or they fail."""

    __slots__ = (
        "body",
        "count",
        "future",
        "message",
        "queue",
        "queue_unknown",
        "resend_at",
        "row",
        "sends",
        "size",
        "taken",
        "topic",
        "txn",
    )

    def __init__(
        self,
        topic: str,
        count: int,
        queue: MessageQueue | None,
        taken: float,
        body: pa.Buffer | bytes | None = None,
        message: Message | None = None,
    ) -> None:
        #: ``taken``: when the writer took the rows (its clock); they are resent until delivery_timeout_ms after.
        self.topic, self.count, self.queue, self.taken = topic, count, queue, taken
        self.body, self.message = body, message
        self.size = len(body) if body is not None else len(message.body) if message is not None else 0
        self.sends = 0
        #: The partition's row of a request of one row (delayed and timer rows), for error messages.
        self.row: int | None = None
        self.future: Future[SendResult] | None = None
        self.resend_at = 0.0
        #: Keyed rows whose queue is not known (no route for the topic): they fail unsent.
        self.queue_unknown = False
        #: exactly_once: the SPARK_TXN property of the latest send (which query, batch, partition,
        #: task attempt and send of the row a half message is).
        self.txn: str | None = None


class KeyOrder:
    """Keyed requests per queue, in row order: only a queue's first request is sent."""

    def __init__(self) -> None:
        self._chains: dict[MessageQueue, deque[PendingRequest]] = {}
        #: Queues with an undelivered request: later requests of those are not sent.
        self._failed: set[MessageQueue] = set()

    def blocked(self, queue: MessageQueue) -> bool:
        """True when an earlier request of ``queue`` was not delivered: later ones must not be sent."""
        return queue in self._failed

    def admit(self, req: PendingRequest) -> bool:
        """Line ``req`` (keyed, its queue not blocked) up behind its queue's earlier requests; True when it
        is the first, to be sent now."""
        assert req.queue is not None
        chain = self._chains.setdefault(req.queue, deque())
        chain.append(req)
        return len(chain) == 1

    def settled(self, req: PendingRequest, *, delivered: bool) -> tuple[PendingRequest | None, list[PendingRequest]]:
        """After ``req`` settled: (the next request of its queue, to send now; the later requests of its
        queue, which fail unsent because ``req`` was not delivered). Nothing for a request with no queue."""
        queue = req.queue
        chain = self._chains.get(queue) if queue is not None else None
        if queue is None or not chain or chain[0] is not req:
            return None, []
        chain.popleft()
        if not delivered:
            self._failed.add(queue)
            del self._chains[queue]
            return None, list(chain)
        if chain:
            return chain[0], []
        del self._chains[queue]
        return None, []


class Resends:
    """Failed requests waiting for their resend time."""

    def __init__(self, delivery_timeout_s: float) -> None:
        self._policy = resend_backoff(delivery_timeout_s)
        self._waiting: list[PendingRequest] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def schedule(self, req: PendingRequest, now: float) -> bool:
        """Park ``req`` until its next send (after its ``req.sends``-th failed); False when its delivery
        time is up (it is not parked)."""
        at = self._policy.next_try(req.sends, started=req.taken, now=now)
        if at is None:
            return False
        req.resend_at = at
        self._waiting.append(req)
        return True

    def due(self, now: float) -> list[PendingRequest]:
        """The parked requests whose time has come, taken out."""
        if not self._waiting:
            return []
        due = [r for r in self._waiting if r.resend_at <= now]
        if due:
            self._waiting = [r for r in self._waiting if r.resend_at > now]
        return due

    def next_at(self) -> float | None:
        """The earliest resend time, None when nothing waits."""
        return min((r.resend_at for r in self._waiting), default=None)

    def drain(self) -> list[PendingRequest]:
        """Every parked request, taken out (abort)."""
        out, self._waiting = self._waiting, []
        return out


def queue_name(queue: MessageQueue) -> str:
    return f"queue {queue.broker_name}/{queue.queue_id}"
