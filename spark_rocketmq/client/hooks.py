"""The producer's extension points (DefaultMQProducerImpl's hooks): send hooks called before and after
every attempt of every send, check-forbidden hooks that may refuse a send before it leaves, and
end-transaction hooks called for every END_TRANSACTION. Message trace (trace.py) and the send-cost
metric (metrics.py) are built on them.

Hooks see single sends, batches (send_batch and the sink's batch bodies), half messages and oneway
sends: every attempt the engine writes, with its queue and broker; a retry is a new attempt. They run on
the thread that writes or settles the attempt (the caller's, or the producer's I/O thread): keep them
short. A send hook or end-transaction hook that raises is logged once per hook (not per message) and
the send goes on; a check-forbidden hook that raises refuses the send with a SendForbiddenError.

With no hook registered the engine makes no call and builds no context.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import ConfigError, SendForbiddenError
from ..protocol.codes import SysFlag
from ..protocol.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_SEPARATOR,
    BatchRecord,
    decode_properties,
)
from ..protocol.requests import SendRequest
from ..protocol.route import MessageQueue
from ..protocol.stored import batch_body_spans
from ..protocol.trace import MessageType

if TYPE_CHECKING:
    from ..protocol.transaction import TransactionState
    from .results import SendResult
    from .send_operation import SendOperation
    from .transaction import TransactionHandle

log = logging.getLogger(__name__)

_DELAY_MARK = f"{PROPERTY_DELAY_TIME_LEVEL}{NAME_VALUE_SEPARATOR}"


class CommunicationMode(StrEnum):
    """How a send waits for its answer (Java's CommunicationMode)."""

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def request_message_type(req: SendRequest) -> MessageType:
    """The MessageType sendKernelImpl gives a send: a half, a delayed message, or a normal one."""
    if req.sys_flag & SysFlag.TRANSACTION_PREPARED:
        return MessageType.TRANS_MSG_HALF
    if req.timer or req.properties.startswith(_DELAY_MARK) or f"{PROPERTY_SEPARATOR}{_DELAY_MARK}" in req.properties:
        return MessageType.DELAY_MSG
    return MessageType.NORMAL_MSG


def request_messages(req: SendRequest) -> list[BatchRecord]:
    """The messages of a send request: its one message, or each record of a MessageBatch body (flag, body,
    properties). A compressed single body is given as sent."""
    if not req.batch:
        return [BatchRecord(req.flag, bytes(req.body), decode_properties(req.properties))]
    body = req.body
    out = []
    for flag, start, length, props_len in batch_body_spans(body):
        props_at = start + length + 2
        text = bytes(body[props_at : props_at + props_len]).decode("utf-8")
        out.append(BatchRecord(flag, bytes(body[start : start + length]), decode_properties(text)))
    return out


@dataclass(slots=True)
class SendMessageContext:
    """One attempt of a send (Java's SendMessageContext), given to send_message_before and, completed, to
    send_message_after."""

    producer_group: str
    #: The request as it goes on the wire: topic, properties, body (a MessageBatch body for a batch).
    request: SendRequest
    queue: MessageQueue
    broker_addr: str
    communication_mode: CommunicationMode
    msg_type: MessageType
    #: Wall-clock ms when the attempt was written.
    start_ms: int
    #: 1 for the first attempt of the send, 2 for its first retry, ...
    attempt: int
    #: Set before send_message_after: the broker's answer, or why the attempt failed (one of them;
    #: neither for a oneway send that was written).
    send_result: SendResult | None = None
    exception: BaseException | None = None
    #: Milliseconds from the write to the answer (to the failure).
    cost_ms: int = 0
    #: Free for a hook to keep what its before call made for its after call (Java's mqTraceContext).
    trace_context: Any = None
    _begin: float = 0.0

    @property
    def topic(self) -> str:
        """The topic as the user named it (without namespace)."""
        return self.request.topic

    @property
    def is_batch(self) -> bool:
        return self.request.batch

    @property
    def message_count(self) -> int:
        return self.request.count

    def messages(self) -> list[BatchRecord]:
        """The request's messages (one, or each of a batch), with their properties (TAGS, KEYS, UNIQ_KEY...)."""
        return request_messages(self.request)


@dataclass(slots=True)
class CheckForbiddenContext:
    """A send about to be written (Java's CheckForbiddenContext): check_forbidden raises to refuse it."""

    producer_group: str
    request: SendRequest
    queue: MessageQueue
    broker_addr: str
    communication_mode: CommunicationMode
    attempt: int

    @property
    def topic(self) -> str:
        return self.request.topic

    def messages(self) -> list[BatchRecord]:
        return request_messages(self.request)


@dataclass(slots=True)
class EndTransactionContext:
    """One END_TRANSACTION (Java's EndTransactionContext): which half, the decision, where it went."""

    producer_group: str
    broker_addr: str
    topic: str
    msg_id: str
    transaction_id: str | None
    transaction_state: TransactionState
    #: True when it answers a broker's check-back, False when the producer ended the half itself.
    from_transaction_check: bool
    #: The half's handle (None for a check-back, which names the half by its ids only).
    handle: TransactionHandle | None = None
    start_ms: int = field(default_factory=now_ms)
    #: The half's tags and keys: known for a check-back (the broker sends the half with it); None when the
    #: producer ends a half by its handle, which does not carry them.
    tags: str | None = None
    keys: str | None = None
    #: The half's MSG_REGION (a 5.x broker stores its regionId in each message), for a check-back.
    region_id: str | None = None


@runtime_checkable
class SendMessageHook(Protocol):
    def hook_name(self) -> str: ...

    def send_message_before(self, ctx: SendMessageContext) -> None: ...

    def send_message_after(self, ctx: SendMessageContext) -> None: ...


@runtime_checkable
class CheckForbiddenHook(Protocol):
    def hook_name(self) -> str: ...

    def check_forbidden(self, ctx: CheckForbiddenContext) -> None: ...


@runtime_checkable
class EndTransactionHook(Protocol):
    def hook_name(self) -> str: ...

    def end_transaction(self, ctx: EndTransactionContext) -> None: ...


def _check_hook(hook: object, kind: type, methods: tuple[str, ...]) -> None:
    missing = [m for m in ("hook_name", *methods) if not callable(getattr(hook, m, None))]
    if missing:
        raise ConfigError(
            f"{type(hook).__name__} is not a {kind.__name__}: it has no {', '.join(missing)}(); give an object "
            f"with hook_name(), {', '.join(m + '(ctx)' for m in methods)}"
        )


def _mode(op: SendOperation) -> CommunicationMode:
    if op.oneway:
        return CommunicationMode.ONEWAY
    return CommunicationMode.SYNC if op.sync else CommunicationMode.ASYNC


class ProducerHooks:
    """The hooks registered on one producer, and the calls the engine makes to them."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.send: tuple[SendMessageHook, ...] = ()
        self.forbidden: tuple[CheckForbiddenHook, ...] = ()
        self.end: tuple[EndTransactionHook, ...] = ()
        self._lock = threading.Lock()
        #: Hooks (by name and call) whose failure was logged: each is logged once.
        self._logged: set[tuple[str, str]] = set()

    @property
    def empty(self) -> bool:
        return not (self.send or self.forbidden or self.end)

    # -- registration (tuples replaced whole: the engine reads them without a lock) ----------------------
    def add_send(self, hook: SendMessageHook) -> None:
        _check_hook(hook, SendMessageHook, ("send_message_before", "send_message_after"))
        with self._lock:
            self.send = (*self.send, hook)

    def add_forbidden(self, hook: CheckForbiddenHook) -> None:
        _check_hook(hook, CheckForbiddenHook, ("check_forbidden",))
        with self._lock:
            self.forbidden = (*self.forbidden, hook)

    def add_end(self, hook: EndTransactionHook) -> None:
        _check_hook(hook, EndTransactionHook, ("end_transaction",))
        with self._lock:
            self.end = (*self.end, hook)

    def _failed(self, hook: object, call: str, exc: BaseException) -> None:
        try:
            name = str(hook.hook_name())  # type: ignore[attr-defined]
        except Exception:
            name = type(hook).__name__
        key = (name, call)
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        log.warning("hook %s raised in %s (logged once; the sends go on): %r", name, call, exc, exc_info=exc)

    # -- calls from the engine -----------------------------------------------------------------------
    def check_forbidden(self, op: SendOperation, mq: MessageQueue, addr: str) -> None:
        """Raises SendForbiddenError when a check-forbidden hook refuses the attempt."""
        if not self.forbidden:
            return
        ctx = CheckForbiddenContext(self.group, op.req, mq, addr, _mode(op), op.attempts)
        for hook in self.forbidden:
            try:
                hook.check_forbidden(ctx)
            except Exception as exc:
                raise SendForbiddenError(
                    f"hook {hook.hook_name()} refused the send to topic {op.req.topic!r} "
                    f"(queue {mq.broker_name}:{mq.queue_id}): {exc}; nothing was sent"
                ) from exc

    def before(self, op: SendOperation, mq: MessageQueue, addr: str) -> SendMessageContext | None:
        """The attempt's context after every send hook's send_message_before; None when no send hook."""
        hooks = self.send
        if not hooks:
            return None
        req = op.req
        ctx = SendMessageContext(self.group, req, mq, addr, _mode(op), request_message_type(req), now_ms(), op.attempts)
        ctx._begin = time.monotonic()
        for hook in hooks:
            try:
                hook.send_message_before(ctx)
            except Exception as exc:
                self._failed(hook, "send_message_before", exc)
        return ctx

    def after(self, ctx: SendMessageContext, result: SendResult | None, exc: BaseException | None) -> None:
        ctx.send_result, ctx.exception = result, exc
        ctx.cost_ms = int((time.monotonic() - ctx._begin) * 1000)
        for hook in self.send:
            try:
                hook.send_message_after(ctx)
            except Exception as bad:
                self._failed(hook, "send_message_after", bad)

    def end_transaction(self, ctx: EndTransactionContext) -> None:
        for hook in self.end:
            try:
                hook.end_transaction(ctx)
            except Exception as exc:
                self._failed(hook, "end_transaction", exc)
