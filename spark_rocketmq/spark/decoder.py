"""PULL_MESSAGE answer bodies -> Arrow record batches of the read schema, vectorised.

A pull body is commit-log records back to back (protocol/stored.py documents the layout). The only
step per record in Python is the walk along each record's totalSize; everything after it is read for
all records at once: fixed fields gathered with numpy and viewed as big-endian integers, variable ones
(body, properties, their values) made Arrow arrays from byte spans by spark/byte_spans.py.
A broker answers at most 32 messages per pull by default (maxTransferCountOnMessageInMemory):
decode_pull_bodies decodes several answers at once, so the fixed cost of a call is paid once.

Records are taken as the Java client takes them (MessageDecoder.decode, PullAPIWrapper.processPullResult):
compressed bodies are inflated (sysFlag COMPRESSED_FLAG, compression type in bits 8..10) and the flag
cleared; 5.x inner-batch records (INNER_BATCH_FLAG and NEED_UNWRAP_FLAG, written to BatchCQ topics)
become one row per inner message, at the record's queue offset plus the message's index, with the
record's topic, queue, hosts, timestamps and sysFlag and the inner message's flag, body and properties
(reconsumeTimes 0). Rows whose TAGS is not a subscribed tag are dropped (the broker filters by hash).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ProtocolError
from ..protocol.codes import SysFlag
from ..protocol.compression import inflate
from ..protocol.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from ..protocol.requests import wrap_namespace
from ..protocol.stored import MESSAGE_MAGIC_CODE, batch_body_spans
from .byte_spans import fixed_width, gather, ints, ints_array, repeat, spans, split_properties, timestamps
from .read_schema import READ_SCHEMA

#: MessageDecoder.MESSAGE_MAGIC_CODE_V2: the topic length takes 2 bytes instead of 1.
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB - (1 << 32)
#: MessageSysFlag bits (protocol/codes.py), by the names MessageDecoder gives them.
COMPRESSED_FLAG = SysFlag.COMPRESSED
BORNHOST_V6_FLAG = SysFlag.BORNHOST_V6
STOREHOST_V6_FLAG = SysFlag.STOREHOST_V6
NEED_UNWRAP_FLAG = SysFlag.NEED_UNWRAP
INNER_BATCH_FLAG = SysFlag.INNER_BATCH

#: The first 48 bytes of a record, the same in every version.
_HEAD = np.dtype(
    [
        ("total", ">i4"),
        ("magic", ">i4"),
        ("crc", ">i4"),
        ("queue_id", ">i4"),
        ("flag", ">i4"),
        ("queue_offset", ">i8"),
        ("commit_log_offset", ">i8"),
        ("sys_flag", ">i4"),
        ("born_timestamp", ">i8"),
    ]
)
#: The smallest record: the head, IPv4 hosts, an empty body, a 1-byte topic length, no properties.
_MIN_RECORD = 91
_INT = struct.Struct(">i")
_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint8).reshape(256, 2)


def decode_pull_body(
    body: bytes | memoryview,
    *,
    broker_name: str,
    topic: str | None = None,
    tags: frozenset[str] | None = None,
    namespace: str | None = None,
) -> pa.RecordBatch:
    """The records of a PULL_MESSAGE answer body as one record batch of READ_SCHEMA.

    ``topic``: the pulled queue's topic (without namespace): when every record has it, the column is
    filled without decoding theirs. ``tags``: the subscribed tags; rows whose TAGS is not one of them are
    dropped (None or empty: every row is kept, as the Java client with "*"). ``namespace``: removed from
    topics as NamespaceUtil.withoutNamespace ("ns%T" -> "T"). Raises ProtocolError naming the byte
    position of a malformed record, UnsupportedCompressionError for a compression type it cannot inflate.
    """
    return decode_pull_bodies([body], broker_name=broker_name, topic=topic, tags=tags, namespace=namespace)


def decode_pull_bodies(
    bodies: Sequence[bytes | memoryview],
    *,
    broker_name: str,
    topic: str | None = None,
    tags: frozenset[str] | None = None,
    namespace: str | None = None,
) -> pa.RecordBatch:
    """decode_pull_body of several answers of one broker, in order, as one record batch."""
    data = bodies[0] if len(bodies) == 1 and isinstance(bodies[0], bytes) else b"".join(bodies)
    rec = _Records(data, _part_starts(bodies))
    if not rec.count:
        return pa.RecordBatch.from_pylist([], schema=READ_SCHEMA)
    rows = _Rows(rec, data)
    props = spans(rows.buffer, rows.props_at, rows.props_len, pa.string())
    try:
        props.validate(full=True)
    except pa.ArrowInvalid:
        raise ProtocolError(f"{rec.where(0)} or one after it: properties that are not UTF-8") from None
    properties, tag_values, uniq_keys, keys = split_properties(props)
    offset_ids = rows.expand(_offset_msg_ids(rec))
    msg_ids = uniq_keys if not uniq_keys.null_count else pc.coalesce(uniq_keys, offset_ids)
    n = rows.count
    columns = {
        "topic": rows.expand(_topics(rec, topic, namespace)),
        "broker_name": repeat(broker_name, n),
        "queue_id": ints_array(rows.per_row(rec.head["queue_id"]), np.int32),
        "queue_offset": ints_array(rows.queue_offset, np.int64),
        "msg_id": msg_ids,
        "offset_msg_id": offset_ids,
        "keys": keys,
        "tags": tag_values,
        "body": spans(rows.buffer, rows.body_at, rows.body_len, pa.binary()),
        "properties": properties,
        "born_timestamp": timestamps(rows.per_row(rec.head["born_timestamp"])),
        "store_timestamp": timestamps(rows.per_row(rec.store_timestamp)),
        "born_host": rows.expand(_hosts(rec, rec.born_at, rec.born_v6)),
        "store_host": rows.expand(_hosts(rec, rec.store_at, rec.store_v6)),
        "reconsume_times": ints_array(rows.reconsume, np.int32),
        "flag": ints_array(rows.flag, np.int32),
        "sys_flag": ints_array(rows.per_row(rows.sys_flag), np.int32),
    }
    batch = pa.RecordBatch.from_arrays([columns[name] for name in READ_SCHEMA.names], schema=READ_SCHEMA)
    if tags:
        wanted = pa.array(sorted(tags), pa.string())
        batch = batch.filter(pc.fill_null(pc.is_in(tag_values, value_set=wanted), False))
    return batch


def _part_starts(bodies: Sequence[bytes | memoryview]) -> np.ndarray:
    sizes = np.array([len(b) for b in bodies], dtype=np.int64)
    return np.cumsum(sizes) - sizes


class _Records:
    """Every record's fixed fields and where its variable ones are, read for all records at once."""

    def __init__(self, data: bytes, parts: np.ndarray) -> None:
        self.parts = parts
        self.starts = starts = self._walk(data)
        self.count = len(starts)
        if not self.count:
            return
        self.buf = buf = np.frombuffer(data, dtype=np.uint8)
        self.head = head = gather(buf, starts, 48).view(_HEAD).reshape(-1)
        magic = head["magic"]
        v2 = magic == MESSAGE_MAGIC_CODE_V2
        self._check(~((magic == MESSAGE_MAGIC_CODE) | v2), "its magic code is not MESSAGE_MAGIC_CODE")
        self.sys_flag = sys_flag = head["sys_flag"].astype(np.int32)
        self.born_v6 = (sys_flag & BORNHOST_V6_FLAG) != 0
        self.store_v6 = (sys_flag & STOREHOST_V6_FLAG) != 0
        # After the born timestamp: born host, store timestamp, store host (a 4-byte IPv4 or 16-byte IPv6
        # address, then a 4-byte port), reconsumeTimes, preparedTransactionOffset, bodyLength, body.
        ends = starts + head["total"].astype(np.int64)
        self.born_at = starts + 48
        store_ts_at = self.born_at + np.where(self.born_v6, 20, 8)
        self.store_at = store_ts_at + 8
        reconsume_at = self.store_at + np.where(self.store_v6, 20, 8)
        self.body_at = body_at = reconsume_at + 16
        self._check(body_at + 3 > ends, "its hosts run past its end")
        self.store_timestamp = ints(buf, store_ts_at, ">i8")
        self.reconsume = ints(buf, reconsume_at, ">i4")
        self.body_len = body_len = ints(buf, body_at - 4, ">i4").astype(np.int64)
        topic_len_at = body_at + body_len
        self._check((body_len < 0) | (topic_len_at + 3 > ends), "its body length runs past its end")
        self.topic_len = buf[topic_len_at].astype(np.int64)
        self.topic_at = topic_len_at + 1
        if v2.any():  # MESSAGE_VERSION_V2: a 2-byte topic length
            self.topic_len = np.where(v2, ints(buf, topic_len_at, ">i2"), self.topic_len)
            self.topic_at = self.topic_at + v2
        props_len_at = self.topic_at + self.topic_len
        self._check((self.topic_len < 0) | (props_len_at + 2 > ends), "its topic length runs past its end")
        self.props_len = ints(buf, props_len_at, ">i2").astype(np.int64)
        self.props_at = props_len_at + 2
        self._check((self.props_len < 0) | (self.props_at + self.props_len > ends), "its properties run past its end")

    def _walk(self, data: bytes) -> np.ndarray:
        """Where each record starts: the one step per record, along each totalSize. Records may not
        cross from one pull body into the next."""
        starts: list[int] = []
        add = starts.append
        unpack = _INT.unpack_from
        limits = [*self.parts[1:].tolist(), len(data)]
        pos = 0
        for limit in limits:
            while pos < limit:
                left = limit - pos
                (total,) = unpack(data, pos) if left >= 4 else (0,)
                if left < _MIN_RECORD or total < _MIN_RECORD or total > left:
                    raise ProtocolError(
                        f"truncated {self.where(pos)}: its size {total} does not fit the {left} bytes left "
                        f"(a record takes {_MIN_RECORD} bytes or more)"
                    )
                add(pos)
                pos += total
        return np.array(starts, dtype=np.int64)

    def where(self, pos: int) -> str:
        """'record at byte N' (of pull body K when there are several) for a record's position."""
        part = int(np.searchsorted(self.parts, pos, side="right")) - 1
        of = f" of pull body {part}" if len(self.parts) > 1 else ""
        return f"record at byte {pos - int(self.parts[part])}{of}"

    def _check(self, bad: np.ndarray, what: str) -> None:
        if bad.any():
            raise ProtocolError(f"{self.where(int(self.starts[int(np.argmax(bad))]))}: {what}")

    def describe(self, i: int, data: bytes) -> str:
        at = int(self.topic_at[i])
        topic = data[at : at + int(self.topic_len[i])].decode("utf-8", "replace")
        queue, offset = int(self.head["queue_id"][i]), int(self.head["queue_offset"][i])
        return f"topic {topic!r} queue {queue} offset {offset} ({self.where(int(self.starts[i]))})"


class _Rows:
    """Where each row's body and properties are, and its own fields: the records themselves, or (when a
    body is compressed or an inner batch) a buffer rebuilt in row order, one step per record."""

    def __init__(self, rec: _Records, data: bytes) -> None:
        self.sys_flag = rec.sys_flag
        compressed = (rec.sys_flag & COMPRESSED_FLAG) != 0
        unwrap = INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
        inner = (rec.sys_flag & unwrap) == unwrap
        self.rows: np.ndarray | None = None
        if not (compressed.any() or inner.any()):
            self.buffer = pa.py_buffer(data)
            self.body_at, self.body_len, self.props_at, self.props_len = (
                rec.body_at,
                rec.body_len,
                rec.props_at,
                rec.props_len,
            )
            self.flag, self.reconsume = rec.head["flag"], rec.reconsume
            self.queue_offset = rec.head["queue_offset"]
            self.count = rec.count
            return
        self.sys_flag = np.where(compressed, rec.sys_flag & ~COMPRESSED_FLAG, rec.sys_flag)
        pieces: list[bytes | memoryview] = []
        table: list[tuple[int, int, int, int, int, int, int, int]] = []  # row, body, props, flag, offset, reconsume
        view = memoryview(data)
        pos = 0
        fields = zip(
            rec.body_at.tolist(),
            rec.body_len.tolist(),
            rec.props_at.tolist(),
            rec.props_len.tolist(),
            rec.head["flag"].tolist(),
            rec.head["queue_offset"].tolist(),
            rec.reconsume.tolist(),
            strict=True,
        )
        for i, (body_at, body_len, props_at, props_len, flag, offset, reconsume) in enumerate(fields):
            body: bytes | memoryview = view[body_at : body_at + body_len]
            if compressed[i]:
                body = _inflate(rec, i, data, body)
            if inner[i]:  # MessageDecoder.decodeMessage(MessageExt, List): the batch's messages
                try:
                    spans = batch_body_spans(body)
                except ProtocolError as exc:
                    raise ProtocolError(f"{rec.where(int(rec.starts[i]))}: its inner batch: {exc}") from None
                for k, (inner_flag, at, length, plen) in enumerate(spans):
                    table.append((i, pos + at, length, pos + at + length + 2, plen, inner_flag, offset + k, 0))
                pieces.append(body)
                pos += len(body)
            else:
                table.append((i, pos, len(body), pos + len(body), props_len, flag, offset, reconsume))
                pieces += (body, view[props_at : props_at + props_len])
                pos += len(body) + props_len
        self.buffer = pa.py_buffer(b"".join(pieces))
        columns = np.array(table, dtype=np.int64).reshape(-1, 8).T
        self.rows, self.body_at, self.body_len, self.props_at, self.props_len = columns[:5]
        self.flag, self.queue_offset, self.reconsume = columns[5:]
        self.count = len(self.rows)

    def per_row(self, values: np.ndarray) -> np.ndarray:
        return values if self.rows is None else values[self.rows]

    def expand(self, values: pa.Array) -> pa.Array:
        return values if self.rows is None else values.take(pa.array(self.rows))


def _inflate(rec: _Records, i: int, data: bytes, body: bytes | memoryview) -> bytes:
    """A compressed body, inflated by the type its sysFlag names (protocol/compression.py)."""
    try:
        return inflate(body, int(rec.sys_flag[i]))
    except ProtocolError as exc:
        raise type(exc)(f"{rec.describe(i, data)}: {exc}") from None


def _offset_msg_ids(rec: _Records) -> pa.Array:
    """MessageDecoder.createMessageId of each record: store address, port and commit-log offset as
    upper-case hex (32 characters; 56 for an IPv6 store host)."""
    n = rec.count
    offsets = rec.head.view(np.uint8).reshape(n, 48)[:, 28:36]  # commitLogOffset, big-endian
    if not rec.store_v6.any():
        raw = np.empty((n, 16), dtype=np.uint8)
        raw[:, :8] = gather(rec.buf, rec.store_at, 8)
        raw[:, 8:] = offsets
        return fixed_width(_HEX[raw].reshape(-1), n, 32)
    raw = np.zeros((n, 28), dtype=np.uint8)
    raw[:, :20] = gather(rec.buf, rec.store_at, 20)
    v4 = ~rec.store_v6
    raw[v4, 8:16] = offsets[v4]
    raw[rec.store_v6, 20:] = offsets[rec.store_v6]
    text = pa.py_buffer(_HEX[raw].reshape(-1))
    return spans(text, np.arange(n, dtype=np.int64) * 56, np.where(rec.store_v6, 56, 32), pa.string())


def _hosts(rec: _Records, at: np.ndarray, v6: np.ndarray) -> pa.Array:
    """Each record's host (at: its address, then its port) as "ip:port" or "[ipv6]:port"; each distinct
    host is formatted once."""
    raw = gather(rec.buf, at, 20)  # IPv6: address, port; IPv4: address, port and 12 bytes after them
    if v6.any():
        raw[~v6, 8:] = 0
        key = np.concatenate([raw, v6.astype(np.uint8)[:, None]], axis=1)
    else:
        key = np.ascontiguousarray(raw[:, :8])
    keys = key.view(f"V{key.shape[1]}").reshape(-1)
    if (keys == keys[0]).all():
        return repeat(_host_text(bytes(keys[0])), rec.count)
    distinct, index = np.unique(keys, return_inverse=True)
    return pa.array([_host_text(bytes(k)) for k in distinct], pa.string()).take(pa.array(index.reshape(-1)))


def _host_text(key: bytes) -> str:
    if len(key) == 21 and key[20]:
        return f"[{socket.inet_ntop(socket.AF_INET6, key[:16])}]:{_INT.unpack_from(key, 16)[0]}"
    return f"{socket.inet_ntoa(key[:4])}:{_INT.unpack_from(key, 4)[0]}"


def _topics(rec: _Records, topic: str | None, namespace: str | None) -> pa.Array:
    """Each record's topic without the namespace; each distinct topic is decoded once."""
    at, length = int(rec.topic_at[0]), int(rec.topic_len[0])
    first = rec.buf[at : at + length]
    if length and (rec.topic_len == length).all() and (gather(rec.buf, rec.topic_at, length) == first).all():
        if topic is not None and first.tobytes() == wrap_namespace(namespace, topic).encode("utf-8"):
            return repeat(topic, rec.count)
        return repeat(without_namespace(_utf8(rec, first.tobytes()), namespace), rec.count)
    raw = spans(pa.py_buffer(rec.buf), rec.topic_at, rec.topic_len, pa.binary())
    names = pc.dictionary_encode(raw)
    plain = [without_namespace(_utf8(rec, t), namespace) for t in names.dictionary.to_pylist()]
    return pa.array(plain, pa.string()).take(names.indices)


def _utf8(rec: _Records, topic: bytes) -> str:
    try:
        return topic.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{rec.where(int(rec.starts[0]))} or one after it: a topic that is not UTF-8") from None


def without_namespace(name: str, namespace: str | None) -> str:
    """NamespaceUtil.withoutNamespace(name, namespace): "ns%T" -> "T", "%RETRY%ns%G" -> "%RETRY%G"."""
    if not name or not namespace:
        return name
    prefix = next((p for p in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX) if name.startswith(p)), "")
    rest = name[len(prefix) :]
    return prefix + rest[len(namespace) + 1 :] if rest.startswith(namespace + "%") else name
