"""Which DataFrame columns become which message fields, checked on the driver before any task runs.

| column         | Spark type                          | message                                      |
| -------------- | ----------------------------------- | -------------------------------------------- |
| `body`         | binary or string (required)         | the body (strings as UTF-8)                  |
| `topic`        | string                              | the topic; the `topic` option overrides it   |
| `tags`         | string                              | TAGS                                         |
| `keys`         | string or array<string>             | KEYS (array elements joined by spaces)       |
| `properties`   | map<string,string>                  | user properties (reserved names: see below)  |
| `delay_level`  | tinyint, smallint, int or bigint    | DELAY (1..18; null or 0: none)               |
| `deliver_time` | timestamp, or bigint epoch ms       | TIMER_DELIVER_MS (RocketMQ 5; null: none)    |
| `delay_ms`     | tinyint, smallint, int or bigint    | TIMER_DELAY_MS (RocketMQ 5; null or 0: none) |
| `sharding_key` | string                              | one queue per key, rows in order; __SHARDINGKEY |
| `queue_id`     | tinyint, smallint, int or bigint    | that queue of the topic, rows in order (null: none) |

``queue_id`` is an index into the topic's writable queues as the producer lists them
(``Producer.fetch_publish_queues``: the order a Java MessageQueueSelector is given them), as Spark's
Kafka sink takes a ``partition`` column; it wins over ``sharding_key`` for the choice of queue (the
row keeps its __SHARDINGKEY property). An id outside 0..n-1 (n writable queues) is an invalid row.

A `properties` map may hold names RocketMQ reserves for itself (protocol/message.py
RESERVED_PROPERTY_NAMES): a DataFrame read with ``format("rocketmq")`` holds every property the
broker stored, and written back (to another topic) republishes the same bodies, keys, tags and user
properties. What the sink does with a reserved name in a row's map:

| reserved name in the map                     | the row's message                                    |
| -------------------------------------------- | ---------------------------------------------------- |
| TAGS, KEYS                                   | left out: the `tags` / `keys` columns give them      |
| UNIQ_KEY, WAIT, TRACE_ON, INSTANCE_ID, ...   | left out: the producer sets its own                  |
| CLUSTER, MIN_OFFSET, MAX_OFFSET, REAL_TOPIC, | left out: the broker's and the consumer's record of  |
| REAL_QID, TRAN_MSG, PGROUP, RECONSUME_TIME,  | the stored message (TRAN_MSG kept would even make    |
| TIMER_OUT_MS, TIMER_ENQUEUE_MS, ...          | the send a half message)                             |
| DELAY, TIMER_DELIVER_MS, TIMER_DELAY_MS,     | left out when REAL_TOPIC or TIMER_OUT_MS is in the   |
| TIMER_DELAY_SEC                              | map: a delay served already (a broker leaves these   |
|                                              | on the message it delivers), republished now, not    |
|                                              | delayed again; otherwise an invalid row (code 8): a  |
|                                              | delay is asked with `delay_level`, `deliver_time` or |
|                                              | `delay_ms`, and never dropped silently               |
| __SHARDINGKEY                                | the row's sharding key, as the `sharding_key` column |
|                                              | gives it; left out when that column is given         |

Names left out are counted, never silent: the DeliveryReport's ``reserved_left_out_rows`` (rows
sent with names left out) and ``reserved_left_out`` (rows per name), in the batch's report line.

Other columns are ignored (and named once in the log).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from ..errors import SchemaError

log = logging.getLogger("spark_rocketmq.spark")

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    accepted: str
    fix: str

    def check(self, dtype: DataType) -> bool:
        if self.name == "body":
            return isinstance(dtype, (BinaryType, StringType))
        if self.name in ("topic", "tags", "sharding_key"):
            return isinstance(dtype, StringType)
        if self.name == "keys":
            return isinstance(dtype, StringType) or (
                isinstance(dtype, ArrayType) and isinstance(dtype.elementType, StringType)
            )
        if self.name == "properties":
            return (
                isinstance(dtype, MapType)
                and isinstance(dtype.keyType, StringType)
                and isinstance(dtype.valueType, StringType)
            )
        if self.name in ("delay_level", "delay_ms", "queue_id"):
            return isinstance(dtype, _INTEGRAL)
        if self.name == "deliver_time":
            return isinstance(dtype, (TimestampType, LongType))
        raise AssertionError(self.name)


COLUMNS: dict[str, ColumnSpec] = {
    c.name: c
    for c in (
        ColumnSpec(
            "body", "binary or string", "cast it (col('body').cast('binary')) or build it with to_json(struct(*))"
        ),
        ColumnSpec("topic", "string", "cast it to string or set the topic option"),
        ColumnSpec("tags", "string", "cast it to string"),
        ColumnSpec("keys", "string or array<string>", "cast it to string or array<string>"),
        ColumnSpec("properties", "map<string,string>", "build it with create_map / map_from_arrays of strings"),
        ColumnSpec("delay_level", "tinyint, smallint, int or bigint (1..18)", "cast it to int"),
        ColumnSpec(
            "deliver_time",
            "timestamp, or bigint (epoch milliseconds)",
            "cast it to timestamp (a timestamp_ntz: to_utc_timestamp(col, tz)) or to epoch ms as bigint",
        ),
        ColumnSpec("delay_ms", "tinyint, smallint, int or bigint (milliseconds)", "cast it to bigint"),
        ColumnSpec("sharding_key", "string", "cast it to string"),
        ColumnSpec("queue_id", "tinyint, smallint, int or bigint (0..queues-1)", "cast it to int"),
    )
}


@dataclass(frozen=True)
class MessageColumns:
    """The columns a sink reads, by field, as named in the DataFrame (None: absent)."""

    body: str
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    properties: str | None = None
    delay_level: str | None = None
    sharding_key: str | None = None
    deliver_time: str | None = None
    delay_ms: str | None = None
    queue_id: str | None = None

    def selected(self) -> list[str]:
        """The DataFrame columns to hand to the executors, in a fixed order."""
        return [c for c in self.as_dict().values() if c is not None]

    def as_dict(self) -> dict[str, str | None]:
        return {
            "body": self.body,
            "topic": self.topic,
            "tags": self.tags,
            "keys": self.keys,
            "properties": self.properties,
            "delay_level": self.delay_level,
            "sharding_key": self.sharding_key,
            "deliver_time": self.deliver_time,
            "delay_ms": self.delay_ms,
            "queue_id": self.queue_id,
        }


def resolve_columns(schema: StructType, topic_option: str | None, *, log_ignored: bool = True) -> MessageColumns:
    """Map a DataFrame schema to message fields; SchemaError names the column, type, accepted types and fix."""
    by_lower: dict[str, list[str]] = {}
    types: dict[str, DataType] = {}
    for f in schema.fields:
        by_lower.setdefault(f.name.lower(), []).append(f.name)
        types[f.name] = f.dataType
    found: dict[str, str] = {}
    for field_name, spec in COLUMNS.items():
        names = by_lower.get(field_name, [])
        if len(names) > 1:
            raise SchemaError(
                f"columns {names} all name the message field {field_name!r} (column names are case-insensitive "
                "here); drop or rename all but one"
            )
        if not names or (field_name == "topic" and topic_option is not None):
            continue
        name = names[0]
        dtype = types[name]
        if not spec.check(dtype):
            raise SchemaError(
                f"column {name!r} has type {dtype.simpleString()}; the sink accepts {spec.accepted} for "
                f"{field_name}: {spec.fix}"
            )
        found[field_name] = name
    if "body" not in found:
        raise SchemaError(
            f"no 'body' column (binary or string) among the columns {[f.name for f in schema.fields]}; "
            "add one, e.g. df.select(to_json(struct(*)).alias('body')) to send each row as JSON"
        )
    if topic_option is not None:
        found.pop("topic", None)
    elif "topic" not in found:
        raise SchemaError(
            "no topic: add a string column 'topic' (one topic per row) or set the topic option "
            "(topic='Orders', or .option('topic', 'Orders'))"
        )
    columns = MessageColumns(**found)
    ignored = [f.name for f in schema.fields if f.name not in columns.selected()]
    if ignored and log_ignored:
        log.info("RocketMQ sink ignores columns %s (not message fields)", ignored)
    return columns
