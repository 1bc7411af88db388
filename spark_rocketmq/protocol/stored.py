"""Stored messages: the commit-log record layout a broker writes and PULL_MESSAGE returns."""

from __future__ import annotations

import re
import socket
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from ..errors import ProtocolError
from .codes import SysFlag
from .compression import inflate
from .message import (  # the batch-body structs are declared once, next to the batch encoder
    BATCH_RECORD_HEAD,
    BATCH_RECORD_OVERHEAD,
    JAVA_SHORT,
    MAX_PROPERTIES_LENGTH,
    PROPERTY_SEPARATOR,
    TOPIC_MAX_LENGTH,
    decode_properties,
)

MESSAGE_MAGIC_CODE = 0xDAA320A7 - (1 << 32)  # written as a signed int
#: Fixed part of a v1 record with IPv4 hosts, before body, topic and properties.
STORED_FIXED_SIZE = 91
#: totalSize, magic, bodyCRC, queueId, flag, queueOffset, physicalOffset, [the 48 bytes of _SAME], bodyLength.
_HEAD = struct.Struct(">iiiiiqq48si")
#: sysFlag, bornTimestamp, bornHost, bornPort, storeTimestamp, storeHost, storePort, reconsumeTimes,
#: preparedTransactionOffset: IPv4 hosts.
_SAME = struct.Struct(">iq4siq4siiq")
_INT = struct.Struct(">i")
#: totalSize, magic, queueId (after bodyCRC), sysFlag (after flag, queueOffset, physicalOffset).
_INDEX_HEAD = struct.Struct(">ii4xi20xi")


def offset_msg_id(store_host: str, store_port: int, commit_log_offset: int) -> str:
    """MessageDecoder.createMessageId: store IPv4 + port + commit-log offset, upper-case hex."""
    return (socket.inet_aton(store_host) + struct.pack(">iq", store_port, commit_log_offset)).hex().upper()


#: An offset message id: 16 bytes as 32 hex characters.
_OFFSET_MSG_ID = re.compile("[0-9A-Fa-f]{32}")


def parse_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(store host, port, commit-log offset) from a 32-hex-char offset message id."""
    if not isinstance(msg_id, str) or _OFFSET_MSG_ID.fullmatch(msg_id) is None:
        raise ProtocolError(f"offset message id {str(msg_id)[:40]!r} is not 16 bytes as 32 hex characters")
    host, port = _store_of(msg_id[:16])
    offset = int(msg_id[16:], 16)
    return host, port, offset - (1 << 64) if offset >= 1 << 63 else offset  # a Java long


@lru_cache(maxsize=256)
def _store_of(prefix: str) -> tuple[str, int]:
    """(host, port) of an offset id's first 8 bytes (a cluster has few stores: each is parsed once)."""
    raw = bytes.fromhex(prefix)
    return socket.inet_ntoa(raw[:4]), struct.unpack(">i", raw[4:])[0]


#: UtilAll.crc32 keeps the CRC-32 non-negative.
CRC32_MASK = 0x7FFFFFFF


def body_crc(body: bytes | memoryview) -> int:
    """UtilAll.crc32: CRC-32 (zlib polynomial) masked to a non-negative int."""
    return zlib.crc32(body) & CRC32_MASK


@dataclass(frozen=True)
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    properties: dict[str, str]
    body_crc: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get("KEYS")
        return raw.split(" ") if raw else []

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")

    @property
    def msg_id(self) -> str:
        """The id a consumer shows: UNIQ_KEY when present, else the offset id."""
        return self.uniq_key or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host[0], self.store_host[1], self.commit_log_offset)

    @property
    def compressed(self) -> bool:
        return bool(self.sys_flag & SysFlag.COMPRESSED)

    def decompressed_body(self) -> bytes:
        """The body, inflated by the compression type of its sysFlag when COMPRESSED_FLAG is set."""
        return inflate(self.body, self.sys_flag) if self.compressed else self.body


def encode_stored_message(
    *,
    topic: str,
    queue_id: int,
    queue_offset: int,
    commit_log_offset: int,
    sys_flag: int,
    flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_timestamp: int,
    store_host: tuple[str, int],
    body: bytes,
    properties: str,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> bytes:
    """One commit-log record (CommitLog.DefaultAppendMessageCallback), IPv4 hosts only."""
    props_b = properties.encode("utf-8")
    if len(props_b) > MAX_PROPERTIES_LENGTH:
        raise ProtocolError("properties too long to store")
    data, _sizes = encode_stored_records(
        [(flag, body, props_b)],
        topic=topic,
        queue_id=queue_id,
        first_queue_offset=queue_offset,
        commit_log_offset=commit_log_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )
    return data


def encode_stored_records(
    items: Iterable[tuple[int, bytes, bytes]],
    *,
    topic: str,
    queue_id: int,
    first_queue_offset: int,
    commit_log_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_timestamp: int,
    store_host: tuple[str, int],
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    extra_properties: bytes = b"",
) -> tuple[bytes, list[int]]:
    """Consecutive commit-log records, one per (flag, body, encoded properties), IPv4 hosts only.

    Queue offsets count up from first_queue_offset and commit-log offsets from commit_log_offset.
    extra_properties (name\\x01value pairs, as a broker adds CLUSTER) is appended to every message's
    properties. Returns (the records back to back, the size of each record)."""
    topic_b = topic.encode("utf-8")
    if len(topic_b) > TOPIC_MAX_LENGTH:
        raise ProtocolError(f"topic {topic!r} is too long to store")
    topic_part = bytes((len(topic_b),)) + topic_b
    # Every field between the physical offset and the body length is the same for the whole run.
    same = _SAME.pack(
        sys_flag & ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6),
        born_timestamp,
        socket.inet_aton(born_host[0]),
        born_host[1],
        store_timestamp,
        socket.inet_aton(store_host[0]),
        store_host[1],
        reconsume_times,
        prepared_transaction_offset,
    )
    extra = PROPERTY_SEPARATOR.encode() + extra_properties if extra_properties else b""
    bare_tail = topic_part + JAVA_SHORT.pack(len(extra_properties)) + extra_properties
    fixed = STORED_FIXED_SIZE + len(topic_b)
    pack = _HEAD.pack
    short = JAVA_SHORT.pack
    crc = zlib.crc32
    magic = MESSAGE_MAGIC_CODE
    props_limit = MAX_PROPERTIES_LENGTH
    parts: list[bytes] = []
    add = parts.append
    sizes: list[int] = []
    size = sizes.append
    qoff = first_queue_offset
    pos = commit_log_offset
    for flag, body, props in items:
        body_len = len(body)
        if props:
            props_len = len(props) + len(extra)
            if props_len > props_limit:
                raise ProtocolError(f"properties of {props_len} bytes are too long to store")
            total = fixed + body_len + props_len
            add(pack(total, magic, crc(body) & CRC32_MASK, queue_id, flag, qoff, pos, same, body_len))
            add(body)
            add(topic_part)
            add(short(props_len))
            add(props)
            add(extra)
        else:
            total = fixed + body_len + len(extra_properties)
            add(pack(total, magic, crc(body) & CRC32_MASK, queue_id, flag, qoff, pos, same, body_len))
            add(body)
            add(bare_tail)
        size(total)
        pos += total
        qoff += 1
    return b"".join(parts), sizes


def stored_record_sizes(topic: str, lengths: Iterable[tuple[int, int]], extra_properties: bytes = b"") -> list[int]:
    """The size of each record encode_stored_records would write for messages of (body length,
    properties length), with the same refusal of properties too long to store."""
    fixed = STORED_FIXED_SIZE + len(topic.encode("utf-8"))
    extra = len(extra_properties) + 1 if extra_properties else 0
    with_props = fixed + extra
    bare = fixed + len(extra_properties)
    props_limit = MAX_PROPERTIES_LENGTH - extra
    sizes: list[int] = []
    size = sizes.append
    for body_len, props_len in lengths:
        if not props_len:
            size(bare + body_len)
        elif props_len <= props_limit:
            size(with_props + body_len + props_len)
        else:
            raise ProtocolError(f"properties of {props_len + extra} bytes are too long to store")
    return sizes


def batch_body_spans(body: bytes | memoryview) -> list[tuple[int, int, int, int]]:
    """Walk a MessageBatch body (MessageDecoder.encodeMessages) as a broker takes it apart:
    (flag, body start, body length, properties length) of each record; the properties follow the
    body after their 2-byte length. Refuses truncated records, inconsistent sizes and empty bodies."""
    out: list[tuple[int, int, int, int]] = []
    add = out.append
    unpack = BATCH_RECORD_HEAD.unpack_from
    short = JAVA_SHORT.unpack_from
    overhead = BATCH_RECORD_OVERHEAD
    pos = 0
    n = len(body)
    while pos < n:
        if n - pos < overhead:
            raise ProtocolError(f"truncated record at byte {pos}")
        total, _magic, _crc, flag, body_len = unpack(body, pos)
        end = pos + total
        if body_len <= 0 or total < overhead + body_len or end > n:
            raise ProtocolError(f"record at byte {pos} has inconsistent sizes ({total}, {body_len})")
        start = pos + 20
        (props_len,) = short(body, start + body_len)
        if props_len < 0 or overhead + body_len + props_len != total:
            raise ProtocolError(f"record at byte {pos}: properties length {props_len} does not fit")
        add((flag, start, body_len, props_len))
        pos = end
    return out


def uniform_batch_records(body: bytes | memoryview) -> tuple[int, int, int] | None:
    """(records, body length, properties length) when a MessageBatch body is records of one layout
    (every record's totalSize, bodyLength and properties length equal to the first's), else None.

    What batch_body_spans checks, for such a body, without a step per record: the first record is
    checked, then each byte of those three fields is compared across all records at once (a slice
    with the record size as its step; a view is copied to bytes first, whose stepped slices are
    many times faster than a view's).
    """
    n = len(body)
    if n < BATCH_RECORD_OVERHEAD:
        return None
    total, _magic, _crc, _flag, body_len = BATCH_RECORD_HEAD.unpack_from(body, 0)
    if body_len <= 0 or total < BATCH_RECORD_OVERHEAD + body_len or n % total:
        return None
    (props_len,) = JAVA_SHORT.unpack_from(body, 20 + body_len)
    if props_len < 0 or BATCH_RECORD_OVERHEAD + body_len + props_len != total:
        return None
    count = n // total
    data = body if isinstance(body, bytes) else bytes(body)
    for at in (0, 1, 2, 3, 16, 17, 18, 19, 20 + body_len, 21 + body_len):
        if data[at::total] != data[at : at + 1] * count:
            return None
    return count, body_len, props_len


def split_batch_body(body: bytes) -> list[tuple[int, bytes, bytes]]:
    """(flag, body, encoded properties) of each record of a MessageBatch body, checked as
    batch_body_spans checks it; properties are left encoded."""
    return [(flag, body[s : s + n], body[s + n + 2 : s + n + 2 + p]) for flag, s, n, p in batch_body_spans(body)]


def offset_msg_ids(store_host: str, store_port: int, commit_log_offsets: Iterable[int]) -> str:
    """offset_msg_id of each commit-log offset, joined by commas (a batch answer's msgId)."""
    offsets = array("q", commit_log_offsets)
    if not offsets:
        return ""
    if sys.byteorder == "little":
        offsets.byteswap()
    prefix = (socket.inet_aton(store_host) + struct.pack(">i", store_port)).hex().upper()
    # One hex pass over every offset, a comma between each 8 bytes, the host prefix after each comma.
    return prefix + offsets.tobytes().hex(",", 8).upper().replace(",", "," + prefix)


def index_stored_records(data: bytes | memoryview) -> tuple[list[tuple[int, int, int, str]], int]:
    """(position, size, queue id, topic) of each whole record of a commit log, read from its start
    without decoding bodies or properties, and the position where the whole records end: a torn
    tail (a crash mid-write) or zeros start there."""
    out: list[tuple[int, int, int, str]] = []
    add = out.append
    unpack = _INDEX_HEAD.unpack_from
    int_at = _INT.unpack_from
    v6 = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
    n = len(data)
    pos = 0
    while pos + STORED_FIXED_SIZE <= n:
        total, magic, queue_id, sys_flag = unpack(data, pos)
        end = pos + total
        if total < STORED_FIXED_SIZE or end > n or magic != MESSAGE_MAGIC_CODE:
            break
        # bodyLength follows born/store hosts: 4-byte IPv4 or 16-byte IPv6 addresses.
        body_len_at = pos + 84 + (12 if sys_flag & SysFlag.BORNHOST_V6 else 0)
        body_len_at += 12 if sys_flag & SysFlag.STOREHOST_V6 else 0
        if sys_flag & v6 and body_len_at + 4 > end:
            break
        (body_len,) = int_at(data, body_len_at)
        topic_at = body_len_at + 4 + body_len
        if body_len < 0 or topic_at + 3 > end:
            break
        topic_end = topic_at + 1 + data[topic_at]
        if topic_end + 2 > end:
            break
        try:
            topic = bytes(data[topic_at + 1 : topic_end]).decode("utf-8")
        except UnicodeDecodeError:
            break
        add((pos, total, queue_id, topic))
        pos = end
    return out, pos


def decode_stored_messages(data: bytes | memoryview) -> list[StoredMessage]:
    """Records back to back (a PULL_MESSAGE body or a commit-log segment). Stops at a zero size."""
    view = memoryview(data)
    out: list[StoredMessage] = []
    pos = 0
    n = len(view)
    while pos + 4 <= n:
        (total,) = struct.unpack_from(">i", view, pos)
        if total == 0:
            break
        out.append(decode_stored_message(view[pos : pos + total] if total > 0 else view[pos:]))
        pos += total
    return out


def decode_stored_message(rec: bytes | memoryview) -> StoredMessage:
    view = memoryview(rec)
    try:
        total, magic, crc, queue_id, flag, qoff, phys, sys_flag, born_ts = struct.unpack_from(">iiiiiqqiq", view, 0)
        if total < STORED_FIXED_SIZE or total > len(view):
            raise ProtocolError(f"stored message size {total} does not fit its {len(view)} bytes")
        if magic not in (MESSAGE_MAGIC_CODE, 0xABABABAB - (1 << 32)):
            raise ProtocolError(f"stored message magic {magic & 0xFFFFFFFF:#x} is not MESSAGE_MAGIC_CODE")
        pos = 48  # born host: after total, magic, crc, queueId, flag, queueOffset, physOffset, sysFlag, bornTs
        born_len = 16 if sys_flag & SysFlag.BORNHOST_V6 else 4
        born_ip = bytes(view[pos : pos + born_len])
        (born_port,) = struct.unpack_from(">i", view, pos + born_len)
        pos += born_len + 4
        (store_ts,) = struct.unpack_from(">q", view, pos)
        pos += 8
        store_len = 16 if sys_flag & SysFlag.STOREHOST_V6 else 4
        store_ip = bytes(view[pos : pos + store_len])
        (store_port,) = struct.unpack_from(">i", view, pos + store_len)
        pos += store_len + 4
        reconsume, prepared, body_len = struct.unpack_from(">iqi", view, pos)
        pos += 16
        if body_len < 0 or pos + body_len > total:
            raise ProtocolError(f"stored message body length {body_len} runs past the record")
        body = bytes(view[pos : pos + body_len])
        pos += body_len
        topic_len = view[pos]
        topic = bytes(view[pos + 1 : pos + 1 + topic_len]).decode("utf-8")
        pos += 1 + topic_len
        (props_len,) = struct.unpack_from(">h", view, pos)
        pos += 2
        if props_len < 0 or pos + props_len > total:
            raise ProtocolError(f"stored message properties length {props_len} runs past the record")
        props = decode_properties(bytes(view[pos : pos + props_len]).decode("utf-8"))
    except (struct.error, IndexError) as exc:
        raise ProtocolError(f"truncated stored message: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"stored message text is not UTF-8: {exc}") from None

    def host(ip: bytes) -> str:
        return socket.inet_ntop(socket.AF_INET6 if len(ip) == 16 else socket.AF_INET, ip)

    return StoredMessage(
        topic=topic,
        queue_id=queue_id,
        queue_offset=qoff,
        commit_log_offset=phys,
        sys_flag=sys_flag,
        flag=flag,
        born_timestamp=born_ts,
        born_host=(host(born_ip), born_port),
        store_timestamp=store_ts,
        store_host=(host(store_ip), store_port),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        properties=props,
        body_crc=crc,
    )
