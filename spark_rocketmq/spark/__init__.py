"""The Spark side: RocketMQSink (foreachBatch) and RocketMQDataSource (format("rocketmq")).

Importing this package imports pyspark and pyarrow; ``import spark_rocketmq`` alone does not.
RocketMQSink runs on PySpark 3.5 and 4.x; RocketMQDataSource needs PySpark 4.1 or later and is
imported on first use, so that the rest of this package works on older Spark (asking for it there
raises ImportError saying what to use instead).
"""

from __future__ import annotations

from .compat import supports_datasource
from .message_ids import BatchContext, batch_context, uniq_keys
from .options import SinkOptions
from .report import DeliveryReport, PartitionSummary
from .schema import MessageColumns, resolve_columns
from .sink import RocketMQSink
from .writer import producers_created

#: Names served by .datasource, which needs PySpark's Python Data Source API (4.1+).
_DATASOURCE_EXPORTS = frozenset({"RocketMQDataSource", "RocketMQCommitMessage"})


def __getattr__(name: str) -> object:
    if name in _DATASOURCE_EXPORTS:
        from . import datasource  # ImportError naming the PySpark needed, and foreachBatch, on older Spark

        return getattr(datasource, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BatchContext",
    "DeliveryReport",
    "MessageColumns",
    "PartitionSummary",
    "RocketMQSink",
    "SinkOptions",
    "batch_context",
    "producers_created",
    "resolve_columns",
    "uniq_keys",
]
if supports_datasource():  # `from spark_rocketmq.spark import *` works on every supported PySpark
    __all__ += sorted(_DATASOURCE_EXPORTS)
