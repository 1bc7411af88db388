"""ProduceAccumulator: single sends gathered into MessageBatch requests (DefaultMQProducer.autoBatch, 5.x).

With ``auto_batch`` on, ``send`` and ``send_async`` of a message that can go in a batch do not make a
request of their own: the message joins the open accumulation of its key (topic, queue, WAIT, tags,
and sync or async, as Java's AggregateKey and its two maps). An accumulation is sent as one
MessageBatch request when its bodies pass ``batch_max_bytes`` or ``batch_max_delay_ms`` after its
first message; each message's future then gets its own SendResult (its UNIQ_KEY, its offset id, the
batch's first queue offset plus its index), or the batch's error. Java's rules:

- delayed messages and retry topics are never batched (DefaultMQProducer.canBatch);
- while ``total_batch_max_bytes`` of bodies are held, further messages are sent on their own;
- a batch is sent like a sync or async send of its messages (retries, fault avoidance, deadline).

A message the batch checks refuse is sent on its own too, so its error is the single send's.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..errors import InvalidMessageError
from ..protocol.message import Message
from ..protocol.requests import SendRequest, batch_bodies, check_batch
from ..protocol.route import MessageQueue
from .config import ProducerConfig
from .futures import SendFuture
from .results import SendResult

#: (topic, queue, WAIT, tags, sync): messages that may share one MessageBatch request.
AggregateKey = tuple[str, MessageQueue | None, bool, str | None, bool]
#: Starts one batch request: (request, queue, sync) -> the future of its SendResult.
SubmitBatch = Callable[[SendRequest, MessageQueue | None, bool], "Future[SendResult]"]
#: Builds the request of one encoded body: (topic, body, count, UNIQ_KEYs, WAIT) -> SendRequest.
BatchRequest = Callable[[str, bytes, int, list[str], bool], SendRequest]


@dataclass
class _Accumulation:
    key: AggregateKey
    #: Monotonic time by which the accumulation is sent, whatever its size.
    due: float
    messages: list[Message] = field(default_factory=list)
    futures: list[Future[SendResult]] = field(default_factory=list)
    size: int = 0


class ProduceAccumulator:
    """Open accumulations per key, and a thread that sends each one at its due time."""

    def __init__(
        self,
        config: ProducerConfig,
        *,
        next_ids: Callable[[int], list[str]],
        batch_request: BatchRequest,
        submit: SubmitBatch,
    ) -> None:
        self._max_delay_s = config.batch_max_delay_ms / 1000.0
        self._max_bytes = config.batch_max_bytes
        self._total_max_bytes = config.total_batch_max_bytes
        self._max_message_size = config.max_message_size
        self._next_ids = next_ids
        self._batch_request = batch_request
        self._submit = submit
        self._open: dict[AggregateKey, _Accumulation] = {}  # in order of due time (insertion order)
        self._held = 0  # body bytes accumulated or in batches not yet answered
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._linger_loop, name="rocketmq-accumulator", daemon=True)
        self._thread.start()

    def add(self, message: Message, queue: MessageQueue | None, *, sync: bool) -> Future[SendResult] | None:
        """The future of the message's own SendResult; None when it must be sent on its own."""
        try:  # refuses delayed messages and retry topics too (DefaultMQProducer.canBatch)
            check_batch((message,), self._max_message_size)
        except InvalidMessageError:
            return None  # sent alone: a message fit to be sent is, a bad one gets the single send's error
        size = len(message.body)
        key: AggregateKey = (message.topic, queue, message.wait_store_msg_ok, message.tags, sync)
        future: Future[SendResult] = SendFuture()
        full = None
        with self._cond:
            if self._closed or self._held >= self._total_max_bytes:
                return None
            acc = self._open.get(key)
            if acc is None:
                acc = self._open[key] = _Accumulation(key, time.monotonic() + self._max_delay_s)
                if len(self._open) == 1:
                    self._cond.notify()  # the linger thread waits for a first accumulation
            acc.messages.append(message)
            acc.futures.append(future)
            acc.size += size
            self._held += size
            if acc.size > self._max_bytes:
                full = self._open.pop(key)
        if full is not None:
            self._send(full)
        return future

    def flush(self) -> None:
        """Send every open accumulation now."""
        with self._cond:
            ready = list(self._open.values())
            self._open.clear()
        for acc in ready:
            self._send(acc)

    def close(self, timeout_s: float) -> None:
        """Send what is open and stop the linger thread; later messages are sent on their own."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self.flush()
        self._thread.join(timeout_s)

    def _linger_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._open:
                    self._cond.wait()
                if self._closed:
                    return
                now = time.monotonic()
                due = [acc for acc in self._open.values() if acc.due <= now]
                if not due:
                    self._cond.wait(next(iter(self._open.values())).due - now)
                    continue
                for acc in due:
                    del self._open[acc.key]
            for acc in due:
                self._send(acc)

    def _send(self, acc: _Accumulation) -> None:
        topic, queue, wait, _, sync = acc.key
        start = 0
        try:
            ids = self._next_ids(len(acc.messages))
            for body, count, uniq_keys in batch_bodies(acc.messages, ids, self._max_message_size):
                futures = acc.futures[start : start + count]
                sizes = sum(len(m.body) for m in acc.messages[start : start + count])
                start += count
                try:
                    batch = self._submit(self._batch_request(topic, body, count, uniq_keys, wait), queue, sync)
                except BaseException as exc:
                    self._settle_failed(futures, sizes, exc)
                    continue
                batch.add_done_callback(
                    functools.partial(self._split, futures=futures, uniq_keys=uniq_keys, size=sizes)
                )
        except BaseException as exc:  # encoding failed: nothing of the rest was sent
            rest = acc.futures[start:]
            self._settle_failed(rest, sum(len(m.body) for m in acc.messages[start:]), exc)

    def _settle_failed(self, futures: list[Future[SendResult]], size: int, exc: BaseException) -> None:
        self._release(size)
        for f in futures:
            f.set_exception(exc)

    def _release(self, size: int) -> None:
        with self._cond:
            self._held -= size

    def _split(
        self, batch: Future[SendResult], futures: list[Future[SendResult]], uniq_keys: list[str], size: int
    ) -> None:
        """ProduceAccumulator.splitSendResults: each message's own result from the batch's."""
        exc = batch.exception()
        if exc is not None:
            self._settle_failed(futures, size, exc)
            return
        self._release(size)
        result = batch.result()
        offset_ids = result.offset_msg_id.split(",")
        per_message = len(offset_ids) == len(futures)  # else one id for the batch (5.x batch consume queue)
        for i, f in enumerate(futures):
            f.set_result(
                SendResult(
                    status=result.status,
                    msg_id=uniq_keys[i],
                    offset_msg_id=offset_ids[i] if per_message else result.offset_msg_id,
                    queue=result.queue,
                    queue_offset=result.queue_offset + i if per_message else result.queue_offset,
                    count=1,
                    transaction_id=result.transaction_id,
                    region_id=result.region_id,
                    broker_version=result.broker_version,
                    trace_on=result.trace_on,
                )
            )
