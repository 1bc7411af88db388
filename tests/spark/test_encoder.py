"""The vectorised encoder against the reference encoder (protocol.message), without Spark."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.protocol.message import (
    PROPERTY_SHARDING_KEY,
    Message,
    decode_batch_body,
    encode_batch_body,
    encode_properties,
    message_properties,
)
from spark_rocketmq.protocol.uniq_id import uniq_id_time_offset
from spark_rocketmq.spark.encoder import encode_rows
from spark_rocketmq.spark.message_ids import batch_context, uniq_keys
from spark_rocketmq.spark.schema import MessageColumns

CTX = batch_context("query-1", 7, now_ms=1_700_000_000_000)
ALL = MessageColumns(
    body="body",
    topic="topic",
    tags="tags",
    keys="keys",
    properties="properties",
    delay_level="delay_level",
    sharding_key="sharding_key",
)


def _batch(rows: list[dict]) -> pa.RecordBatch:
    schema = pa.schema(
        [
            ("body", pa.binary()),
            ("topic", pa.string()),
            ("tags", pa.string()),
            ("keys", pa.list_(pa.string())),
            ("properties", pa.map_(pa.string(), pa.string())),
            ("delay_level", pa.int32()),
            ("sharding_key", pa.string()),
        ]
    )
    full = [{name: r.get(name) for name in schema.names} for r in rows]
    return pa.RecordBatch.from_pylist(full, schema=schema)


def _reference(rows: list[dict], ids: list[str]) -> bytes:
    records = []
    for r, uniq in zip(rows, ids, strict=True):
        msg = Message(
            topic=r["topic"],
            body=r["body"],
            tags=r.get("tags"),
            keys=r.get("keys"),
            properties=dict(r["properties"]) if r.get("properties") else None,
            delay_level=r.get("delay_level") or 0,
            _extra={PROPERTY_SHARDING_KEY: r["sharding_key"]} if r.get("sharding_key") else None,
        )
        props = encode_properties(message_properties(msg, uniq)).encode()
        records.append((0, r["body"], props))
    return encode_batch_body(records)


def _encode(batch: pa.RecordBatch, **kw):
    args = dict(
        topic_option=None,
        ctx=CTX,
        partition=3,
        row_start=0,
        max_message_size=4 * 1024 * 1024,
        queue_count=lambda topic: 4,
    )
    args.update(kw)
    return encode_rows(batch, ALL, **args)


def test_bytes_equal_the_reference_encoder_for_every_fixed_property() -> None:
    rows = [
        {"body": b"plain", "topic": "T"},
        {"body": b"tagged", "topic": "T", "tags": "TagA"},
        {"body": b"keyed", "topic": "T", "keys": ["k1", "k2"]},
        {"body": b"delayed", "topic": "T", "delay_level": 3},
        {"body": b"all", "topic": "T", "tags": "x", "keys": ["a"], "delay_level": 18},
        {"body": "ünïcode".encode(), "topic": "T", "tags": "标签"},
    ]
    enc = _encode(_batch(rows))
    assert enc.invalid_count == 0
    # Delayed rows (3, 4) are sent one by one (a broker ignores DELAY inside a batch): own group.
    groups = [(g.topic, g.queue_slot, g.start, g.stop, g.single) for g in enc.groups]
    assert groups == [("T", None, 0, 4, False), ("T", None, 4, 6, True)]
    assert [(a, b) for _g, a, b in enc.request_slices(1 << 20)] == [(0, 4), (4, 5), (5, 6)]
    ids = uniq_keys(CTX, 3, 0, len(rows))
    order = [0, 1, 2, 5, 3, 4]
    assert enc.body(0, 6) == _reference([rows[i] for i in order], [ids[i] for i in order])
    delayed = enc.message(4, "T")
    assert (delayed.body, delayed.delay_level, delayed.uniq_key) == (b"delayed", 3, ids[3])
    assert enc.message(5, "T").keys == "a" and enc.message(5, "T").tags == "x"


def test_user_properties_and_sharding_key_decode_to_the_same_messages() -> None:
    rows = [
        {"body": b"a", "topic": "T", "properties": [("p1", "v1"), ("p2", "v2")], "sharding_key": "user-1"},
        {"body": b"b", "topic": "T", "properties": [], "tags": "t"},
        {"body": b"c", "topic": "T", "properties": [("only", "one")]},
    ]
    enc = _encode(_batch(rows))
    ids = uniq_keys(CTX, 3, 0, 3)
    # Group order: unsharded rows first (in row order), then the sharded row's queue.
    got = [r for g in enc.groups for r in decode_batch_body(enc.body(g.start, g.stop))]
    want_order = [1, 2, 0]
    want = decode_batch_body(_reference([rows[i] for i in want_order], [ids[i] for i in want_order]))
    assert got == want
    assert got[2].properties[PROPERTY_SHARDING_KEY] == "user-1"
    assert got[0].properties == {"TAGS": "t", "WAIT": "true", "UNIQ_KEY": ids[1]}


def test_rows_are_grouped_by_topic_and_sharding_queue_keeping_row_order() -> None:
    rows = [
        {"body": f"{i}".encode(), "topic": "A" if i % 3 else "B", "sharding_key": f"k{i % 2}" if i % 5 else None}
        for i in range(40)
    ]
    enc = _encode(_batch(rows))
    seen = []
    for g in enc.groups:
        bodies = [int(r.body) for r in decode_batch_body(enc.body(g.start, g.stop))]
        assert bodies == sorted(bodies)
        for b in bodies:
            src = rows[b]
            assert src["topic"] == g.topic
            assert (g.queue_slot is None) == (src["sharding_key"] is None)
        seen += bodies
    assert sorted(seen) == list(range(40))
    slots = {(g.topic, g.queue_slot) for g in enc.groups if g.queue_slot is not None}
    # Java: "k0".hashCode() == 3365, "k1".hashCode() == 3366 (SelectMessageQueueByHash)
    assert slots == {(t, 3365 % 4) for t in "AB"} | {(t, 3366 % 4) for t in "AB"}


def test_request_slices_never_exceed_the_limit() -> None:
    rows = [{"body": bytes(100 + i), "topic": "T"} for i in range(200)]
    enc = _encode(_batch(rows))
    slices = enc.request_slices(2000)
    assert len(slices) > 10
    total = 0
    for _g, a, b in slices:
        body = enc.body(a, b)
        assert len(body) <= 2000
        total += len(decode_batch_body(body))
    assert total == 200


@pytest.mark.parametrize(
    ("row", "column", "needle"),
    [
        ({"body": None, "topic": "T"}, "body", "null"),
        ({"body": b"", "topic": "T"}, "body", "empty"),
        ({"body": b"x", "topic": None}, "topic", "null"),
        ({"body": b"x", "topic": "bad topic!"}, "topic", "topic"),
        ({"body": b"x", "topic": "T", "tags": "a\x01b"}, "tags", "\\x01"),
        ({"body": b"x", "topic": "T", "keys": ["a\x02"]}, "keys", "\\x02"),
        ({"body": b"x", "topic": "T", "properties": [("DELAY", "3")]}, "properties", "delay_level"),
        ({"body": b"x", "topic": "T", "properties": [("TIMER_DELIVER_MS", "1")]}, "properties", "deliver_time"),
        ({"body": b"x", "topic": "T", "properties": [("p", " ")]}, "properties", "blank"),
        ({"body": b"x", "topic": "T", "delay_level": 19}, "delay_level", "1..18"),
        ({"body": b"x" * 5000, "topic": "T"}, "body", "max_message_size"),
    ],
)
def test_invalid_rows_are_left_out_with_a_reason(row: dict, column: str, needle: str) -> None:
    from spark_rocketmq.spark.encoder import TopicChecker
    from spark_rocketmq.spark.invalid import invalid_rows

    rows = [{"body": b"ok", "topic": "T"}, row, {"body": b"ok2", "topic": "T"}]
    batch = _batch(rows)
    enc = _encode(batch, max_message_size=4096, row_start=100)
    assert enc.invalid_count == 1
    assert [r.body for r in decode_batch_body(enc.body(0, len(enc.records)))] == [b"ok", b"ok2"]
    (bad,) = invalid_rows(enc, batch, ALL, partition=3, row_start=100, limit=10, topics=TopicChecker())
    assert (bad.partition, bad.row, bad.column) == (3, 101, column)
    assert needle in bad.reason


def test_deterministic_ids_are_unique_across_chunks_and_keep_the_time_field() -> None:
    a = uniq_keys(CTX, 0, 65_530, 20)
    assert a == uniq_keys(CTX, 0, 65_530, 20)
    assert len(set(a)) == 20
    assert all(len(i) == 32 and i == i.upper() for i in a)
    assert {uniq_id_time_offset(i) for i in a} == {CTX.time_field}
    # Counters wrap at 65536; the hash part changes with row_index >> 16.
    assert a[5][28:] == "FFFF" and a[6][28:] == "0000" and a[5][:20] != a[6][:20]
    other = uniq_keys(batch_context("query-1", 8, now_ms=1_700_000_000_000), 0, 65_530, 20)
    assert not set(a) & set(other)
    many = uniq_keys(CTX, 1, 0, 200_000)
    assert len(set(many)) == 200_000


def test_large_string_columns_are_accepted() -> None:
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["b1", "b2"], pa.large_string()), pa.array(["T", "T"], pa.large_string())], names=["body", "topic"]
    )
    enc = encode_rows(
        batch,
        MessageColumns(body="body", topic="topic"),
        topic_option=None,
        ctx=CTX,
        partition=0,
        row_start=0,
        max_message_size=1024,
        queue_count=lambda t: 1,
    )
    assert [r.body for r in decode_batch_body(enc.body(0, 2))] == [b"b1", b"b2"]
    assert np.count_nonzero(enc.invalid_codes) == 0


@settings(max_examples=60, deadline=None)
@given(
    partition=st.integers(0, 5),
    start=st.integers(0, 3 * 65_536),
    count=st.integers(0, 140_000),
)
def test_a_rows_id_is_its_layout_whatever_rows_are_encoded_with_it(partition: int, start: int, count: int) -> None:
    # [10 bytes: blake2b(namespace, batch, partition, row >> 16)][4: time field][2: row & 0xFFFF], in hex.
    def expected(row: int) -> str:
        text = f"{CTX.id_namespace}\x00{CTX.batch_id}\x00{partition}\x00{row >> 16}".encode()
        head = hashlib.blake2b(text, digest_size=10).digest() + CTX.time_field.to_bytes(4, "big")
        return (head + (row & 0xFFFF).to_bytes(2, "big")).hex().upper()

    ids = uniq_keys(CTX, partition, start, count)
    assert len(ids) == count
    for i in {count // 2, count - 1, *range(0, count, 9_973)} if count else ():
        assert ids[i] == expected(start + i)
    if count > 1:  # the same rows split elsewhere get the same ids
        cut = count // 3
        assert uniq_keys(CTX, partition, start, cut) + uniq_keys(CTX, partition, start + cut, count - cut) == ids


@settings(max_examples=80, deadline=None)
@given(
    bodies=st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=30),
    row_start=st.sampled_from([0, 17, 65_530, 3 * 65_536 - 2]),
    topic_column=st.booleans(),
)
def test_rows_with_only_a_body_and_topic_equal_the_reference_encoder(
    bodies: list[bytes | None], row_start: int, topic_column: bool
) -> None:
    # No column gives rows properties of their own: every row's are WAIT and its UNIQ_KEY.
    rows = [{"body": b, "topic": "T"} for b in bodies]
    columns = MessageColumns(body="body", topic="topic" if topic_column else None)
    batch = pa.RecordBatch.from_pylist(rows, schema=pa.schema([("body", pa.binary()), ("topic", pa.string())]))
    enc = encode_rows(
        batch,
        columns,
        topic_option=None if topic_column else "T",
        ctx=CTX,
        partition=2,
        row_start=row_start,
        max_message_size=100,
        queue_count=lambda topic: 4,
    )
    ids = uniq_keys(CTX, 2, row_start, len(rows))
    # A record is 73 bytes and its body: bodies of 28 bytes or more are over max_message_size.
    valid = [i for i, r in enumerate(rows) if r["body"] and len(_reference([r], [ids[i]])) <= 100]
    assert enc.invalid_count == len(rows) - len(valid)
    assert enc.body(0, len(enc.records)) == _reference([rows[i] for i in valid], [ids[i] for i in valid])
    assert [(g.topic, g.single) for g in enc.groups] == ([("T", False)] if valid else [])
