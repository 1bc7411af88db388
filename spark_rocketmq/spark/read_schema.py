"""The read schema: one row per message, the same for batch and streaming reads.

Three spellings of one schema: READ_SCHEMA (the Arrow schema of the record batches spark/decoder.py
builds), read_struct_type() (the Spark StructType a data source declares) and READ_DDL. They agree
exactly: a Python data source reader that yields pa.RecordBatch has each batch's schema compared with
``to_arrow_schema(schema(), timezone="UTC")`` (PySpark 4.1+), nullability and timestamp unit included.
That is why the timestamps are ``timestamp[us, tz=UTC]`` (Spark's TimestampType; a broker's milliseconds
times 1000, exact) and why every field is nullable: a DDL string cannot say that an array's elements or
a map's values are never null, and the StructType must be what the DDL string parses to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

#: (name, Arrow type, meaning) of each column, in order.
_COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("topic", pa.string(), "the message's topic, without the client's namespace prefix"),
    ("broker_name", pa.string(), "brokerName of the queue the message was pulled from"),
    ("queue_id", pa.int32(), "the queue's id within its broker"),
    (
        "queue_offset",
        pa.int64(),
        "position in the consume queue (an inner-batch message: the batch's base offset plus its index)",
    ),
    ("msg_id", pa.string(), "UNIQ_KEY (the producer's id) when present, else offset_msg_id"),
    (
        "offset_msg_id",
        pa.string(),
        "store host, port and commit-log offset as hex (MessageDecoder.createMessageId): 32 characters, "
        "56 for an IPv6 store host; inner-batch messages share their batch record's",
    ),
    ("keys", pa.list_(pa.string()), "the KEYS property split on spaces; empty without KEYS"),
    ("tags", pa.string(), "the TAGS property; null without one"),
    ("body", pa.binary(), "the body, decompressed"),
    ("properties", pa.map_(pa.string(), pa.string()), "every stored property, as MessageExt.getProperties()"),
    ("born_timestamp", pa.timestamp("us", tz="UTC"), "when the producer created the message (ms precision)"),
    ("store_timestamp", pa.timestamp("us", tz="UTC"), "when the broker stored it (ms precision)"),
    ("born_host", pa.string(), 'the producer\'s address as the broker saw it: "ip:port", "[ipv6]:port"'),
    ("store_host", pa.string(), 'the storing broker\'s address: "ip:port", "[ipv6]:port"'),
    ("reconsume_times", pa.int32(), "deliveries retried so far (0 for a message as produced)"),
    ("flag", pa.int32(), "the producer's Message.flag"),
    (
        "sys_flag",
        pa.int32(),
        "MessageSysFlag bits as the Java client shows them: COMPRESSED cleared once the body is decompressed",
    ),
)

#: The Arrow schema of decode_pull_body's record batches.
READ_SCHEMA: pa.Schema = pa.schema(
    [pa.field(name, dtype, nullable=True, metadata={"comment": doc}) for name, dtype, doc in _COLUMNS]
)

#: The same schema as Spark DDL.
READ_DDL = (
    "topic STRING, broker_name STRING, queue_id INT, queue_offset BIGINT, msg_id STRING, offset_msg_id STRING, "
    "keys ARRAY<STRING>, tags STRING, body BINARY, properties MAP<STRING, STRING>, born_timestamp TIMESTAMP, "
    "store_timestamp TIMESTAMP, born_host STRING, store_host STRING, reconsume_times INT, flag INT, sys_flag INT"
)


def read_struct_type() -> StructType:
    """The read schema as a Spark StructType (what READ_DDL parses to), each column's meaning as its comment."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DataType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    spark_types: dict[pa.DataType, DataType] = {
        pa.string(): StringType(),
        pa.int32(): IntegerType(),
        pa.int64(): LongType(),
        pa.binary(): BinaryType(),
        pa.timestamp("us", tz="UTC"): TimestampType(),
        pa.list_(pa.string()): ArrayType(StringType(), containsNull=True),
        pa.map_(pa.string(), pa.string()): MapType(StringType(), StringType(), valueContainsNull=True),
    }
    return StructType([StructField(name, spark_types[dtype], True, {"comment": doc}) for name, dtype, doc in _COLUMNS])
