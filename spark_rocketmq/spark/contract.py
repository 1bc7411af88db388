"""What the sink uses of a producer, and nothing more: the contract between ``spark/`` and ``client/``.

The partition writer and the producer pool are written against ``SinkProducer``; the real
``spark_rocketmq.client.Producer`` satisfies it (mypy checks that in ``pool.py``, a test compares the
signatures), and test doubles implement it too, so no member is probed for at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Protocol, runtime_checkable

from ..client import ProducerStats, SendResult
from ..client.transaction import TransactionHandle
from ..protocol.message import Message
from ..protocol.route import MessageQueue


@runtime_checkable
class SinkProducer(Protocol):
    """The producer members a partition writer calls."""

    @property
    def closed(self) -> bool:
        """True once close() was called (or the producer broke): a pool never hands it out again."""
        ...

    def send_batch_body_async(
        self,
        topic: str,
        body: bytes,
        count: int,
        *,
        uniq_keys: Sequence[str] | None = None,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
    ) -> Future[SendResult]:
        """One pre-encoded MessageBatch body of ``count`` messages; ``queue`` pins the queue."""
        ...

    def send_async(
        self, message: Message, *, sharding_key: str | None = None, queue: MessageQueue | None = None
    ) -> Future[SendResult]:
        """One message (the sink sends delayed rows this way: a broker ignores delays inside a batch)."""
        ...

    def send_half_async(
        self,
        message: Message,
        *,
        queue: MessageQueue | None = None,
        check_immunity_s: int | None = None,
        extra_properties: Mapping[str, str] | None = None,
    ) -> Future[TransactionHandle]:
        """One message as a half message (exactly_once: invisible until the driver commits it), checked
        back no sooner than ``check_immunity_s``, with ``extra_properties`` besides its own."""
        ...

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues, in the order sharding keys index them."""
        ...

    def stats(self) -> ProducerStats:
        """Counters since the producer started; the writer reads ``retries``."""
        ...

    def close(self, timeout_s: float | None = None) -> None:
        """Wait up to ``timeout_s`` for sends in flight, then disconnect."""
        ...
