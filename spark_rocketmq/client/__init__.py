"""The RocketMQ producer: transport, NameServer client, fault-avoiding queue selection, retries."""

from __future__ import annotations

from .config import ProducerConfig
from .producer import Producer, ProducerStats, SendResult, SendStatus

__all__ = ["Producer", "ProducerConfig", "ProducerStats", "SendResult", "SendStatus"]
