"""The JSON header writer gives json.dumps' bytes (fastjson's layout) for any field text."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_rocketmq.protocol.command import RemotingCommand, encode_json_header
from spark_rocketmq.protocol.frame import decode_frame

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
