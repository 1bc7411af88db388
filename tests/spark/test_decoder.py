"""The vectorised pull-body decoder against the reference decoder (protocol/stored.py), without Spark
except for one test that has Spark read decoded batches through a Python data source."""

from __future__ import annotations

import socket
import struct
import zlib
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.errors import ProtocolError
from spark_rocketmq.protocol.compression import UnsupportedCompressionError
from spark_rocketmq.protocol.message import encode_batch_body, encode_properties
from spark_rocketmq.protocol.stored import (
    MESSAGE_MAGIC_CODE,
    StoredMessage,
    decode_stored_message,
    decode_stored_messages,
    encode_stored_records,
)
from spark_rocketmq.spark.compat import supports_datasource
from spark_rocketmq.spark.decoder import (
    COMPRESSED_FLAG,
    INNER_BATCH_FLAG,
    NEED_UNWRAP_FLAG,
    decode_pull_bodies,
    decode_pull_body,
    without_namespace,
)
from spark_rocketmq.spark.read_schema import READ_DDL, READ_SCHEMA, read_struct_type

BORN = 1_700_000_000_123
STORED = 1_700_000_000_456


def _props(i: int, **extra: str) -> bytes:
    props = {"UNIQ_KEY": f"7F00000100002A9F{i:016X}", "KEYS": f"order-{i} user-{i % 7}", "TAGS": f"tag{i % 3}"}
    props.update({"WAIT": "true", **extra})
    return encode_properties(props).encode()


def _records(count: int = 5, *, topic: str = "orders", first_offset: int = 100, sys_flag: int = 0, **kw: object):
    items = kw.pop("items", None) or [(i % 4, f"body-{i}".encode() * (i + 1), _props(i)) for i in range(count)]
    data, _sizes = encode_stored_records(
        items,  # type: ignore[arg-type]
        topic=topic,
        queue_id=3,
        first_queue_offset=first_offset,
        commit_log_offset=kw.pop("commit_log_offset", 1 << 33),  # type: ignore[arg-type]
        sys_flag=sys_flag,
        born_timestamp=BORN,
        born_host=("10.0.0.7", 51234),
        store_timestamp=STORED,
        store_host=("192.168.1.20", 10911),
        reconsume_times=kw.pop("reconsume_times", 2),  # type: ignore[arg-type]
        extra_properties=b"CLUSTER\x01DefaultCluster",
    )
    return data


def _plain_records(items: list[tuple[int, bytes, bytes]]) -> bytes:
    """(flag, body, encoded properties) as records of topic T, queue 0, with no property added."""
    data, _ = encode_stored_records(
        items,
        topic="T",
        queue_id=0,
        first_queue_offset=0,
        commit_log_offset=0,
        sys_flag=0,
        born_timestamp=BORN,
        born_host=("1.2.3.4", 1),
        store_timestamp=STORED,
        store_host=("5.6.7.8", 2),
    )
    return data


def _expected(msg: StoredMessage, *, offset_msg_id: str | None = None) -> dict[str, object]:
    """What a row must hold for a stored message (decoded by the reference decoder)."""
    offset_id = offset_msg_id or msg.offset_msg_id
    return {
        "topic": msg.topic,
        "broker_name": "broker-a",
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "msg_id": msg.uniq_key or offset_id,
        "offset_msg_id": offset_id,
        "keys": msg.keys,
        "tags": msg.tags,
        "body": msg.decompressed_body(),
        "properties": list(msg.properties.items()),
        "born_timestamp": datetime.fromtimestamp(msg.born_timestamp / 1000, UTC),
        "store_timestamp": datetime.fromtimestamp(msg.store_timestamp / 1000, UTC),
        "born_host": _host(*msg.born_host),
        "store_host": _host(*msg.store_host),
        "reconsume_times": msg.reconsume_times,
        "flag": msg.flag,
        "sys_flag": msg.sys_flag & ~COMPRESSED_FLAG,
    }


def _host(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _rows(batch: pa.RecordBatch) -> list[dict[str, object]]:
    assert batch.schema.equals(READ_SCHEMA)
    batch.validate(full=True)
    return batch.to_pylist()


def test_every_column_matches_the_reference_decoder() -> None:
    data = _records(40)
    rows = _rows(decode_pull_body(data, broker_name="broker-a"))
    assert rows == [_expected(m) for m in decode_stored_messages(data)]
    assert rows[1]["keys"] == ["order-1", "user-1"] and rows[1]["tags"] == "tag1"
    assert rows[0]["born_timestamp"].timestamp() * 1000 == BORN


def test_records_without_properties_keys_or_tags() -> None:
    items = [
        (0, b"bare", b""),
        (1, b"only-tags", encode_properties({"TAGS": "a"}).encode()),
        (2, b"spaces", encode_properties({"KEYS": " a  b ", "UNIQ_KEY": "U"}).encode()),
        (3, b"odd", b"\x02\x02A\x01\x02\x01B\x02C\x01D\x01E\x02"),  # malformed pairs are skipped, as Java does
    ]
    data = _plain_records(items)
    rows = _rows(decode_pull_body(data, broker_name="broker-a"))
    assert rows == [_expected(m) for m in decode_stored_messages(data)]
    assert rows[0]["msg_id"] == rows[0]["offset_msg_id"] and rows[0]["keys"] == [] and rows[0]["tags"] is None
    assert rows[2]["keys"] == ["", "a", "", "b", ""]
    assert rows[3]["properties"] == [("C", "D\x01E")]


_PIECES = st.sampled_from(
    ["a", "b", "TAGS", "KEYS", "UNIQ_KEY", "UNIQ_KEYS", "longer_name_", " ", "\x01", "\x02", "é", "名"]
)
_TEXT = st.lists(_PIECES, max_size=30).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=6))
def test_properties_split_as_string2messageProperties(texts: list[str]) -> None:
    """Any properties text, repeated names included, gives the reference decoder's map, TAGS, KEYS, msg id."""
    items = [(0, b"b", t.encode()) for t in texts]
    data = _plain_records(items)
    assert _rows(decode_pull_body(data, broker_name="broker-a")) == [_expected(m) for m in decode_stored_messages(data)]


def test_rows_with_many_properties() -> None:
    """More than 16 properties in a row: repeated names are looked for by sorting (and found)."""
    many = {f"user_property_{i}": f"value {i}" for i in range(20)}
    repeated = encode_properties(many) + "\x02user_property_3\x01again\x02TAGS\x01t"
    items = [(0, b"a", encode_properties(many).encode()), (0, b"b", repeated.encode())]
    data = _plain_records(items)
    rows = _rows(decode_pull_body(data, broker_name="broker-a"))
    assert rows == [_expected(m) for m in decode_stored_messages(data)]
    assert dict(rows[1]["properties"])["user_property_3"] == "again" and rows[1]["tags"] == "t"


def test_several_pull_bodies_at_once() -> None:
    first, second = _records(3), _records(4, first_offset=103, commit_log_offset=1 << 34)
    joined = _rows(decode_pull_bodies([first, memoryview(second)], broker_name="broker-a"))
    assert joined == _rows(decode_pull_body(first, broker_name="broker-a")) + _rows(
        decode_pull_body(second, broker_name="broker-a")
    )
    with pytest.raises(ProtocolError, match="record at byte 0 of pull body 1"):
        decode_pull_bodies([first, second[:50]], broker_name="broker-a")


def test_namespace_is_removed_from_topics() -> None:
    data = _records(3, topic="ns1%orders") + _records(2, topic="%RETRY%ns1%group")
    rows = _rows(decode_pull_body(data, broker_name="broker-a", namespace="ns1"))
    assert [r["topic"] for r in rows] == ["orders"] * 3 + ["%RETRY%group"] * 2
    hinted = _rows(
        decode_pull_body(data[: len(_records(3, topic="ns1%orders"))], broker_name="b", topic="orders", namespace="ns1")
    )
    assert {r["topic"] for r in hinted} == {"orders"}
    assert _rows(decode_pull_body(data, broker_name="broker-a", topic="orders", namespace="ns1")) == rows
    assert _rows(decode_pull_body(data, broker_name="broker-a"))[0]["topic"] == "ns1%orders"
    assert without_namespace("ns2%orders", "ns1") == "ns2%orders"
    assert without_namespace("%DLQ%ns1%group", "ns1") == "%DLQ%group"


def _record_v6(*, born: tuple[str, int], store: tuple[str, int], offset: int, body: bytes, props: bytes) -> bytes:
    """One record with either host as IPv6 (sysFlag BORNHOST_V6_FLAG / STOREHOST_V6_FLAG), by the layout."""
    flag = 0
    hosts = b""
    for (ip, port), v6_flag, ts in ((born, 0x10, BORN), (store, 0x20, STORED)):
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        flag |= v6_flag if family == socket.AF_INET6 else 0
        hosts += struct.pack(">q", ts) + socket.inet_pton(family, ip) + struct.pack(">i", port)
    topic = b"v6topic"
    tail = (
        struct.pack(">iqi", 1, 0, len(body))
        + body
        + bytes([len(topic)])
        + topic
        + struct.pack(">h", len(props))
        + props
    )
    head_size = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4
    total = head_size + len(hosts) + len(tail)
    head = struct.pack(">iiiiiqqi", total, MESSAGE_MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, 1, 0, 7, offset, flag)
    return head + hosts + tail


def test_ipv6_hosts() -> None:
    records = [
        _record_v6(born=("2001:db8::1", 40001), store=("10.1.1.1", 10911), offset=0, body=b"a", props=_props(1)),
        _record_v6(born=("10.2.2.2", 40002), store=("fe80::1:2", 10911), offset=1000, body=b"bb", props=b""),
        _record_v6(born=("::1", 40003), store=("2001:db8::ff", 10912), offset=2000, body=b"ccc", props=_props(3)),
    ]
    rows = _rows(decode_pull_body(b"".join(records), broker_name="broker-a"))
    for row, raw in zip(rows, records, strict=True):
        msg = decode_stored_message(raw)
        ip, port = msg.store_host
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        offset_id = (socket.inet_pton(family, ip) + struct.pack(">iq", port, msg.commit_log_offset)).hex().upper()
        assert row == _expected(msg, offset_msg_id=offset_id)
    assert rows[0]["born_host"] == "[2001:db8::1]:40001" and len(rows[1]["offset_msg_id"]) == 56
    assert rows[1]["msg_id"] == rows[1]["offset_msg_id"]


def test_zlib_compressed_bodies_are_inflated() -> None:
    raw = [(0, b"payload %d " % i * 300, _props(i)) for i in range(3)]
    plain = _records(items=raw)
    squeezed = [(f, zlib.compress(b), p) for f, b, p in raw]
    for kind in (0, 3 << 8):  # before compression types, and CompressionType.ZLIB
        data = _records(items=squeezed, sys_flag=COMPRESSED_FLAG | kind) + plain
        rows = _rows(decode_pull_body(data, broker_name="broker-a"))
        assert [r["body"] for r in rows] == [b for _, b, _ in raw] * 2
        assert {r["sys_flag"] for r in rows[:3]} == {kind}
        assert rows == [_expected(m) for m in decode_stored_messages(data)]


def _frame(codec: str, body: bytes) -> bytes:
    """``body`` as one LZ4 or Zstandard frame, the streams the 5.x Java producer writes (LZ4FrameOutputStream,
    ZstdOutputStream): neither says its decompressed size up front."""
    sink = pa.BufferOutputStream()
    with pa.output_stream(sink, compression=codec) as stream:
        stream.write(body)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(("kind", "codec"), [(1, "lz4"), (2, "zstd")])
def test_lz4_and_zstd_bodies_are_inflated(kind: int, codec: str) -> None:
    raw = [(0, b"payload %d " % i * 500, _props(i)) for i in range(3)]
    squeezed = [(f, _frame(codec, b), p) for f, b, p in raw]
    assert all(len(c) < len(b) for (_, c, _), (_, b, _) in zip(squeezed, raw, strict=True))
    data = _records(2) + _records(items=squeezed, first_offset=102, sys_flag=COMPRESSED_FLAG | kind << 8)
    rows = _rows(decode_pull_body(data, broker_name="broker-a"))
    assert [r["body"] for r in rows[2:]] == [b for _, b, _ in raw]
    assert {r["sys_flag"] for r in rows[2:]} == {kind << 8}  # COMPRESSED_FLAG cleared, the type kept
    assert [m.decompressed_body() for m in decode_stored_messages(data)][2:] == [b for _, b, _ in raw]


def test_a_body_its_compression_type_cannot_inflate_names_the_record() -> None:
    unknown = _records(2) + _records(1, first_offset=102, sys_flag=COMPRESSED_FLAG | 5 << 8)
    with pytest.raises(UnsupportedCompressionError) as caught:
        decode_pull_body(unknown, broker_name="broker-a")
    text = str(caught.value)
    assert "unknown compression type 5" in text
    assert "topic 'orders' queue 3 offset 102" in text and f"record at byte {len(_records(2))}" in text
    not_zstd = _records(items=[(0, b"not a zstd frame", b"")], first_offset=7, sys_flag=COMPRESSED_FLAG | 2 << 8)
    with pytest.raises(ProtocolError, match=r"offset 7.*the ZSTD body cannot be inflated"):
        decode_pull_body(not_zstd, broker_name="broker-a")


def test_inner_batches_become_one_row_per_message() -> None:
    inner = [(5, b"first", _props(1)), (6, b"second", encode_properties({"TAGS": "x"}).encode()), (7, b"3", b"")]
    batch_props = encode_properties({"UNIQ_KEY": "BATCH", "INNER_NUM": "3", "INNER_BASE": "200"}).encode()
    wrapped = _records(
        items=[(0, encode_batch_body(inner), batch_props)],
        first_offset=200,
        sys_flag=INNER_BATCH_FLAG | NEED_UNWRAP_FLAG,
        commit_log_offset=4096,
    )
    before, after = _records(2, first_offset=198), _records(1, first_offset=203, commit_log_offset=8192)
    rows = _rows(decode_pull_body(before + wrapped + after, broker_name="broker-a"))
    assert [r["queue_offset"] for r in rows] == [198, 199, 200, 201, 202, 203]
    outer = decode_stored_message(wrapped)
    for k, (row, (flag, body, props)) in enumerate(zip(rows[2:5], inner, strict=True)):
        msg = StoredMessage(**{**outer.__dict__, "flag": flag, "body": body, "reconsume_times": 0})
        msg = StoredMessage(**{**msg.__dict__, "queue_offset": 200 + k, "properties": _decode(props)})
        assert row == _expected(msg)
    assert rows[4]["msg_id"] == outer.offset_msg_id  # no UNIQ_KEY of its own: the batch record's offset id
    assert rows[2]["sys_flag"] == INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
    assert rows[:2] == _rows(decode_pull_body(before, broker_name="broker-a"))
    # Only INNER_BATCH_FLAG and NEED_UNWRAP_FLAG together unwrap (PullAPIWrapper.processPullResult).
    kept = _records(items=[(0, encode_batch_body(inner), batch_props)], sys_flag=INNER_BATCH_FLAG)
    assert _rows(decode_pull_body(kept, broker_name="broker-a"))[0]["body"] == encode_batch_body(inner)


def _decode(props: bytes) -> dict[str, str]:
    from spark_rocketmq.protocol.message import decode_properties

    return decode_properties(props.decode())


def test_tag_filter_keeps_only_subscribed_tags() -> None:
    data = _records(9) + _records(items=[(0, b"untagged", b"")], first_offset=109)
    rows = _rows(decode_pull_body(data, broker_name="broker-a", tags=frozenset({"tag0", "tag2"})))
    assert [r["queue_offset"] for r in rows] == [100, 102, 103, 105, 106, 108]
    assert len(_rows(decode_pull_body(data, broker_name="broker-a", tags=frozenset()))) == 10
    assert _rows(decode_pull_body(data, broker_name="broker-a", tags=frozenset({"nope"}))) == []


def test_empty_body() -> None:
    for empty in (b"", memoryview(b"")):
        batch = decode_pull_body(empty, broker_name="broker-a")
        assert batch.num_rows == 0 and batch.schema.equals(READ_SCHEMA)


def test_truncated_and_malformed_records_name_their_byte_position() -> None:
    data = _records(3)
    second = len(_records(1))
    with pytest.raises(ProtocolError, match=f"truncated record at byte {second}"):
        decode_pull_body(data[: second + 60], broker_name="broker-a")
    with pytest.raises(ProtocolError, match=f"truncated record at byte {len(data)}"):
        decode_pull_body(data + b"\x00\x00", broker_name="broker-a")
    bad_magic = bytearray(data)
    bad_magic[second + 4 : second + 8] = b"\x00\x00\x00\x01"
    with pytest.raises(ProtocolError, match=f"record at byte {second}: its magic code"):
        decode_pull_body(bytes(bad_magic), broker_name="broker-a")
    bad_body = bytearray(data)
    bad_body[second + 84 : second + 88] = struct.pack(">i", 10_000)
    with pytest.raises(ProtocolError, match=f"record at byte {second}: its body length"):
        decode_pull_body(bytes(bad_body), broker_name="broker-a")
    not_utf8 = _records(items=[(0, b"b", b"TAGS\x01\xff\xfe")])
    with pytest.raises(ProtocolError, match="not UTF-8"):
        decode_pull_body(not_utf8, broker_name="broker-a")


@pytest.mark.skipif(not supports_datasource(), reason="Python data source readers need PySpark 4.1+")
def test_read_struct_type_is_the_arrow_schema_spark_expects() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(read_struct_type(), timezone="UTC").equals(READ_SCHEMA)
    assert [f.metadata["comment"] for f in read_struct_type().fields] == [
        f.metadata[b"comment"].decode() for f in READ_SCHEMA
    ]


@pytest.mark.skipif(not supports_datasource(), reason="Python data source readers need PySpark 4.1+")
def test_spark_reads_decoded_batches(spark) -> None:  # type: ignore[no-untyped-def]
    """A Python data source yielding decoded batches: Spark checks each batch's Arrow schema against the
    declared one, so this proves the columns, nullability and timestamp unit round-trip."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.types import StructType

    data = _records(4) + _records(1, sys_flag=COMPRESSED_FLAG, items=[(0, zlib.compress(b"z" * 50), b"")])

    class DecodedReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            yield decode_pull_body(data, broker_name="broker-a")

    class DecodedSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "decoded_pull_body_test"

        def schema(self):  # type: ignore[no-untyped-def]
            return read_struct_type()

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return DecodedReader()

    spark.dataSource.register(DecodedSource)
    df = spark.read.format("decoded_pull_body_test").load()
    assert StructType.fromDDL(READ_DDL).simpleString() == df.schema.simpleString()
    got = df.selectExpr(
        "queue_offset",
        "unix_millis(born_timestamp) AS born",
        "unix_millis(store_timestamp) AS stored",
        "body",
        "properties['TAGS'] AS tag",
        "keys",
        "msg_id",
    ).collect()
    expected = [_expected(m) for m in decode_stored_messages(data)]
    assert [r.queue_offset for r in got] == [100, 101, 102, 103, 100]
    assert {(r.born, r.stored) for r in got} == {(BORN, STORED)}
    assert [bytes(r.body) for r in got] == [e["body"] for e in expected]
    assert [r.tag for r in got] == [e["tags"] for e in expected]
    assert [list(r.keys) for r in got] == [e["keys"] for e in expected]
    assert [r.msg_id for r in got] == [e["msg_id"] for e in expected]
