"""The producer's extension points, as a mixin of ``Producer``: queue selectors (MessageQueueSelector),
hook registration (hooks.py), message trace (trace.py) and the send metrics (metrics.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..protocol.message import PROPERTY_KEYS, PROPERTY_MSG_REGION, PROPERTY_TAGS, Message
from ..protocol.route import MessageQueue, check_one_target
from ..protocol.trace import RMQ_SYS_TRACE_TOPIC, TRACE_GROUP_PREFIX
from ..protocol.transaction import PROPERTY_REAL_TOPIC
from .hooks import (
    CheckForbiddenHook,
    EndTransactionContext,
    EndTransactionHook,
    ProducerHooks,
    SendMessageHook,
)
from .trace import MessageTracer

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

    from ..protocol.transaction import TransactionState
    from .config import ProducerConfig
    from .results import SendResult
    from .sender import Sender
    from .transaction import TransactionCheck

#: MessageQueueSelector.select: the topic's writable queues, the message and the send's ``arg``; returns
#: one of the queues.
MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

#: Numbers the trace producers of a process (AsyncTraceDispatcher's COUNTER).
_TRACE_PRODUCERS = itertools.count(1)


class ProducerExtensions:
    """Selectors, hooks, message trace and metrics, for ``Producer``."""

    config: ProducerConfig
    group: str
    client_id: str
    _sender: Sender
    _hooks: ProducerHooks
    _tracer: MessageTracer | None

    if TYPE_CHECKING:  # the producer's methods

        def fetch_publish_queues(self, topic: str) -> list[MessageQueue]: ...

        def send_async(self, message: Message) -> Future[SendResult]: ...

        def close(self, timeout_s: float | None = None) -> None: ...

    def _start_extensions(self, meter_provider: MeterProvider | None) -> None:
        """The hooks the options ask for (before the producer starts anything: a refusal leaves nothing
        running); the engine gets them once it exists (``_sender.hooks``)."""
        self._hooks = ProducerHooks(self.group)
        self._tracer = None
        c = self.config
        if c.enable_metrics:
            from .metrics import SendMetricsHook

            self._hooks.add_send(SendMetricsHook(self.client_id, meter_provider))
        if c.enable_msg_trace:
            self._tracer = self._start_trace()
            self._hooks.add_send(self._tracer)
            self._hooks.add_end(self._tracer)

    def _start_trace(self) -> MessageTracer:
        """The tracer, sending through a producer of its own made on the first trace message."""
        c = self.config
        made: list[Any] = []
        producer: Any = type(self)  # Producer, which this is mixed into

        def send(message: Message) -> Future[SendResult]:  # on the trace thread only
            if not made:
                made.append(
                    producer(
                        config=c.replace(
                            group=f"{TRACE_GROUP_PREFIX}-{c.group}-PRODUCER-{next(_TRACE_PRODUCERS)}",
                            namespace=None,
                            enable_msg_trace=False,
                            enable_metrics=False,
                            auto_batch=False,
                            send_msg_timeout_ms=max(c.send_msg_timeout_ms, 5000),
                        ),
                        join_group=False,
                    )
                )
            sent: Future[SendResult] = made[0].send_async(message)
            return sent

        def close(timeout_s: float) -> None:
            if made:
                made[0].close(timeout_s)

        topic = c.customized_trace_topic or RMQ_SYS_TRACE_TOPIC
        return MessageTracer(c.group, topic, send, close_sender=close, sample_percent=c.msg_trace_sample_percent)

    def _close_extensions(self, timeout_s: float) -> None:
        if self._tracer is not None:
            self._tracer.close(timeout_s)

    @property
    def tracer(self) -> MessageTracer | None:
        """The message tracer with enable_msg_trace (its counters: written, failed, dropped), else None."""
        return self._tracer

    # -- hooks ---------------------------------------------------------------------------------------
    def register_send_message_hook(self, hook: SendMessageHook) -> None:
        """Call ``hook.send_message_before(ctx)`` and ``hook.send_message_after(ctx)`` around every attempt
        of every send (hooks.SendMessageContext)."""
        self._hooks.add_send(hook)
        self._sender.hooks = self._hooks

    def register_check_forbidden_hook(self, hook: CheckForbiddenHook) -> None:
        """Call ``hook.check_forbidden(ctx)`` before every attempt is written; an exception it raises
        refuses the send (SendForbiddenError) and nothing is written."""
        self._hooks.add_forbidden(hook)
        self._sender.hooks = self._hooks

    def register_end_transaction_hook(self, hook: EndTransactionHook) -> None:
        """Call ``hook.end_transaction(ctx)`` for every END_TRANSACTION this producer sends, check-back
        answers included (hooks.EndTransactionContext)."""
        self._hooks.add_end(hook)

    def _check_back_answered(self, check: TransactionCheck, state: TransactionState) -> None:
        """A check-back's END_TRANSACTION is about to be written: the end-transaction hooks see it (Java's
        checkTransactionState calls them before endTransactionOneway, whether or not the write succeeds)."""
        if self._hooks.end:
            h = check.header
            topic = check.message.properties.get(PROPERTY_REAL_TOPIC) or check.message.topic  # a half's own topic
            if self.config.namespace and topic.startswith(f"{self.config.namespace}%"):
                topic = topic.split("%", 1)[1]
            props = check.message.properties
            self._hooks.end_transaction(
                EndTransactionContext(
                    self.group, check.broker_addr, topic, check.msg_id, h.transaction_id, state, True,
                    tags=props.get(PROPERTY_TAGS), keys=props.get(PROPERTY_KEYS),
                    region_id=props.get(PROPERTY_MSG_REGION),
                )
            )  # fmt: skip

    # -- selectors -----------------------------------------------------------------------------------
    def _target(
        self,
        message: Message,
        sharding_key: str | None,
        queue: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
    ) -> MessageQueue | None:
        """The send's pinned queue: ``queue``, or the selector's choice (at most one of the three targets)."""
        check_one_target(sharding_key, queue)
        if selector is None:
            return queue
        if sharding_key is not None or queue is not None:
            raise ConfigError("give one of selector, sharding_key and queue")
        return self._select_queue(message, selector, arg)

    def _select_queue(self, message: Message, selector: MessageQueueSelector, arg: Any) -> MessageQueue:
        """sendSelectImpl's choice: the selector is given the topic's writable queues, once."""
        topic = message.topic
        queues = self.fetch_publish_queues(topic)
        try:
            chosen = selector(list(queues), message, arg)
        except Exception as exc:
            raise ConfigError(f"the queue selector raised for topic {topic!r}: {exc!r}") from exc
        if chosen not in queues:
            raise ConfigError(
                f"the queue selector returned {chosen!r}, which is not one of topic {topic!r}'s writable queues "
                f"({', '.join(f'{q.broker_name}:{q.queue_id}' for q in queues) or 'none'}); return one of the "
                "queues it is given"
            )
        return chosen
