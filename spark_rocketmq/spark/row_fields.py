"""The rows sent on their own (delayed and timer rows, every row of exactly_once) as Messages built from
their fields, with the UNIQ_KEY of their batch record (spark/encoder.py), converted to plain Python
values a block of rows at a time; the producer encodes each as a single message (protocol/requests.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..protocol.message import PROPERTY_SHARDING_KEY, Message
from .message_ids import BatchContext, uniq_key_bytes
from .row_properties import timer_millis

#: Rows sent alone whose fields are converted to Python at once (bounds the memory of exactly_once).
SINGLE_BLOCK_ROWS = 1024


class RowFields:
    """A record batch's columns by message field (plain types), what its rows' ids are made of, and the
    rows sent alone (ascending): their Messages, built a block of rows at a time."""

    def __init__(
        self, columns: dict[str, pa.Array], ctx: BatchContext, partition: int, row_start: int, singles: np.ndarray
    ) -> None:
        self.columns, self.ctx, self.partition, self.row_start = columns, ctx, partition, row_start
        self._singles = singles
        self._block: dict[int, tuple[Any, ...]] = {}

    def message(self, row: int, topic: str) -> Message:
        """Row ``row`` of the record batch (one sent alone) as a Message with the fields and UNIQ_KEY of its
        batch record."""
        fields = self._block.get(row)
        if fields is None:  # the first row of its block (one numpy search per block, not per row)
            at = int(np.searchsorted(self._singles, row))
            if at >= len(self._singles) or self._singles[at] != row:
                raise ValueError(f"row {row} is not a row sent alone")
            start = at - at % SINGLE_BLOCK_ROWS
            self._block = self._fields(self._singles[start : start + SINGLE_BLOCK_ROWS])
            fields = self._block[row]
        body, tags, keys, props, level, deliver, delay, key, uniq = fields
        return Message(
            topic=topic,
            body=body,
            tags=tags,
            keys=keys,
            properties=props,
            delay_level=level,
            deliver_time_ms=deliver,
            delay_time_ms=delay,
            uniq_key=uniq,
            _extra={PROPERTY_SHARDING_KEY: key} if key else None,
        )

    def _fields(self, rows: np.ndarray) -> dict[int, tuple[Any, ...]]:
        """Each row's (body, tags, keys, properties, delay_level, deliver_time_ms, delay_time_ms,
        sharding key, UNIQ_KEY), as the batch record has them (empty tags or keys: none)."""
        m = len(rows)
        taken = {
            name: arr.take(pa.array(rows)) for name, arr in self.columns.items() if name not in ("topic", "queue_id")
        }

        def values(name: str) -> list[Any]:
            return taken[name].to_pylist() if name in taken else [None] * m

        bodies = [b.encode() if isinstance(b, str) else b for b in values("body")]
        keys = [
            (None if None in k else " ".join(k)) if isinstance(k, list) else k  # as binary_join: a null, no KEYS
            for k in values("keys")
        ]
        props = [dict(p) if p else None for p in values("properties")]
        timers: dict[str, list[int | None]] = {}
        for name in ("deliver_time", "delay_ms"):
            if name in taken:
                ms, on = timer_millis(taken[name])
                if name == "delay_ms":
                    on &= ms != 0
                timers[name] = [int(v) if o else None for v, o in zip(ms.tolist(), on.tolist(), strict=True)]
            else:
                timers[name] = [None] * m
        first = int(rows[0]) if m else 0
        span = int(rows[-1]) + 1 - first if m else 0  # the blocks' spans add up to the batch at most
        ids = uniq_key_bytes(self.ctx, self.partition, self.row_start + first, span)[rows - first]
        return {
            row: (body, tags or None, key_text or None, prop, level or 0, deliver, delay, shard, uniq)
            for row, body, tags, key_text, prop, level, deliver, delay, shard, uniq in zip(
                rows.tolist(),
                bodies,
                values("tags"),
                keys,
                props,
                values("delay_level"),
                timers["deliver_time"],
                timers["delay_ms"],
                values("sharding_key"),
                (bytes(i).decode("ascii") for i in ids),
                strict=True,
            )
        }
