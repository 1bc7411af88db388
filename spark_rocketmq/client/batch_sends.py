"""The producer's batch sends (DefaultMQProducer.send(Collection<Message>) and the sink's pre-encoded
MessageBatch bodies): send_batch, send_batch_body, send_batch_body_async and encode_batch.

``BatchSends`` is a mixin of ``Producer``: each MessageBatch request is one more SendOperation started
by the producer's ``_submit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..errors import InvalidMessageError
from ..protocol.message import Message
from ..protocol.requests import SendRequest, batch_bodies, batch_body_request, check_batch
from ..protocol.route import MessageQueue, check_one_target
from .collector import fewer_collections
from .futures import result_within, results_within
from .producer_base import ProducerBase
from .results import SendResult

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12 on


class BatchSends(ProducerBase):
    """send_batch, send_batch_body(_async) and encode_batch, for ``Producer``."""

    if TYPE_CHECKING:  # the producer's methods

        def _message_request(self, message: Message) -> SendRequest: ...

    def encode_batch(self, messages: Sequence[Message]) -> list[tuple[bytes, int, list[str]]]:
        """Check a batch and encode it into MessageBatch bodies of at most max_message_size bytes.

        Returns (body, message count, UNIQ_KEYs) per request.
        """
        plain = check_batch(messages, self.config.max_message_size).plain
        ids = self._ids.next_ids(len(messages))
        return list(batch_bodies(messages, ids, self.config.max_message_size, plain=plain))

    @fewer_collections()
    def send_batch(
        self, messages: Sequence[Message], *, sharding_key: str | None = None, queue: MessageQueue | None = None
    ) -> list[SendResult]:
        """Send messages of one topic as MessageBatch requests of at most max_message_size bytes.

        Returns one SendResult per request, in order. The requests are pipelined; if any fails, the
        first error is raised once all have finished (the others may have been stored). Timer messages
        (a delivery time) are sent one request each after the batches, and their results come last.
        Holds ``fewer_collections()`` while it runs: the messages of calls in flight would otherwise
        reach the collector's oldest generation, and each full collection walks the whole heap.
        """
        check_one_target(sharding_key, queue)
        check = check_batch(messages, self.config.max_message_size, allow_timers=True)  # before any request
        if check.has_timers:
            # A broker ignores a delivery time inside a MessageBatch: timer messages go one request each.
            timers = [m for m in messages if isinstance(m, Message) and m.is_timer]
            others = [m for m in messages if not (isinstance(m, Message) and m.is_timer)]
            singles = [self._message_request(m) for m in timers]  # each checked before anything goes out
            if others:
                check_batch(others, self.config.max_message_size)
            for req in singles:
                if req.topic != check.topic:
                    raise InvalidMessageError(
                        f"send_batch: topic {req.topic!r} differs from {check.topic!r}; a batch goes to one topic"
                    )
            results = self.send_batch(others, sharding_key=sharding_key, queue=queue) if others else []
            futures = [self._submit(req, queue, sharding_key, sync=True) for req in singles]
            return results + results_within(futures, self.config.send_msg_timeout_ms)
        wait = messages[0].wait_store_msg_ok
        futures = []
        # Each body is sent as soon as it is encoded: the brokers store one while the next is encoded.
        ids = self._ids.next_ids(len(messages))
        for body, count, uniq_keys in batch_bodies(messages, ids, self.config.max_message_size, plain=check.plain):
            req = self._batch_request(check.topic, body, count, uniq_keys, wait)
            futures.append(self._submit(req, queue, sharding_key, sync=True))
        return results_within(futures, self.config.send_msg_timeout_ms)

    def _batch_request(
        self, topic: str, body: Buffer, count: int, uniq_keys: Sequence[str] | None, wait_store_msg_ok: bool
    ) -> SendRequest:
        return batch_body_request(
            topic,
            body,
            count,
            uniq_keys,
            max_message_size=self.config.max_message_size,
            wait_store_msg_ok=wait_store_msg_ok,
            namespace=self.config.namespace,
        )

    def send_batch_body_async(
        self,
        topic: str,
        body: Buffer,
        count: int,
        *,
        uniq_keys: Sequence[str] | None = None,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        wait_store_msg_ok: bool = True,
    ) -> Future[SendResult]:
        """Send an encoded MessageBatch body (protocol.message.encode_batch_body layout) of ``count`` messages.

        An async send (retry_times_when_send_async_failed), with fault avoidance and the send timeout;
        ``queue`` pins the queue (retried on it only). SendResult.msg_id is ",".join(uniq_keys) when
        given. ``wait_store_msg_ok`` is the batch's WAIT property (its messages' own). Blocks while
        max_in_flight requests are pending.
        """
        check_one_target(sharding_key, queue)
        req = self._batch_request(topic, body, count, uniq_keys, wait_store_msg_ok)
        return self._submit(req, queue, sharding_key, sync=False)

    def send_batch_body(
        self,
        topic: str,
        body: Buffer,
        count: int,
        *,
        uniq_keys: Sequence[str] | None = None,
        queue: MessageQueue | None = None,
        wait_store_msg_ok: bool = True,
    ) -> SendResult:
        """send_batch_body_async and wait, with the sync retry count (retry_times_when_send_failed)."""
        req = self._batch_request(topic, body, count, uniq_keys, wait_store_msg_ok)
        fut: Future[SendResult] = self._submit(req, queue, None, sync=True)
        return result_within(fut, self.config.send_msg_timeout_ms)
