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


ANY_BODY = st.binary(min_size=1, max_size=60)


def plain_messages(
    flag: st.SearchStrategy[int], body: st.SearchStrategy[bytes] = ANY_BODY
) -> st.SearchStrategy[list[Message]]:
    return st.lists(st.builds(Message, topic=st.just("T"), body=body, flag=flag), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(
    # One flag and 32 hex ids (written in one go; bodies of one length cut by count), or mixed flags or
    # ids (the loop).
    messages=st.one_of(
        plain_messages(st.just(0)),
        plain_messages(st.just(3)),
        plain_messages(st.integers(0, 3)),
        plain_messages(st.just(0), st.sampled_from([b"y" * 7, b"z" * 40])),
    ),
    wait=st.booleans(),
    ids=st.one_of(
        st.lists(uniq, min_size=30, max_size=30),
        st.lists(st.one_of(uniq, st.just("0" * 31), st.just("é" * 32)), min_size=30, max_size=30),
    ),
    limit=st.sampled_from([340, 400, 700, 1 << 20]),
)
def test_plain_messages_are_written_in_one_go_as_the_loop_writes_them(messages, wait, ids, limit) -> None:
    """Messages check_batch calls plain (of one flag; batch_bodies(plain=True): one join per body when
    their ids are of one ASCII width) give the general encoding's bodies, cut at the same records; mixed
    flags are not plain and go through the loop."""
    for msg in messages:
        msg.wait_store_msg_ok = wait
    ids = ids[: len(messages)]
    try:
        check = check_batch(messages, limit)
    except InvalidMessageError:
        return
    assert check.plain == (len({m.flag for m in messages}) == 1)
    assert list(batch_bodies(messages, ids, limit, plain=check.plain)) == _reference(messages, ids, limit)


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
    assert check_batch([ok, Message("T", b"x" * (900 - 22 - 256))], 900) == ("T", True, False)
    assert check_batch([ok, Message("T", b"x", tags="a")], 900) == ("T", False, False)
    assert check_batch([ok, Message("T", b"x", deliver_time_ms=1), Message("T", b"")], 900, allow_timers=True) == (
        "T", False, True,
    )  # fmt: skip


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


def test_a_body_that_fills_the_limit_exactly_keeps_its_last_record() -> None:
    messages = [Message("T", bytes([i]) * 200) for i in range(3)]  # records of 22 + 200 + 51 bytes
    ids = [f"{i:032X}" for i in range(3)]
    assert check_batch(messages, 2 * 273).plain
    bodies = list(batch_bodies(messages, ids, 2 * 273, plain=True))
    assert [count for _, count, _ in bodies] == [2, 1] and len(bodies[0][0]) == 2 * 273
    assert bodies == _reference(messages, ids, 2 * 273)
