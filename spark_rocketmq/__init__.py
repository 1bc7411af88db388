"""Publish Spark DataFrames to Apache RocketMQ with a pure-Python remoting client."""

from __future__ import annotations

from .errors import (
    BrokerError,
    ConfigError,
    DeliveryError,
    InvalidMessageError,
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
    RocketMQError,
    SendFailedError,
    TopicNotFoundError,
)
from .protocol.message import Message
from .protocol.route import MessageQueue

__all__ = [
    "BrokerError",
    "ConfigError",
    "DeliveryError",
    "InvalidMessageError",
    "Message",
    "MessageQueue",
    "ProtocolError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeoutError",
    "RocketMQError",
    "SendFailedError",
    "TopicNotFoundError",
]
