"""The RocketMQ producer: transport, NameServer client, fault-avoiding queue selection, retries."""

from __future__ import annotations

from .config import ProducerConfig
from .producer import Producer, ProducerStats, SendResult, SendStatus
from .transaction import TransactionCheck, TransactionHandle, TransactionState

__all__ = [
    "Producer",
    "ProducerConfig",
    "ProducerStats",
    "SendResult",
    "SendStatus",
    "TransactionCheck",
    "TransactionHandle",
    "TransactionState",
]
