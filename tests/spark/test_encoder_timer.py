"""Timer rows in the Arrow encoder: deliver_time / delay_ms become TIMER_* properties of rows sent alone."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from spark_rocketmq.protocol.message import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as UNIQ_KEY,
)
from spark_rocketmq.protocol.message import (
    Message,
    decode_batch_body,
    decode_properties,
    encode_properties,
    message_properties,
)
from spark_rocketmq.protocol.requests import message_request
from spark_rocketmq.spark.encoder import TopicChecker, encode_rows
from spark_rocketmq.spark.invalid import invalid_rows
from spark_rocketmq.spark.message_ids import batch_context, uniq_keys
from spark_rocketmq.spark.row_fields import SINGLE_BLOCK_ROWS
from spark_rocketmq.spark.schema import MessageColumns

CTX = batch_context("query-1", 7, now_ms=1_700_000_000_000)
COLS = MessageColumns(body="body", topic="topic", delay_level="lvl", deliver_time="due_at", delay_ms="wait")
UTC = dt.UTC
TIMESTAMP_US = pa.timestamp("us", tz="UTC")


def _encode(rows: list[dict], due_type: pa.DataType = TIMESTAMP_US):
    schema = pa.schema(
        [("body", pa.binary()), ("topic", pa.string()), ("lvl", pa.int32()), ("due_at", due_type), ("wait", pa.int64())]
    )
    batch = pa.RecordBatch.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)
    enc = encode_rows(
        batch, COLS, topic_option=None, ctx=CTX, partition=0, row_start=100,
        max_message_size=1 << 20, queue_count=lambda t: 4,
    )  # fmt: skip
    return batch, enc


def test_timer_rows_go_alone_with_their_property_and_id() -> None:
    due = dt.datetime(2026, 11, 25, 3, 0, 0, 123456, tzinfo=UTC)
    due_ms = int(due.timestamp() * 1000)  # 123456 us -> 123 ms (floored)
    rows = [
        {"body": b"plain", "topic": "T"},
        {"body": b"at", "topic": "T", "due_at": due},
        {"body": b"in", "topic": "T", "wait": 1500},
        {"body": b"zero-wait", "topic": "T", "wait": 0},
        {"body": b"level", "topic": "T", "lvl": 2},
    ]
    _, enc = _encode(rows)
    assert enc.invalid_count == 0
    assert [(g.start, g.stop, g.single) for g in enc.groups] == [(0, 2, False), (2, 5, True)]
    ids = uniq_keys(CTX, 0, 100, 5)
    at, wait, level = (enc.message(i, "T") for i in (2, 3, 4))
    assert (at.body, at.deliver_time_ms, at.delay_time_ms, at.uniq_key) == (b"at", due_ms, None, ids[1])
    assert (wait.body, wait.delay_time_ms, wait.deliver_time_ms, wait.uniq_key) == (b"in", 1500, None, ids[2])
    assert (level.body, level.delay_level, level.is_timer) == (b"level", 2, False)
    assert [int(enc.record_rows[i]) for i in range(5)] == [0, 3, 1, 2, 4]
    # The record's properties are what the producer writes for the same Message (HashMap order).
    want = encode_properties(message_properties(Message("T", b"at", deliver_time_ms=due_ms), ids[1]))
    assert enc.body(2, 3).endswith(want.encode())


def test_epoch_millisecond_longs_are_delivery_times() -> None:
    _, enc = _encode([{"body": b"x", "topic": "T", "due_at": 1_795_570_000_123}], pa.int64())
    assert enc.message(0, "T").deliver_time_ms == 1_795_570_000_123


def test_bad_timer_rows_name_their_row_and_column() -> None:
    rows = [
        {"body": b"ok", "topic": "T"},
        {"body": b"both", "topic": "T", "lvl": 3, "wait": 10},
        {"body": b"neg", "topic": "T", "wait": -1},
        {"body": b"pre-1970", "topic": "T", "due_at": -5},
        {"body": b"two-times", "topic": "T", "due_at": 1_795_570_000_000, "wait": 5},
    ]
    batch, enc = _encode(rows, pa.int64())
    assert enc.invalid_count == 4
    got = [
        r.describe()
        for r in invalid_rows(enc, batch, COLS, partition=0, row_start=100, limit=10, topics=TopicChecker())
    ]
    assert got[0].startswith("partition 0 row 101: column lvl and due_at and wait: more than one of")
    assert got[1].startswith("partition 0 row 102: column wait: delay_ms is negative")
    assert got[2].startswith("partition 0 row 103: column due_at: deliver_time is before 1970")
    assert got[3].startswith("partition 0 row 104: column lvl and due_at and wait: more than one of")


def test_exactly_once_refuses_timer_rows() -> None:
    schema = pa.schema([("body", pa.binary()), ("topic", pa.string()), ("due_at", pa.int64()), ("wait", pa.int64())])
    rows = [
        {"body": b"a", "topic": "T"},
        {"body": b"b", "topic": "T", "due_at": 1},
        {"body": b"c", "topic": "T", "wait": 5},
    ]
    batch = pa.RecordBatch.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)
    cols = MessageColumns(body="body", topic="topic", deliver_time="due_at", delay_ms="wait")
    enc = encode_rows(
        batch, cols, topic_option=None, ctx=CTX, partition=0, row_start=0,
        max_message_size=1 << 20, queue_count=lambda t: 4, transactional=True,
    )  # fmt: skip
    got = [
        r.describe() for r in invalid_rows(enc, batch, cols, partition=0, row_start=0, limit=5, topics=TopicChecker())
    ]
    assert len(got) == 2 and all("is not published exactly once" in g for g in got)
    assert got[0].startswith("partition 0 row 1: column due_at") and got[1].startswith(
        "partition 0 row 2: column due_at"
    )


def test_a_row_sent_alone_carries_the_fields_and_id_of_its_batch_record() -> None:
    """The single-row request is built from the row's fields, not from its batch record: both say the same."""
    schema = pa.schema(
        [
            ("body", pa.string()),
            ("topic", pa.string()),
            ("tags", pa.string()),
            ("keys", pa.list_(pa.string())),
            ("properties", pa.map_(pa.string(), pa.string())),
            ("lvl", pa.int32()),
            ("due_at", TIMESTAMP_US),
            ("wait", pa.int64()),
            ("sharding_key", pa.string()),
        ]
    )
    due = dt.datetime(2026, 11, 25, 3, 0, 0, 999999, tzinfo=UTC)
    rows = [
        {"body": "ünï", "topic": "T", "tags": "TagA", "keys": ["k1", "k2"], "lvl": 3},
        {"body": "at", "topic": "T", "tags": "", "keys": ["a", None], "due_at": due, "sharding_key": "u-1"},
        {"body": "in", "topic": "T", "keys": [], "properties": [("p1", "v1"), ("p2", "v2")], "wait": 2500},
        {"body": "zero", "topic": "T", "properties": [], "wait": 0, "lvl": 18, "sharding_key": ""},
    ]
    batch = pa.RecordBatch.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)
    cols = MessageColumns(
        body="body", topic="topic", tags="tags", keys="keys", properties="properties",
        delay_level="lvl", deliver_time="due_at", delay_ms="wait", sharding_key="sharding_key",
    )  # fmt: skip
    enc = encode_rows(
        batch, cols, topic_option=None, ctx=CTX, partition=2, row_start=70_000,
        max_message_size=1 << 20, queue_count=lambda t: 4,
    )  # fmt: skip
    assert enc.invalid_count == 0
    singles = [(g, a) for g, a, _ in enc.request_slices(1 << 20) if g.single]
    assert len(singles) == len(rows)
    for g, i in singles:
        (record,) = decode_batch_body(enc.body(i, i + 1))
        req = message_request(enc.message(i, g.topic), "", max_message_size=1 << 20, compress_over=1 << 20)
        timer = "TIMER_DELAY_MS" in record.properties or "TIMER_DELIVER_MS" in record.properties
        assert (req.body, req.msg_id, req.timer) == (record.body, record.properties[UNIQ_KEY], timer)
        assert decode_properties(req.properties) == record.properties


def test_rows_sent_alone_keep_their_own_fields_across_conversion_blocks() -> None:
    rows = [{"body": f"r{i}".encode(), "topic": "T", "wait": (i + 1) * 10 if i % 3 else None} for i in range(3100)]
    _, enc = _encode(rows)
    ids = uniq_keys(CTX, 0, 100, len(rows))
    singles = [(a, int(enc.record_rows[a])) for g, a, _ in enc.request_slices(1 << 20) if g.single]
    assert len(singles) == sum(1 for r in rows if r["wait"]) > 2 * SINGLE_BLOCK_ROWS
    for index, row in [*singles, *reversed(singles[:5])]:  # in order, then back to the first block
        msg = enc.message(index, "T")
        assert (msg.body, msg.delay_time_ms, msg.uniq_key) == (rows[row]["body"], rows[row]["wait"], ids[row])
    plain = next(a for g, a, _ in enc.request_slices(1 << 20) if not g.single)
    with pytest.raises(ValueError, match="not a row sent alone"):
        enc.message(plain, "T")
