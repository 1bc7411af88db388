"""Trace records in the layout of the Java client's TraceDataEncoder, read back."""

from __future__ import annotations

import pytest

from spark_rocketmq.errors import ProtocolError
from spark_rocketmq.protocol.trace import (
    EndTransactionTrace,
    MessageType,
    PubTrace,
    decode_trace_records,
    encoded,
    pack_trace_messages,
)

PUB = PubTrace(
    1700000000123, "DefaultRegion", "g1", "Orders", "AC11000100002A9F0000000000000001", "TagA", "k1 k2",
    "127.0.0.1:10911", 42, 7, MessageType.NORMAL_MSG, "7F00000100002A9F0000000000001000", True,
)  # fmt: skip
END = EndTransactionTrace(
    1700000000456, "DefaultRegion", "g1", "Orders", "AC11000100002A9F0000000000000002", None, None,
    "127.0.0.1:10911", "AC11000100002A9F0000000000000002", "COMMIT_MESSAGE", False,
)  # fmt: skip


def test_pub_record_fields_in_java_order() -> None:
    assert PUB.encode() == (
        "Pub\x011700000000123\x01DefaultRegion\x01g1\x01Orders\x01AC11000100002A9F0000000000000001\x01TagA\x01"
        "k1 k2\x01127.0.0.1:10911\x0142\x017\x010\x017F00000100002A9F0000000000001000\x01true\x02"
    )


def test_end_transaction_record_writes_missing_tags_as_null() -> None:
    assert END.encode() == (
        "EndTransaction\x011700000000456\x01DefaultRegion\x01g1\x01Orders\x01AC11000100002A9F0000000000000002\x01"
        "null\x01null\x01127.0.0.1:10911\x012\x01AC11000100002A9F0000000000000002\x01COMMIT_MESSAGE\x01false\x02"
    )


def test_records_read_back_including_older_pub_layouts() -> None:
    assert decode_trace_records(PUB.encode() + END.encode()) == [PUB, END]
    short = "Pub\x011\x01R\x01g\x01T\x01id\x01null\x01null\x01h:1\x013\x014\x010\x01false\x02"
    [old] = decode_trace_records(short)
    assert isinstance(old, PubTrace) and old.offset_msg_id == "" and not old.success and old.tags is None
    with pytest.raises(ProtocolError, match="cannot be read"):
        decode_trace_records("Pub\x01x\x02")


def test_packing_bounds_body_and_keys_and_deduplicates_keys() -> None:
    packed = list(pack_trace_messages(map(encoded, [PUB, PUB, END]), max_body=10_000, max_keys=10_000))
    assert len(packed) == 1 and packed[0].body == PUB.encode() * 2 + END.encode()
    assert packed[0].keys == [PUB.msg_id, "k1", "k2", END.msg_id]
    one_each = list(pack_trace_messages(map(encoded, [PUB, END]), max_body=len(PUB.encode()), max_keys=10_000))
    assert [p.body for p in one_each] == [PUB.encode(), END.encode()]
    by_keys = list(pack_trace_messages(map(encoded, [PUB, END]), max_body=10_000, max_keys=60))
    assert [p.keys for p in by_keys] == [[PUB.msg_id, "k1", "k2"], [END.msg_id]]
