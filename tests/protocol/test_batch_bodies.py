"""batch_bodies (the plain-message shortcut included) gives encode_batch_body's bytes of encoded_properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.errors import InvalidMessageError, ProtocolError
from spark_rocketmq.protocol.message import BATCH_RECORD_OVERHEAD, Message, encode_batch_body
from spark_rocketmq.protocol.properties import encoded_properties
from spark_rocketmq.protocol.requests import batch_bodies, check_batch
from spark_rocketmq.protocol.stored import batch_body_spans, uniform_batch_records

text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=6)
uniq = st.text("0123456789ABCDEF", min_size=32, max_size=32)
message = st.builds(
    Message,
    topic=st.just("T"),
    body=st.one_of(st.binary(min_size=1, max_size=40), st.binary(min_size=1, max_size=8).map(bytearray)),
    tags=st.one_of(st.none(), st.just(""), text),
    keys=st.one_of(st.none(), st.just(""), text, st.lists(text, max_size=2)),
    properties=st.one_of(st.none(), st.just({}), st.dictionaries(st.sampled_from(["a", "b"]), st.just("v"))),
    flag=st.integers(0, 3),
    uniq_key=st.one_of(st.none(), uniq),
)


def _reference(messages: list[Message], ids: list[str], limit: int) -> list[tuple[bytes, int, list[str]]]:
    out: list[tuple[bytes, int, list[str]]] = []
    records: list[tuple[int, bytes, bytes]] = []
    chunk_ids: list[str] = []
    size = 0
    for msg, generated in zip(messages, ids, strict=True):
        key = generated if msg.uniq_key is None else msg.uniq_key
        props = encoded_properties(msg, key).encode()
        record = BATCH_RECORD_OVERHEAD + len(msg.body) + len(props)
        if size + record > limit and records:
            out.append((encode_batch_body(records), len(records), chunk_ids))
            records, chunk_ids, size = [], [], 0
        records.append((msg.flag, bytes(msg.body), props))
        chunk_ids.append(key)
        size += record
    if records:
        out.append((encode_batch_body(records), len(records), chunk_ids))
    return out


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(message, min_size=1, max_size=12),
    wait=st.booleans(),
    ids=st.lists(uniq, min_size=12, max_size=12),
    limit=st.sampled_from([60, 150, 400, 1 << 20]),
)
def test_batch_bodies_equal_the_general_encoding(messages, wait, ids, limit) -> None:
    for msg in messages:
        msg.wait_store_msg_ok = wait
    ids = ids[: len(messages)]
    try:
        expected = _reference(messages, ids, limit)
    except InvalidMessageError:
        return  # refused by check_batch before any encoding
    assert list(batch_bodies(messages, ids, limit)) == expected


def test_check_batch_shortcut_still_refuses() -> None:
    ok = Message("T", b"x")
    for bad, words in [
        (Message("U", b"x"), "differs"),
        (Message("T", b""), "empty"),
        (Message("T", b"x", delay_level=2), "delayed"),
        (Message("T", b"x", wait_store_msg_ok=False), "wait_store_msg_ok"),
        (Message("T", b"x" * 1000), "over max_message_size"),
        (Message("T", b"x", uniq_key="nope"), "32 upper-case hex"),
        (Message("T", b"x", tags="a\x01"), "separators"),
    ]:
        try:
            check_batch([ok, bad], 900)
        except InvalidMessageError as exc:
            assert words in str(exc), (bad, exc)
        else:
            raise AssertionError(f"{bad} was accepted")
    assert check_batch([ok, Message("T", b"x" * (900 - 22 - 256))], 900) == "T"


record = st.tuples(st.integers(0, 3), st.binary(min_size=1, max_size=12), st.binary(max_size=6))


@settings(max_examples=300, deadline=None)
@given(st.lists(record, min_size=1, max_size=8), st.integers(1, 5))
def test_uniform_records_agree_with_the_record_walk(records, copies) -> None:
    """uniform_batch_records sees one layout exactly when the per-record walk does."""
    body = encode_batch_body(records * copies)
    spans = batch_body_spans(body)
    layouts = {(n, p) for _flag, _start, n, p in spans}
    expected = (len(spans), *layouts.pop()) if len(layouts) == 1 else None
    assert uniform_batch_records(body) == expected


def test_uniform_records_refuse_what_the_walk_refuses() -> None:
    body = encode_batch_body([(0, b"abcd", b"k\x01v")] * 3)
    assert uniform_batch_records(body) == (3, 4, 3)
    for broken in (
        body[:-1],  # truncated last record
        body + b"\x00",  # trailing byte
        body[:45] + b"\x00\x00\x00\x09" + body[49:],  # second record's bodyLength changed
        body[: -3 - 2] + b"\x00\x09" + body[-3:],  # last record's properties length changed
    ):
        assert uniform_batch_records(broken) is None
        with pytest.raises(ProtocolError):
            batch_body_spans(broken)
