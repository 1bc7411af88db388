"""Deterministic message ids (UNIQ_KEY) for rows of a Spark batch.

An id keeps RocketMQ's 16-byte layout, written as 32 upper-case hex characters::

    [10 bytes: hash(id namespace, batch id, partition, row index >> 16)][4: ms since month start][2: row index & 0xFFFF]

where the client's own ids have [4 ip][2 pid][4 class-loader hash] in the first 10 bytes. RocketMQ tools
(mqadmin queryMsgByUniqueKey, the dashboard) read a time out of bytes 10-13 and search the broker's
index from that time minus one second: the time field is fixed once per batch on the driver, before
any row of the batch is sent, so it never lies later than the send. In foreachBatch it is the
micro-batch's batchTimestampMs from the query's offset log (checkpointed); otherwise the driver's
clock when the batch starts (sink call, or Spark planning a format("rocketmq") micro-batch).

Uniqueness: rows of one (id namespace, batch, partition) differ in row index; indexes that share the
2-byte counter differ in ``row index >> 16`` and so in the 80-bit hash. Two different batches,
partitions or id namespaces collide only if their 80-bit hashes do.

Determinism: the same row gets the same id when the same (id namespace, batch id, time field,
partition, row index) comes back, which holds for

- a task Spark retries (failed task, lost executor) within one run of a query or job: the driver's
  batch context is reused, and a partition's rows come in the same order when the input is
  deterministic (files, a checkpointed source, no non-deterministic shuffle before the sink);
- a micro-batch replayed after a restart of a streaming query through foreachBatch: same query id
  (kept in the checkpoint), batch id and batchTimestampMs (kept in the offset log);
- with format("rocketmq") streaming, a replay after a restart keeps the hash and counter parts
  but takes a new time field (Spark plans the batch again and the data source cannot read the
  offset log): ids then differ in characters 20-27, which a deduplicating consumer can leave out.

It does not hold when the rows of a partition can come in another order on a retry (a
``repartition()`` or ``orderBy`` without a total order upstream of the sink, a non-deterministic
source such as ``rate`` replayed from scratch).
"""

from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..protocol.message import NAME_VALUE_SEPARATOR, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
from ..protocol.uniq_id import month_start_ms

_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
UNIQ_PART_PREFIX = f"{PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}{NAME_VALUE_SEPARATOR}".encode()


@dataclass(frozen=True)
class BatchContext:
    """What every task of one batch shares, fixed on the driver (or by the query) and shipped with the tasks."""

    #: Names the stream in message ids (the id_namespace option, else the query or application id).
    #: Not RocketMQ's namespace (the producer option that prefixes topics).
    id_namespace: str
    batch_id: int
    #: ms since the start of the month (local time) when the batch started: the id's time field.
    time_field: int


def batch_context(id_namespace: str, batch_id: int, now_ms: int | None = None) -> BatchContext:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return BatchContext(id_namespace, int(batch_id), (now - month_start_ms(now)) & 0xFFFFFFFF)


def _chunk_hash(ctx: BatchContext, partition: int, chunk: int) -> bytes:
    text = f"{ctx.id_namespace}\x00{ctx.batch_id}\x00{partition}\x00{chunk}".encode()
    return hashlib.blake2b(text, digest_size=10).digest()


def _hex(data: np.ndarray) -> np.ndarray:
    """uint8 array (n, k) -> upper-case hex characters (n, 2k)."""
    out = np.empty((data.shape[0], data.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2] = _HEX[data >> 4]
    out[:, 1::2] = _HEX[data & 0x0F]
    return out


@functools.cache
def _counter_hex() -> np.ndarray:
    """The 4 hex characters of every 2-byte counter, (65536, 4): an id's last four, looked up."""
    counters = np.arange(0x10000, dtype=">u2").view(np.uint8).reshape(-1, 2)
    return _hex(counters)


def write_uniq_keys(out: np.ndarray, ctx: BatchContext, partition: int, row_start: int) -> None:
    """Write the ids of rows row_start .. row_start+len(out)-1 of a partition into ``out``, a
    (rows, 32) uint8 array (a column slice of a wider one is fine), as upper-case hex.

    Row r's id is the head of its chunk of 65,536 rows (chunk hash and time field, 28 hex characters)
    and r's counter within the chunk (4). The rows of a chunk are consecutive: each chunk's head is
    broadcast into its rows and their counters are one slice of the counter table.
    """
    count = out.shape[0]
    time_bytes = int(ctx.time_field).to_bytes(4, "big")
    counters = _counter_hex()
    row, end = row_start, row_start + count
    while row < end:
        chunk = row >> 16
        stop = min(end, (chunk + 1) << 16)
        head = np.frombuffer(_chunk_hash(ctx, partition, chunk) + time_bytes, dtype=np.uint8)
        rows = slice(row - row_start, stop - row_start)
        out[rows, :28] = _hex(head.reshape(1, 14))
        out[rows, 28:32] = counters[row & 0xFFFF : (row & 0xFFFF) + (stop - row)]
        row = stop


def uniq_key_bytes(ctx: BatchContext, partition: int, row_start: int, count: int) -> np.ndarray:
    """The ids of rows row_start .. row_start+count-1 of a partition, as a (count, 32) uint8 array of hex."""
    out = np.empty((count, 32), dtype=np.uint8)
    write_uniq_keys(out, ctx, partition, row_start)
    return out


def uniq_keys(ctx: BatchContext, partition: int, row_start: int, count: int) -> list[str]:
    """The same ids as Python strings (one object per row: for tests and lookups, not the send path)."""
    data = uniq_key_bytes(ctx, partition, row_start, count)
    return [bytes(row).decode("ascii") for row in data]


def uniq_property_array(ctx: BatchContext, partition: int, row_start: int, count: int) -> pa.Array:
    """``UNIQ_KEY\\x01<id>`` per row, as an Arrow string array built without a Python object per row."""
    width = len(UNIQ_PART_PREFIX) + 32
    out = np.empty((count, width), dtype=np.uint8)
    out[:, : len(UNIQ_PART_PREFIX)] = np.frombuffer(UNIQ_PART_PREFIX, dtype=np.uint8)
    write_uniq_keys(out[:, len(UNIQ_PART_PREFIX) :], ctx, partition, row_start)
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(out)])
