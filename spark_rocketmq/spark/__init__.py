"""The Spark side: RocketMQSink (foreachBatch) and RocketMQDataSource (format("rocketmq")).

Importing this package imports pyspark and pyarrow; ``import spark_rocketmq`` alone does not.
"""

from __future__ import annotations

from .datasource import RocketMQCommitMessage, RocketMQDataSource
from .ids import BatchContext, batch_context, uniq_keys
from .options import SinkOptions
from .report import DeliveryReport, PartitionSummary
from .schema import MessageColumns, resolve_columns
from .sink import RocketMQSink
from .writer import producers_created

__all__ = [
    "BatchContext",
    "DeliveryReport",
    "MessageColumns",
    "PartitionSummary",
    "RocketMQCommitMessage",
    "RocketMQDataSource",
    "RocketMQSink",
    "SinkOptions",
    "batch_context",
    "producers_created",
    "resolve_columns",
    "uniq_keys",
]
