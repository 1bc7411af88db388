"""Reserved names in a row's properties map (a row read with format("rocketmq") holds every property the
broker stored): left out and counted, a delay not yet served refused, a __SHARDINGKEY kept as the key."""

from __future__ import annotations

import pyarrow as pa

from spark_rocketmq.client.config import ProducerConfig
from spark_rocketmq.protocol.message import (
    PROPERTY_SHARDING_KEY,
    Message,
    decode_batch_body,
    message_properties,
)
from spark_rocketmq.spark.encoder import EncodedRows, TopicChecker, encode_rows
from spark_rocketmq.spark.invalid import invalid_rows
from spark_rocketmq.spark.job import WriteJob
from spark_rocketmq.spark.message_ids import batch_context, uniq_keys
from spark_rocketmq.spark.options import SinkOptions
from spark_rocketmq.spark.report import DeliveryReport, PartitionSummary
from spark_rocketmq.spark.schema import MessageColumns
from tests.spark.test_writer import StandInProducer, run

CTX = batch_context("reserved", 2, now_ms=1_700_000_000_000)
COLUMNS = MessageColumns(body="body", tags="tags", keys="keys", properties="properties")
#: What a consumer of a message sent with tags, keys and two user properties, delayed by level 3, sees
#: (MessageExt.getProperties()): the broker's and the consumer's own beside the user's.
READ = [
    ("UNIQ_KEY", "7F000001000118B4AAC2..."),
    ("WAIT", "true"),
    ("TAGS", "TagA"),
    ("KEYS", "k1 k2"),
    ("CLUSTER", "DefaultCluster"),
    ("MIN_OFFSET", "0"),
    ("MAX_OFFSET", "42"),
    ("DELAY", "3"),
    ("REAL_TOPIC", "Orders"),
    ("REAL_QID", "1"),
    ("TRAN_MSG", "true"),
    ("PGROUP", "txn-group"),
    ("TRACE_ON", "true"),
    ("color", "blue"),
    ("origin", "eu-west-1"),
]


def _batch(rows: list[dict], **extra: pa.DataType) -> pa.RecordBatch:
    schema = pa.schema(
        [
            ("body", pa.binary()),
            ("tags", pa.string()),
            ("keys", pa.list_(pa.string())),
            ("properties", pa.map_(pa.string(), pa.string())),
            *extra.items(),
        ]
    )
    return pa.RecordBatch.from_pylist([{n: r.get(n) for n in schema.names} for r in rows], schema=schema)


def _encode(batch: pa.RecordBatch, columns: MessageColumns = COLUMNS, **kw: object) -> EncodedRows:
    return encode_rows(
        batch,
        columns,
        topic_option="Other",
        ctx=CTX,
        partition=0,
        row_start=0,
        max_message_size=1 << 20,
        queue_count=lambda topic: 4,
        **kw,  # type: ignore[arg-type]
    )


def _records(enc: EncodedRows) -> list[dict[str, str]]:
    return [dict(r.properties) for g in enc.groups for r in decode_batch_body(enc.body(g.start, g.stop))]


def test_a_reserved_name_is_left_out_and_counted() -> None:
    enc = _encode(_batch([{"body": b"a", "properties": [("KEYS", "v"), ("color", "blue")]}, {"body": b"b"}]))
    assert enc.invalid_count == 0
    (uniq_a, uniq_b) = uniq_keys(CTX, 0, 0, 2)
    assert _records(enc) == [
        {"WAIT": "true", "UNIQ_KEY": uniq_a, "color": "blue"},
        {"WAIT": "true", "UNIQ_KEY": uniq_b},
    ]
    assert (enc.reserved_left_out_rows, enc.reserved_left_out) == (1, {"KEYS": 1})


def test_a_read_row_keeps_its_body_keys_tags_and_user_properties_only() -> None:
    rows = [
        {"body": b"read", "tags": "TagA", "keys": ["k1", "k2"], "properties": READ},
        {"body": b"plain", "properties": [("color", "red")]},
    ]
    enc = _encode(_batch(rows))
    assert enc.invalid_count == 0
    assert [g.single for g in enc.groups] == [False]  # DELAY served already: published now, in the batch
    records = [r for g in enc.groups for r in decode_batch_body(enc.body(g.start, g.stop))]
    uniq = uniq_keys(CTX, 0, 0, 2)
    assert [r.body for r in records] == [b"read", b"plain"]
    assert dict(records[0].properties) == {
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "WAIT": "true",
        "UNIQ_KEY": uniq[0],
        "color": "blue",
        "origin": "eu-west-1",
    }
    # The properties the client's own encoder gives the row's columns and user properties.
    want = message_properties(_message(b"read", "TagA", "k1 k2", {"color": "blue", "origin": "eu-west-1"}), uniq[0])
    assert dict(records[0].properties) == want
    assert enc.reserved_left_out_rows == 1
    left = {n for n, _ in READ if n not in ("color", "origin")}
    assert enc.reserved_left_out == dict.fromkeys(left, 1)


def _message(body: bytes, tags: str, keys: str, props: dict[str, str]) -> Message:
    return Message(topic="Other", body=body, tags=tags, keys=keys, properties=props)


def test_a_delay_or_delivery_time_not_yet_served_makes_the_row_invalid() -> None:
    rows = [
        {"body": b"asks", "properties": [("DELAY", "3"), ("color", "blue")]},
        {"body": b"asks-timer", "properties": [("TIMER_DELAY_MS", "5000")]},
        {"body": b"fired", "properties": [("TIMER_DELIVER_MS", "1"), ("TIMER_OUT_MS", "0"), ("TIMER_DEQUEUE_MS", "2")]},
        {"body": b"delayed", "properties": [("DELAY", "2"), ("REAL_TOPIC", "T"), ("REAL_QID", "0")]},
    ]
    batch = _batch(rows)
    enc = _encode(batch)
    assert enc.invalid_count == 2 and enc.invalid_codes.tolist() == [8, 8, 0, 0]
    assert [r.body for g in enc.groups for r in decode_batch_body(enc.body(g.start, g.stop))] == [b"fired", b"delayed"]
    # Invalid rows are not counted as left out; the two sent are, with the names left out of each.
    assert enc.reserved_left_out_rows == 2
    assert enc.reserved_left_out == {
        "DELAY": 1,
        "REAL_QID": 1,
        "REAL_TOPIC": 1,
        "TIMER_DELIVER_MS": 1,
        "TIMER_DEQUEUE_MS": 1,
        "TIMER_OUT_MS": 1,
    }
    bad = invalid_rows(enc, batch, COLUMNS, partition=0, row_start=0, limit=5, topics=TopicChecker())
    assert [b.column for b in bad] == ["properties", "properties"]
    assert "delay_level, deliver_time or delay_ms" in bad[0].reason


def test_a_sharding_key_in_the_map_is_the_rows_key_unless_a_column_gives_one() -> None:
    rows = [
        {"body": b"k", "properties": [(PROPERTY_SHARDING_KEY, "k0"), ("color", "blue")]},
        {"body": b"free", "properties": [("color", "red")]},
    ]
    enc = _encode(_batch(rows))
    assert enc.invalid_count == 0
    # Java: "k0".hashCode() == 3365 (SelectMessageQueueByHash over 4 queues).
    assert [(g.queue_slot, g.stop - g.start) for g in enc.groups] == [(None, 1), (3365 % 4, 1)]
    assert [r.get(PROPERTY_SHARDING_KEY) for r in _records(enc)] == [None, "k0"]
    assert [r.get("color") for r in _records(enc)] == ["red", "blue"]
    assert (enc.reserved_left_out_rows, enc.reserved_left_out) == (0, {})  # the key is not left out

    columns = MessageColumns(body="body", properties="properties", sharding_key="sharding_key")
    batch = _batch([{**rows[0], "sharding_key": "col"}], sharding_key=pa.string())
    enc = _encode(batch, columns)
    assert _records(enc)[0][PROPERTY_SHARDING_KEY] == "col"
    assert enc.reserved_left_out == {PROPERTY_SHARDING_KEY: 1}


def test_rows_sent_alone_get_the_kept_properties_only() -> None:
    # exactly_once sends every row alone, as a Message built from its fields: reserved names left out.
    enc = _encode(_batch([{"body": b"read", "tags": "TagA", "properties": READ}]), transactional=True)
    assert enc.invalid_count == 0 and enc.groups[0].single
    msg = enc.message(0, "Other")
    assert msg.properties == {"color": "blue", "origin": "eu-west-1"} and msg.tags == "TagA"
    message_properties(msg, msg.uniq_key)  # the client's own check passes


def test_the_report_sums_partitions_and_names_the_left_out_properties() -> None:
    job = WriteJob(ProducerConfig(namesrv_addr="127.0.0.1:1", group="reserved"), SinkOptions(topic="T"), COLUMNS, CTX)
    parts = [
        run(StandInProducer(), [_batch([{"body": b"a", "properties": READ}, {"body": b"b"}])], job, partition=p)
        for p in (0, 1)
    ]
    assert parts[0].reserved_left_out_rows == 1 and parts[0].reserved_left_out["UNIQ_KEY"] == 1
    back = PartitionSummary.from_row(parts[1].to_record_batch().to_pylist()[0])
    assert back.reserved_left_out == parts[1].reserved_left_out
    report = DeliveryReport.from_summaries([parts[0], back], batch_id=2, seconds=0.1, on_invalid_row="fail")
    assert report.ok and report.reserved_left_out_rows == 2 and report.reserved_left_out["CLUSTER"] == 2
    assert list(report.reserved_left_out) == sorted(report.reserved_left_out)
    assert "; 2 rows' reserved properties left out (CLUSTER=2, DELAY=2, KEYS=2, " in report.line()
    plain = DeliveryReport.from_summaries(
        [run(StandInProducer(), [_batch([{"body": b"a", "properties": [("p", "v")]}])], job)],
        batch_id=3,
        seconds=0.1,
        on_invalid_row="fail",
    )
    assert plain.reserved_left_out_rows == 0 and "reserved" not in plain.line()
