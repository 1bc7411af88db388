"""The ROCKETMQ header serialization: extFields read back as written, whether entry by entry or by a
shape seen before, and what the producer writes in it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.protocol.codes import SerializeType
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.ext_fields import read_ext_fields, write_ext_fields
from spark_rocketmq.protocol.frame import decode_frame

ascii_text = st.text(st.characters(max_codepoint=0x7F), max_size=40)
any_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
maps = st.dictionaries(st.one_of(ascii_text, any_text), st.one_of(ascii_text, any_text, st.just("x" * 300)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(maps, st.lists(maps, max_size=3))
def test_ext_fields_read_back_the_same_however_often_a_shape_repeats(fields, others) -> None:
    """The first reading of a map goes entry by entry; the second teaches its shape; the third is read
    by the shape. Each gives the map written, also when maps of other shapes are read in between."""
    raw = write_ext_fields(fields)
    for _ in range(3):
        assert read_ext_fields(raw, 0, len(raw)) == fields
        for other in others:
            other_raw = write_ext_fields(other)
            assert read_ext_fields(other_raw, 0, len(other_raw)) == other


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text("0123456789", min_size=1, max_size=19), min_size=2, max_size=6))
def test_a_learnt_shape_never_reads_values_of_other_lengths(offsets) -> None:
    """Answers of one kind whose queueOffset grows a digit: each is read as written, never cut or
    padded to the shape of the answers before it."""
    for offset in offsets * 3:
        fields = {"msgId": "7F00000100002A9F0000000000C2A1B3", "queueId": "3", "queueOffset": offset}
        raw = write_ext_fields(fields)
        assert read_ext_fields(raw, 0, len(raw)) == fields


def test_the_header_frame_round_trips_with_a_remark_and_without_fields() -> None:
    for cmd in (
        RemotingCommand(code=37, opaque=9, remark="déjà", ext_fields={"a": "1"}, serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(code=0, opaque=1, flag=1, body=b"body", serialize_type=SerializeType.ROCKETMQ),
    ):
        back = decode_frame(cmd.encode())
        assert (back.code, back.opaque, back.flag, back.remark, back.ext_fields, back.body) == (
            cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, cmd.body,
        )  # fmt: skip


def test_values_that_are_not_text_are_written_as_the_json_header_writes_them() -> None:
    odd = {"a": True, "b": None, "c": 5, "d": "x"}
    assert write_ext_fields(odd) == write_ext_fields({"a": "true", "c": "5", "d": "x"})  # type: ignore[dict-item]
