"""The RocketMQ producer: transport, NameServer client, fault-avoiding queue selection, retries."""

from __future__ import annotations

from .config import ProducerConfig
from .extensions import MessageQueueSelector
from .hooks import (
    CheckForbiddenContext,
    CheckForbiddenHook,
    CommunicationMode,
    EndTransactionContext,
    EndTransactionHook,
    SendMessageContext,
    SendMessageHook,
)
from .producer import Producer, ProducerStats, SendResult, SendStatus
from .transaction import TransactionCheck, TransactionHandle, TransactionState

__all__ = [
    "CheckForbiddenContext",
    "CheckForbiddenHook",
    "CommunicationMode",
    "EndTransactionContext",
    "EndTransactionHook",
    "MessageQueueSelector",
    "Producer",
    "ProducerConfig",
    "ProducerStats",
    "SendMessageContext",
    "SendMessageHook",
    "SendResult",
    "SendStatus",
    "TransactionCheck",
    "TransactionHandle",
    "TransactionState",
]
