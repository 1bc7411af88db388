"""Which rows of a batch are in their topic, told by reading their queues (PULL_MESSAGE) instead of asking
the brokers' message index (QUERY_MESSAGE): what the exactly-once driver uses when its halves went through
a RocketMQ 5.x Proxy, whose remoting port serves pulls and offsets but refuses QUERY_MESSAGE.

A half message committed is published to the queue it was sent to (its REAL_TOPIC and REAL_QID on the
broker that stored it). The driver takes each such queue's max offset before it records the batch, so
before any of the batch's rows can be published (through a Proxy only check-backs publish them, and none
is answered COMMIT before the record): every row of the batch that is published is at or after that
offset. A ``QueueScan`` reads its queue forward from there, once, and keeps the UNIQ_KEYs it was asked
to look for; later look-ups read only what was stored since.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable

from ..client.config import ProducerConfig
from ..client.consumer_config import ConsumerConfig
from ..client.pull_consumer import PullConsumer
from ..client.transaction import TransactionHandle
from ..protocol.pull import PullStatus
from ..protocol.route import MessageQueue
from ..protocol.stored import decode_stored_messages

log = logging.getLogger("spark_rocketmq.spark")

#: Messages one pull asks for.
PULL_BATCH = 256
#: UNIQ_KEYs found that a queue's scan keeps at most (the oldest are forgotten; a look-up of one
#: forgotten reads the queue again from its batch's offset).
MAX_FOUND_PER_QUEUE = 200_000


def consumer_config(config: ProducerConfig) -> ConsumerConfig:
    """The producer's connection settings (address, namespace, ACL, TLS, timeouts) for a pull consumer."""
    return ConsumerConfig(
        namesrv_addr=config.namesrv_addr,
        namespace=config.namespace,
        access_key=config.access_key,
        secret_key=config.secret_key,
        use_tls=config.use_tls,
        tls_verify=config.tls_verify,
        remoting_timeout_ms=config.remoting_timeout_ms,
        connect_timeout_ms=config.connect_timeout_ms,
        pull_timeout_ms=max(config.remoting_timeout_ms, 3000),
    )


def queue_of(handle: TransactionHandle) -> MessageQueue:
    """The queue a half's row is published to once committed."""
    return MessageQueue(handle.topic, handle.broker_name, handle.queue_id)


class QueueScan:
    """One queue read forward from an offset, keeping the UNIQ_KEYs looked for that it met."""

    def __init__(self, queue: MessageQueue, from_offset: int) -> None:
        self.queue = queue
        self.cursor = from_offset
        self.wanted: set[str] = set()
        self.found: OrderedDict[str, None] = OrderedDict()
        self.lock = threading.Lock()

    def want(self, keys: Iterable[str], from_offset: int) -> None:
        """Look for ``keys`` too, published at or after ``from_offset`` (read again from there when the
        scan has passed it)."""
        new = {k for k in keys if k not in self.found and k not in self.wanted}
        if new and from_offset < self.cursor:
            self.cursor = from_offset
        self.wanted |= new

    def read_to_end(self, consumer: PullConsumer) -> None:
        """Pull from the cursor to the queue's end as its first answer gives it (what is stored later is read
        at the next look-up: a busy queue does not hold this one for ever); raises RocketMQError when a pull
        fails."""
        end: int | None = None
        while end is None or self.cursor < end:
            result = consumer.pull(self.queue, self.cursor, PULL_BATCH)
            if end is None:
                end = result.max_offset
            if result.status is PullStatus.FOUND:
                for message in decode_stored_messages(result.body):
                    key = message.uniq_key
                    if key is not None and key in self.wanted:
                        self.wanted.discard(key)
                        self.found[key] = None
                while len(self.found) > MAX_FOUND_PER_QUEUE:
                    self.found.popitem(last=False)
            if result.status is PullStatus.NO_NEW_MSG or result.next_begin_offset == self.cursor:
                return
            # FOUND and NO_MATCHED_MSG move on; OFFSET_ILLEGAL names where to go on (the min or max offset)
            self.cursor = result.next_begin_offset


class PublishedScan:
    """Look-ups of published rows by pulling their queues through one pull consumer (made at first use);
    thread-safe (one pull at a time per queue)."""

    def __init__(self, config: ProducerConfig) -> None:
        self._config = consumer_config(config)
        self._consumer: PullConsumer | None = None
        self._queues: dict[MessageQueue, QueueScan] = {}
        self._lock = threading.Lock()

    def _pulls(self) -> PullConsumer:
        with self._lock:
            if self._consumer is None or self._consumer.closed:
                self._consumer = PullConsumer(self._config)
            return self._consumer

    def max_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """Each queue's max offset now (GET_MAX_OFFSET): where its scan starts."""
        consumer = self._pulls()
        return {
            q: consumer.max_offset(q) for q in sorted(set(queues), key=lambda q: (q.topic, q.broker_name, q.queue_id))
        }

    def unpublished(
        self, handles: Iterable[TransactionHandle], from_offsets: dict[MessageQueue, int]
    ) -> list[TransactionHandle]:
        """The halves of ``handles`` whose row is not in its queue (read to its end now), each queue read
        from its offset in ``from_offsets`` on. Raises RocketMQError when a queue cannot be read."""
        by_queue: dict[MessageQueue, list[TransactionHandle]] = {}
        for h in handles:
            by_queue.setdefault(queue_of(h), []).append(h)
        consumer = self._pulls()
        left: list[TransactionHandle] = []
        for queue, queued in by_queue.items():
            with self._lock:
                scan = self._queues.get(queue)
                if scan is None:
                    scan = self._queues[queue] = QueueScan(queue, from_offsets.get(queue, 0))
            with scan.lock:
                scan.want((h.msg_id for h in queued), from_offsets.get(queue, 0))
                if any(h.msg_id not in scan.found for h in queued):
                    scan.read_to_end(consumer)
                left += [h for h in queued if h.msg_id not in scan.found]
        return left

    def close(self) -> None:
        with self._lock:
            consumer, self._consumer = self._consumer, None
            self._queues.clear()
        if consumer is not None:
            consumer.close()
