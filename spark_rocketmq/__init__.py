"""Publish Spark DataFrames to Apache RocketMQ with a pure-Python remoting client."""

from __future__ import annotations

#: The package's version, written here only (pyproject.toml reads it).
__version__ = "0.1.0"

from .client import (
    Producer,
    ProducerConfig,
    ProducerStats,
    SendResult,
    SendStatus,
    TransactionCheck,
    TransactionHandle,
    TransactionState,
)
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
    SendForbiddenError,
    TopicNotFoundError,
    TopicNotWritableError,
)
from .protocol.message import Message
from .protocol.route import MessageQueue

# RocketMQDataSource is left out of __all__: it needs PySpark 4.1+, and a star import must work on 3.5.
# The Spark side is imported on first use: `import spark_rocketmq` must not import pyspark.
_SPARK_EXPORTS = frozenset(
    {"RocketMQSink", "RocketMQDataSource", "DeliveryReport", "SinkOptions", "RocketMQCommitMessage"}
)


def __getattr__(name: str) -> object:
    if name in _SPARK_EXPORTS:
        from . import spark

        return getattr(spark, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BrokerError",
    "ConfigError",
    "DeliveryError",
    "DeliveryReport",
    "InvalidMessageError",
    "Message",
    "MessageQueue",
    "Producer",
    "ProducerConfig",
    "ProducerStats",
    "ProtocolError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeoutError",
    "RocketMQError",
    "RocketMQSink",
    "SendFailedError",
    "SendForbiddenError",
    "SendResult",
    "SendStatus",
    "TopicNotFoundError",
    "TopicNotWritableError",
    "TransactionCheck",
    "TransactionHandle",
    "TransactionState",
]
