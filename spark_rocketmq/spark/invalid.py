"""Why a row is not a valid message: the reason of each code the encoder marks (spark/encoder.py,
spark/row_properties.py), and the description of invalid rows (Python objects for those rows only) for
the report and dead letters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..protocol.message import MAX_DELAY_LEVEL, MAX_PROPERTIES_LENGTH
from .schema import MessageColumns

if TYPE_CHECKING:
    from .encoder import EncodedRows, TopicChecker

__all__ = ["REASONS", "InvalidRow", "invalid_rows"]

# Why a row is invalid: code -> (message field, what is wrong and what to do).
REASONS: dict[int, tuple[str, str]] = {
    1: ("body", "body is null; give every row a body"),
    2: ("body", "body is empty; RocketMQ refuses empty bodies"),
    3: ("topic", "topic is null; give every row a topic or set the topic option"),
    4: ("topic", "topic is not a valid topic name"),
    5: ("tags", "tags contain \\x01 or \\x02 (RocketMQ's property separators); remove those bytes"),
    6: ("keys", "keys contain \\x01 or \\x02 (RocketMQ's property separators); remove those bytes"),
    7: ("properties", "a property name or value is null or blank; use non-blank strings"),
    8: (
        "properties",
        "a property asks for a delay (DELAY, TIMER_DELIVER_MS, TIMER_DELAY_MS or TIMER_DELAY_SEC), which the sink "
        "gives only from its columns: use delay_level, deliver_time or delay_ms, or drop the property (a row read "
        "from RocketMQ after its delay, REAL_TOPIC or TIMER_OUT_MS beside it, is published at once without it)",
    ),
    9: ("properties", "a property name or value contains \\x01 or \\x02; remove those bytes"),
    10: ("delay_level", f"delay_level is outside 1..{MAX_DELAY_LEVEL}; use null or 0 for no delay"),
    11: ("sharding_key", "sharding_key contains \\x01 or \\x02; remove those bytes"),
    12: ("properties", f"properties take more than {MAX_PROPERTIES_LENGTH} bytes; shorten keys, tags or properties"),
    13: ("body", "the message is over max_message_size; split the payload or raise max_message_size"),
    14: (
        "delay_level",
        "a delayed row cannot be published exactly once (a broker never delays a half message); "
        "publish delayed rows with delivery_guarantee=at_least_once, or set delay_level to null or 0",
    ),
    15: (
        "deliver_time",
        "more than one of delay_level, deliver_time and delay_ms is set; give a row one of them at most",
    ),
    16: ("delay_ms", "delay_ms is negative; use null or 0 for no delay"),
    17: ("deliver_time", "deliver_time is before 1970 (negative epoch milliseconds)"),
    18: (
        "deliver_time",
        "a timer row (deliver_time or delay_ms) is not published exactly once by this sink; publish timer rows "
        "with delivery_guarantee=at_least_once, or set deliver_time and delay_ms to null",
    ),
    19: (
        "queue_id",
        "queue_id is not one of the topic's writable queues (0..queues-1); use null to let the sink choose",
    ),
}


@dataclass(frozen=True)
class InvalidRow:
    partition: int
    row: int
    column: str
    reason: str

    def describe(self) -> str:
        return f"partition {self.partition} row {self.row}: column {self.column}: {self.reason}"


def invalid_rows(
    encoded: EncodedRows,
    batch: pa.RecordBatch,
    columns: MessageColumns,
    *,
    partition: int,
    row_start: int,
    limit: int,
    topics: TopicChecker,
) -> list[InvalidRow]:
    """Describe up to `limit` invalid rows (Python objects only for those)."""
    out: list[InvalidRow] = []
    for i in np.flatnonzero(encoded.invalid_codes)[:limit].tolist():
        code = int(encoded.invalid_codes[i])
        column, reason = REASONS[code]
        if code == 18:
            column = " or ".join(c for c in (columns.deliver_time, columns.delay_ms) if c is not None)
        if code == 15:
            column = " and ".join(
                c for c in (columns.delay_level, columns.deliver_time, columns.delay_ms) if c is not None
            )
        if code == 4 and columns.topic is not None:
            topic = batch.column(columns.topic)[i].as_py()
            reason = topics.problem(topic) or reason
        if code == 19 and columns.queue_id is not None:
            topic = encoded.topic_names[int(encoded.topic_index[i])]
            count = encoded.queue_counts.get(topic, 0)
            reason = (
                f"queue_id {batch.column(columns.queue_id)[i].as_py()} is not a writable queue of topic {topic}, "
                f"which has {count} (queue_id 0..{count - 1}); use an id in that range, or null to let the sink choose"
            )
        out.append(InvalidRow(partition, row_start + i, getattr(columns, column, None) or column, reason))
    return out
