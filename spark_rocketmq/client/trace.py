"""Message trace (enableMsgTrace): a send hook and an end-transaction hook writing the Java client's trace
records (protocol/trace.py) to RMQ_SYS_TRACE_TOPIC or a customized trace topic, where `mqadmin
queryMsgTraceById` and the dashboard read them.

As the Java client's SendMessageTraceHookImpl, EndTransactionTraceHookImpl and AsyncTraceDispatcher:

- a Pub record for every send attempt a broker answered (SEND_OK or not), with the message's id,
  tags, keys, the broker's address, the body length, the cost, the type and the offset id; an
  attempt that failed without an answer writes none;
- an EndTransaction record for every END_TRANSACTION, with the decision;
- records are queued (a bounded queue: when it is full a record is dropped and counted, never a send
  held up) and a thread of their own packs them into trace messages of at most 118,000 bytes, sent
  when that size is reached or 500 ms after the first record waiting, by a producer of their own
  (group ``_INNER_TRACE_PRODUCER-<group>-PRODUCER``, created on the first trace message).

One difference: a batch (send_batch, the sink's batch bodies) writes one Pub record per message, each
with its own id, where the Java client writes one for the batch under the comma-joined ids, which
queryMsgTraceById of one message cannot find.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..protocol.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    Message,
    decode_properties,
)
from ..protocol.stored import batch_body_spans
from ..protocol.trace import (
    DEFAULT_TRACE_REGION_ID,
    TRANSACTION_STATE_NAMES,
    EndTransactionTrace,
    PubFormat,
    encoded,
    pack_trace_messages,
    split_ids,
    trace_keys,
)
from .hooks import EndTransactionContext, SendMessageContext

if TYPE_CHECKING:
    from .results import SendResult

log = logging.getLogger(__name__)

_TAGS_MARK = f"{PROPERTY_TAGS}{NAME_VALUE_SEPARATOR}"
_KEYS_MARK = f"{PROPERTY_KEYS}{NAME_VALUE_SEPARATOR}"

#: AsyncTraceDispatcher's maxMsgSize (128,000) less the 10,000 it keeps free.
TRACE_BODY_BYTES = 118_000
#: KEYS of one trace message at most (a broker takes 32 KiB of properties).
TRACE_KEYS_BYTES = 16_000
#: A record waits at most this long for others to share its trace message (waitTimeThresholdMil).
TRACE_FLUSH_MS = 500
#: Send attempts and END_TRANSACTIONs waiting to be written as records, at most; more are dropped.
TRACE_QUEUE_SIZE = 16_384
#: The draw of trace sampling (a generator of its own: the producer's other random choices stay apart).
sample_draw = random.Random().randrange
#: Request bytes the waiting attempts hold at most (each holds its request until its records are made).
TRACE_QUEUE_BYTES = 32 * 1024 * 1024


def pub_records(ctx: SendMessageContext, group: str) -> list[tuple[str, list[str]]]:
    """The Pub records (text, keys) of an answered attempt: one per message. A batch's records take each
    message's id from the answer (its UNIQ_KEY when the answer has none) and its tags and keys from its
    properties, which are parsed only when they have tags or keys."""
    result = ctx.send_result
    assert result is not None
    req = ctx.request
    fmt = PubFormat(ctx.start_ms, result.region_id or DEFAULT_TRACE_REGION_ID, group, req.topic)
    fmt.answered(ctx.broker_addr, ctx.cost_ms, ctx.msg_type, result.status == "SEND_OK")
    if not req.batch:
        props = decode_properties(req.properties)
        tags, keys = props.get(PROPERTY_TAGS), props.get(PROPERTY_KEYS)
        text = fmt.record(result.msg_id, tags, keys, len(req.body), result.offset_msg_id)
        return [(text, trace_keys(result.msg_id, keys))]
    body = req.body
    spans = batch_body_spans(body)
    ids = result.msg_id.split(",") if result.msg_id else []
    offsets = split_ids(result.offset_msg_id, len(spans))
    out = []
    for i, (_flag, start, length, props_len) in enumerate(spans):
        at = start + length + 2
        text = str(body[at : at + props_len], "utf-8")
        if len(ids) == len(spans) and _TAGS_MARK not in text and _KEYS_MARK not in text:
            msg_id, tags, keys = ids[i], None, None
        else:
            props = decode_properties(text)
            tags, keys = props.get(PROPERTY_TAGS), props.get(PROPERTY_KEYS)
            msg_id = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or (ids[i] if i < len(ids) else "")
        out.append((fmt.record(msg_id, tags, keys, length, offsets[i]), trace_keys(msg_id, keys)))
    return out


def end_transaction_record(ctx: EndTransactionContext, group: str) -> EndTransactionTrace:
    return EndTransactionTrace(
        ctx.start_ms, ctx.region_id or DEFAULT_TRACE_REGION_ID, group, ctx.topic, ctx.msg_id, ctx.tags, ctx.keys,
        ctx.broker_addr, ctx.transaction_id, TRANSACTION_STATE_NAMES[ctx.transaction_state.name],
        ctx.from_transaction_check,
    )  # fmt: skip


class MessageTracer:
    """Send hook and end-transaction hook of a producer with enable_msg_trace (AsyncTraceDispatcher).

    ``group``: the host producer's group without namespace, as the records name it. ``send``: sends one
    trace message (topic, body, keys) and returns its future: the trace producer's send_async, made on
    the first call. ``close(timeout_s)`` writes what is queued and waits for it.
    """

    def __init__(
        self,
        group: str,
        trace_topic: str,
        send: Callable[[Message], Future[SendResult]],
        *,
        close_sender: Callable[[float], None] | None = None,
        sample_percent: int = 100,
    ) -> None:
        self.group = group
        #: Percent of answered send requests traced (msg_trace_sample_percent); END_TRANSACTIONs are all.
        self._sample = sample_percent
        self.trace_topic = trace_topic
        self._send = send
        self._close_sender = close_sender
        self._cond = threading.Condition()
        self._queue: deque[SendMessageContext | EndTransactionContext] = deque()
        self._queued_bytes = 0
        self._pending: set[Future[SendResult]] = set()
        self._stopping = False
        #: flush() asked for what is queued to be written now; the thread holds records not yet written.
        self._flushing = False
        self._holding = False
        #: Records dropped because the queue was full; trace messages that failed.
        self.dropped = 0
        self.failed = 0
        self.written = 0
        self._warned: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="rocketmq-trace", daemon=True)
        self._thread.start()

    # -- hooks ---------------------------------------------------------------------------------------
    def hook_name(self) -> str:
        return "SendMessageTraceHook"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        return None

    def send_message_after(self, ctx: SendMessageContext) -> None:
        # No record of a failed attempt, of a trace message, or of a send the broker's traceOn=false keeps
        # out of the trace (SendMessageTraceHookImpl.sendMessageAfter).
        if ctx.send_result is None or not ctx.send_result.trace_on or ctx.request.topic == self.trace_topic:
            return
        if self._sample < 100 and sample_draw(100) >= self._sample:
            return
        self._append(ctx, len(ctx.request.body))

    def end_transaction(self, ctx: EndTransactionContext) -> None:
        if ctx.topic != self.trace_topic:
            self._append(ctx, 0)

    def _append(self, ctx: SendMessageContext | EndTransactionContext, size: int) -> None:
        with self._cond:
            if self._stopping:  # a send settled after close() gave up waiting for it: its record is lost
                self.dropped += 1
                return
            if len(self._queue) < TRACE_QUEUE_SIZE and self._queued_bytes + size <= TRACE_QUEUE_BYTES:
                self._queued_bytes += size
                self._queue.append(ctx)
                if len(self._queue) == 1:
                    self._cond.notify_all()
                return
            self.dropped += 1
            dropped = self.dropped
        self._warn_once(
            "full",
            f"trace queue full ({TRACE_QUEUE_SIZE} sends or {TRACE_QUEUE_BYTES >> 20} MiB of requests waiting): "
            f"records dropped ({dropped} so far); msg_trace_sample_percent traces fewer sends",
        )

    def _warn_once(self, what: str, text: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("message trace of group %s: %s (logged once)", self.group, text)

    # -- the trace thread ----------------------------------------------------------------------------
    def _records(self, taken: list[SendMessageContext | EndTransactionContext]) -> list[tuple[str, list[str]]]:
        records: list[tuple[str, list[str]]] = []
        for ctx in taken:
            try:
                if isinstance(ctx, SendMessageContext):
                    records += pub_records(ctx, self.group)
                else:
                    records.append(encoded(end_transaction_record(ctx, self.group)))
            except Exception as exc:  # a record that cannot be made must not stop the others
                self._warn_once("record", f"a trace record could not be made: {exc!r}")
        return records

    def _run(self) -> None:
        waiting: list[tuple[str, list[str]]] = []
        size = 0
        first_at = 0.0
        while True:
            with self._cond:
                if not self._queue and not self._stopping and not self._flushing:
                    timeout = None if not waiting else max(0.0, first_at + TRACE_FLUSH_MS / 1000 - time.monotonic())
                    self._cond.wait(timeout)
                taken = list(self._queue)
                self._queue.clear()
                self._queued_bytes = 0
                stopping, flushing = self._stopping, self._flushing
                self._holding = bool(taken or waiting)
            if taken:
                if not waiting:
                    first_at = time.monotonic()
                new = self._records(taken)
                waiting += new
                size += sum(len(text) for text, _ in new)
            if waiting and (
                stopping or flushing or size >= TRACE_BODY_BYTES or time.monotonic() - first_at >= TRACE_FLUSH_MS / 1000
            ):
                self._write(waiting)
                waiting, size = [], 0
            with self._cond:
                self._holding = bool(waiting)
                if not self._queue and not waiting:
                    self._flushing = False
                    self._cond.notify_all()  # flush() waits for this
                    if stopping:
                        return

    def pending(self) -> bool:
        """Whether records are queued or held by the trace thread, or trace messages await their answer."""
        with self._cond:
            return bool(self._queue or self._holding or self._pending)

    def flush(self, timeout_s: float, *, settled: bool = False) -> bool:
        """Write every record queued now without waiting for others (AsyncTraceDispatcher.flush); True when
        all were handed to the trace producer within ``timeout_s``. With ``settled``, also wait (within the
        same ``timeout_s``) until every trace message in flight is answered, stored or failed: a process
        that may end right after has then nothing of its trace left to lose."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._flushing = True
            self._cond.notify_all()
            while self._queue or self._holding or self._flushing:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
            in_flight = set(self._pending) if settled else set()
            while in_flight & self._pending:  # _sent() takes each out when its answer is counted
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _write(self, records: list[tuple[str, list[str]]]) -> None:
        for packed in pack_trace_messages(records, TRACE_BODY_BYTES, TRACE_KEYS_BYTES):
            message = Message(self.trace_topic, packed.body.encode("utf-8"), keys=packed.keys)
            try:
                fut = self._send(message)
            except Exception as exc:
                with self._cond:
                    self.failed += 1
                self._warn_once("send", f"a trace message to {self.trace_topic!r} could not be sent: {exc}")
                continue
            with self._cond:
                self._pending.add(fut)
            fut.add_done_callback(self._sent)

    def _sent(self, fut: Future[SendResult]) -> None:
        exc = fut.exception()
        with self._cond:
            self._pending.discard(fut)
            self._cond.notify_all()  # flush(settled=True) waits for this
            if exc is None:
                self.written += 1
                return
            self.failed += 1
        self._warn_once(
            "send",
            f"a trace message to {self.trace_topic!r} failed: {exc}; for RMQ_SYS_TRACE_TOPIC the brokers need "
            "traceTopicEnable=true, a customized_trace_topic must exist (or be auto-created)",
        )

    def close(self, timeout_s: float) -> None:
        """Write what is queued, wait for the trace messages in flight (at most ``timeout_s``), close the
        trace producer."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            pending = list(self._pending)
        for fut in pending:
            with contextlib.suppress(Exception):  # not settled in time: closing the trace producer fails it
                fut.exception(max(0.0, deadline - time.monotonic()))
        if self._close_sender is not None:
            self._close_sender(max(0.0, deadline - time.monotonic()))
