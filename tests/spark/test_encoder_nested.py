"""Every shape Spark gives the nested columns (keys array, properties map) encodes the same bytes.

Spark declares the elements of ``F.split(...)`` and ``F.array(<non-null columns>)`` non-null, map
values of ``F.create_map(<non-null columns>)`` non-null, and with
``spark.sql.execution.arrow.useLargeVarTypes`` sends large strings and large lists.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_rocketmq.protocol.message import decode_batch_body
from spark_rocketmq.spark.encoder import encode_rows
from spark_rocketmq.spark.message_ids import batch_context, uniq_keys
from spark_rocketmq.spark.schema import MessageColumns

CTX = batch_context("nested", 1, now_ms=1_700_000_000_000)
COLUMNS = MessageColumns(body="body", topic="topic", keys="keys", properties="properties")
ROWS = [
    {"body": b"a", "topic": "T", "keys": ["k1", "k2"], "properties": [("color", "blue"), ("size", "L")]},
    {"body": b"b", "topic": "T", "keys": ["only"], "properties": [("color", "red")]},
    {"body": b"c", "topic": "T", "keys": [], "properties": []},
]
WANT = [
    {"KEYS": "k1 k2", "color": "blue", "size": "L"},
    {"KEYS": "only", "color": "red"},
    {},
]


def _list(item: pa.DataType, *, large: bool, nullable: bool) -> pa.DataType:
    field = pa.field("element", item, nullable=nullable)
    return pa.large_list(field) if large else pa.list_(field)


def _map(item: pa.DataType, *, nullable: bool) -> pa.DataType:
    return pa.map_(pa.field("key", item, nullable=False), pa.field("value", item, nullable=nullable))


SHAPES = [
    pytest.param(large, nullable, id=f"{'large' if large else 'plain'}-{'nullable' if nullable else 'not-null'}")
    for large in (False, True)
    for nullable in (True, False)
]


def _encode(batch: pa.RecordBatch, columns: MessageColumns = COLUMNS) -> list[dict[str, str]]:
    enc = encode_rows(
        batch,
        columns,
        topic_option=None,
        ctx=CTX,
        partition=0,
        row_start=0,
        max_message_size=1 << 20,
        queue_count=lambda topic: 4,
    )
    assert enc.invalid_count == 0
    records = [r for g in enc.groups for r in decode_batch_body(enc.body(g.start, g.stop))]
    ids = uniq_keys(CTX, 0, 0, len(records))
    out = []
    for record, uniq in zip(records, ids, strict=True):
        props = dict(record.properties)
        assert props.pop("UNIQ_KEY") == uniq
        assert props.pop("WAIT") == "true"
        out.append(props)
    return out


@pytest.mark.parametrize(("large", "nullable"), SHAPES)
def test_keys_array_and_properties_map_of_every_shape(large: bool, nullable: bool) -> None:
    text = pa.large_string() if large else pa.string()
    schema = pa.schema(
        [
            ("body", pa.large_binary() if large else pa.binary()),
            ("topic", text),
            ("keys", _list(text, large=large, nullable=nullable)),
            ("properties", _map(text, nullable=nullable)),
        ]
    )
    batch = pa.RecordBatch.from_pylist(ROWS, schema=schema)
    assert _encode(batch) == WANT


@pytest.mark.parametrize("nullable", [True, False])
def test_large_list_of_plain_strings_and_plain_list_of_large_strings(nullable: bool) -> None:
    for keys_type in (
        _list(pa.string(), large=True, nullable=nullable),
        _list(pa.large_string(), large=False, nullable=nullable),
    ):
        schema = pa.schema([("body", pa.binary()), ("topic", pa.string()), ("keys", keys_type)])
        rows = [{k: r[k] for k in ("body", "topic", "keys")} for r in ROWS]
        batch = pa.RecordBatch.from_pylist(rows, schema=schema)
        got = _encode(batch, MessageColumns(body="body", topic="topic", keys="keys"))
        assert got == [{k: v for k, v in w.items() if k == "KEYS"} for w in WANT], keys_type


def test_null_keys_array_and_null_properties_map_add_no_property() -> None:
    schema = pa.schema(
        [
            ("body", pa.binary()),
            ("topic", pa.string()),
            ("keys", _list(pa.string(), large=False, nullable=False)),
            ("properties", _map(pa.string(), nullable=False)),
        ]
    )
    batch = pa.RecordBatch.from_pylist([{"body": b"x", "topic": "T", "keys": None, "properties": None}], schema=schema)
    assert _encode(batch) == [{}]
