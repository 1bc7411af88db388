"""The JSON header writer gives json.dumps' bytes (fastjson's layout) for any field text."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.protocol.frame import (
    LONG_JSON_HEADER,
    RemotingCommand,
    decode_frame,
    decode_json_header,
    encode_json_header,
)

# Long ASCII texts (the quick path) with and without characters JSON escapes, and any other text.
ascii_text = st.text(st.characters(max_codepoint=0x7F), min_size=60, max_size=300)
any_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=80)
field_text = st.one_of(ascii_text, any_text, st.just(",".join(["7F000001000027D9000000000000ABCD"] * 50)))


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.text(max_size=8), field_text, max_size=5),
    st.one_of(st.none(), field_text),
    st.integers(0, 2**31 - 1),
)
def test_header_is_what_json_dumps_writes(ext_fields, remark, opaque) -> None:
    cmd = RemotingCommand(code=310, opaque=opaque, ext_fields=ext_fields, remark=remark)
    expected: dict[str, object] = {"code": 310, "extFields": ext_fields, "flag": 0, "language": "PYTHON"}
    expected["opaque"] = opaque
    if remark is not None:
        expected["remark"] = remark
    expected |= {"serializeTypeCurrentRPC": "JSON", "version": cmd.version}
    assert encode_json_header(cmd) == json.dumps(expected, ensure_ascii=False, separators=(",", ":")).encode()
    back = decode_frame(cmd.encode())
    assert (back.ext_fields, back.remark, back.opaque) == (ext_fields, remark, opaque)


# Headers over LONG_JSON_HEADER, whose msgId the decoder cuts out before json.loads: plain offset ids,
# and values or other fields holding what could mislead the cut (escapes, quotes, the key's own text).
tricky_text = st.sampled_from(['"msgId":"', '\\"msgId\\":\\"', ',"msgId":"x"', "\\", '"', "\u00e9", "\x01", ""])
long_value = st.builds(
    lambda ids, inner: ",".join(["7F000001000027D9000000000000ABCD"] * ids) + inner,
    st.integers(LONG_JSON_HEADER // 33 + 1, LONG_JSON_HEADER // 33 + 20),
    tricky_text,
)


@settings(max_examples=200, deadline=None)
@given(
    long_value,
    st.dictionaries(st.sampled_from(["queueId", "a", "msgIdx", "MSG_REGION"]), st.one_of(any_text, tricky_text)),
    st.one_of(st.none(), any_text, tricky_text),
)
def test_long_header_decodes_as_json_loads_reads_it(msg_id, others, remark) -> None:
    cmd = RemotingCommand(code=0, opaque=7, flag=1, ext_fields={**others, "msgId": msg_id}, remark=remark)
    header = encode_json_header(cmd)
    assert len(header) > LONG_JSON_HEADER
    expected = json.loads(header)
    back = decode_json_header(header)
    assert back.ext_fields == expected["extFields"]
    assert back.remark == expected.get("remark")
    assert (back.code, back.opaque, back.flag) == (0, 7, 1)


def test_long_header_without_msg_id_and_with_a_non_string_msg_id() -> None:
    filler = "x" * (LONG_JSON_HEADER + 1)
    plain = json.dumps({"code": 0, "extFields": {"other": filler}, "opaque": 1}).encode()
    assert decode_json_header(plain).ext_fields == {"other": filler}
    numeric = json.dumps({"code": 0, "extFields": {"msgId": 5, "other": filler}, "opaque": 1}).encode()
    assert decode_json_header(numeric).ext_fields == {"msgId": "5", "other": filler}
    in_remark = json.dumps({"code": 0, "remark": '{"msgId":"' + filler, "opaque": 1}).encode()
    assert decode_json_header(in_remark).remark == '{"msgId":"' + filler


def test_msg_id_text_inside_another_key_is_not_taken_for_the_key() -> None:
    # The key a"msgId is written a\"msgId: its text holds "msgId":" after an escaped quote.
    fields = {'a"msgId': "7F000001000027D9000000000000ABCD," * 600, "msgId": ""}
    header = encode_json_header(RemotingCommand(code=0, ext_fields=fields))
    assert len(header) > LONG_JSON_HEADER
    assert decode_json_header(header).ext_fields == fields
