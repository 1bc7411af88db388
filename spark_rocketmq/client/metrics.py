"""The producer's metrics through OpenTelemetry's API (the optional extra ``spark-rocketmq[otel]``), with
RocketMQ 5's names, recorded by a send hook (hooks.py) once per attempt:

- ``rocketmq_send_cost_time``: histogram of milliseconds from write to answer, as RocketMQ 5's clients
  record it, with ``topic``, ``client_id`` and ``invocation_status`` (``success`` / ``failure``);
- ``rocketmq_messages_in_total`` and ``rocketmq_throughput_in_total``: messages and request bytes a broker
  stored, as a 5.x broker counts what comes in, with ``topic``, ``client_id`` and ``message_type``
  (``normal``, ``transaction``, ``delay``).

Off unless the producer's ``enable_metrics`` is true; the instruments go to the global MeterProvider
(or the one given to ``Producer(meter_provider=...)``), so an application that configured none records
nothing. ``meter()`` gives other layers (the sink's metrics) a Meter of the same library.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..protocol.trace import MessageType
from .hooks import SendMessageContext

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter, MeterProvider

#: The instrumentation scope the instruments are created in.
METER_NAME = "spark_rocketmq"
SEND_COST_TIME = "rocketmq_send_cost_time"
MESSAGES_IN_TOTAL = "rocketmq_messages_in_total"
THROUGHPUT_IN_TOTAL = "rocketmq_throughput_in_total"
#: RocketMQ 5's clients' histogram boundaries for the send cost, in ms.
SEND_COST_BUCKETS_MS = (1.0, 5.0, 10.0, 20.0, 50.0, 200.0, 500.0)

_MESSAGE_TYPES = {
    MessageType.NORMAL_MSG: "normal",
    MessageType.TRANS_MSG_HALF: "transaction",
    MessageType.TRANS_MSG_COMMIT: "transaction",
    MessageType.DELAY_MSG: "delay",
    MessageType.ORDER_MSG: "fifo",
}


def otel_installed() -> bool:
    return importlib.util.find_spec("opentelemetry.metrics") is not None


def meter(meter_provider: MeterProvider | None = None, name: str = METER_NAME) -> Meter | None:
    """A Meter of this library from ``meter_provider`` (default: OpenTelemetry's global one); None when
    opentelemetry-api is not installed."""
    if not otel_installed():
        return None
    from opentelemetry import metrics

    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    return provider.get_meter(name)


class SendMetricsHook:
    """A send hook recording the send cost, and the messages and bytes stored, per attempt."""

    def __init__(self, client_id: str, meter_provider: MeterProvider | None = None) -> None:
        m = meter(meter_provider)
        if m is None:
            raise ConfigError(
                "option enable_metrics=true needs OpenTelemetry's API: pip install 'spark-rocketmq[otel]' "
                "(opentelemetry-api), or set enable_metrics=false"
            )
        self.client_id = client_id
        self._cost = self._histogram(m)
        self._messages = m.create_counter(MESSAGES_IN_TOTAL, unit="1", description="Messages the brokers stored")
        self._bytes = m.create_counter(THROUGHPUT_IN_TOTAL, unit="By", description="Request bytes the brokers stored")
        self._status_labels: dict[tuple[str, bool], dict[str, str]] = {}
        self._type_labels: dict[tuple[str, MessageType], dict[str, str]] = {}

    @staticmethod
    def _histogram(m: Meter) -> Any:
        kwargs: dict[str, Any] = {"unit": "ms", "description": "Time from writing a send to its answer"}
        try:  # bucket advice: opentelemetry-api 1.23 on
            return m.create_histogram(
                SEND_COST_TIME, explicit_bucket_boundaries_advisory=list(SEND_COST_BUCKETS_MS), **kwargs
            )
        except TypeError:
            return m.create_histogram(SEND_COST_TIME, **kwargs)

    def hook_name(self) -> str:
        return "SendMetricsHook"

    def send_message_before(self, ctx: SendMessageContext) -> None:
        return None

    def send_message_after(self, ctx: SendMessageContext) -> None:
        result = ctx.send_result
        ok = result is not None or (ctx.exception is None and ctx.communication_mode == "ONEWAY")
        topic = ctx.request.topic
        key = (topic, ok)
        labels = self._status_labels.get(key)
        if labels is None:  # one attribute dict per topic and status, not one per record
            status = "success" if ok else "failure"
            labels = self._status_labels[key] = {
                "topic": topic,
                "client_id": self.client_id,
                "invocation_status": status,
            }
        self._cost.record(ctx.cost_ms, labels)
        if result is not None:
            kind = (topic, ctx.msg_type)
            stored = self._type_labels.get(kind)
            if stored is None:
                message_type = _MESSAGE_TYPES[ctx.msg_type]
                stored = self._type_labels[kind] = {
                    "topic": topic,
                    "client_id": self.client_id,
                    "message_type": message_type,
                }
            self._messages.add(ctx.request.count, stored)
            self._bytes.add(len(ctx.request.body), stored)
