"""RemotingCommand: one request or response, and how it is written as a frame in either header
serialization.

Frame layout (RemotingCommand.encode / NettyDecoder)::

    [4 big-endian: length of all that follows]
    [4: high byte serialize type (0 JSON, 1 ROCKETMQ), low 3 bytes header length]
    [header][body]

The JSON header is written as fastjson writes it: top-level keys sorted by name, null fields
left out, extFields values always strings, in the order the caller gave them. Frames are read
back by frame.py.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]

from ..errors import ProtocolError
from .codes import MQ_VERSION_V4_9_8, LanguageCode, SerializeType
from .ext_fields import as_string_map, length_word, read_ext_fields, write_ext_fields

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2


def java_bool(value: str | None) -> bool:
    """A boolean extFields value as decodeCommandCustomHeader reads it (Boolean.parseBoolean: "true"
    in any case is true; anything else, or absent, is false)."""
    return value is not None and value.lower() == "true"


_HEAD = struct.Struct(">II")


@dataclass
class RemotingCommand:
    """One request or response on a remoting connection."""

    code: int
    opaque: int = 0
    flag: int = 0
    ext_fields: dict[str, str] | None = None
    remark: str | None = None
    body: bytes | memoryview = b""
    language: str = "PYTHON"
    version: int = MQ_VERSION_V4_9_8
    serialize_type: SerializeType = SerializeType.JSON
    #: extFields already written in the ROCKETMQ serialization (an ExtFieldsTemplate's render), in place
    #: of ext_fields, for a command of that serialization; read into ext_fields on first use (``fields``).
    ext_bytes: bytes | None = None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def fields(self) -> dict[str, str] | None:
        """extFields as a dict (ones written as bytes are read once, and kept as the dict from then on)."""
        if self.ext_bytes is not None:
            self.ext_fields = read_ext_fields(self.ext_bytes, 0, len(self.ext_bytes)) if self.ext_bytes else None
            self.ext_bytes = None
        return self.ext_fields

    def field(self, name: str, default: str | None = None) -> str | None:
        ext = self.ext_fields if self.ext_bytes is None else self.fields()
        if ext is None:
            return default
        return ext.get(name, default)

    def require(self, name: str) -> str:
        """An extFields value the command cannot do without."""
        value = self.field(name)
        if value is None:
            raise ProtocolError(f"request code {self.code} lacks the header field {name!r}")
        return value

    def int_field(self, name: str) -> int:
        value = self.require(name)
        try:
            return int(value)
        except ValueError:
            raise ProtocolError(f"header field {name!r} is not an integer: {value[:40]!r}") from None

    # -- encoding -------------------------------------------------------------------------------
    def encode_header(self) -> bytes:
        if self.serialize_type == SerializeType.ROCKETMQ:
            return encode_rocketmq_header(self)
        self.fields()
        return encode_json_header(self)

    def encode_parts(self) -> tuple[bytes, bytes | memoryview]:
        """The frame as (length words + header, body): written as two buffers, the body is never copied."""
        header = self.encode_header()
        body = self.body or b""
        return _frame_head(int(self.serialize_type), header, len(body)) + header, body

    def encode(self) -> bytes:
        head, body = self.encode_parts()
        return head + bytes(body)

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        language: str = "JAVA",
    ) -> RemotingCommand:
        """The answer to this request: same opaque and serialize type, response flag set."""
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            ext_fields=ext_fields,
            remark=remark,
            body=body,
            language=language,
            serialize_type=self.serialize_type,
        )


#: Printable ASCII but '"' and '\\': the characters a JSON string holds as they are.
_PLAIN_JSON_CHARS = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')


def _json_string(text: str) -> str:
    """A JSON string literal as json.dumps(ensure_ascii=False) writes it. A long ASCII string with
    nothing to escape (a batch answer's comma-joined msgId) is quoted as it is, found with one
    translate() of its bytes instead of a character-by-character escape."""
    if len(text) > 64 and text.isascii() and not text.encode("ascii").translate(None, _PLAIN_JSON_CHARS):
        return '"' + text + '"'
    return encode_basestring(text)


def _make_ext_fields_json() -> Callable[[Mapping[str, str]], str]:
    """extFields as fastjson writes a String map: in the given order, no spaces, non-ASCII as it is.
    json's C encoder made once (JSONEncoder.encode makes a new one per call), where there is one."""
    if c_make_encoder is None:
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

    def not_a_string(value: object) -> object:
        raise TypeError(f"extFields value {value!r} is not a string")

    encoder = c_make_encoder(None, not_a_string, encode_basestring, None, ":", ",", False, False, True)
    return lambda fields: "".join(encoder(fields, 0))


ext_fields_json = _make_ext_fields_json()


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The header as fastjson writes it: keys in name order, no spaces, no null fields."""
    ext_json = None if cmd.ext_fields is None else ext_fields_json(as_string_map(cmd.ext_fields))
    head, before_opaque, tail = _header_shape(int(cmd.code), int(cmd.flag), cmd.language, int(cmd.version))
    remark = cmd.remark
    return (
        head
        + ("" if ext_json is None else ',"extFields":' + ext_json)
        + before_opaque
        + str(int(cmd.opaque))
        + ("" if remark is None else ',"remark":' + _json_string(remark))
        + tail
    ).encode("utf-8")


@lru_cache(maxsize=256)
def _header_shape(code: int, flag: int, language: str, version: int) -> tuple[str, str, str]:
    """The JSON header's text around extFields, the opaque and the remark, for one code, flag, language
    and version (a connection writes a few such shapes over and over)."""
    return (
        f'{{"code":{code}',
        f',"flag":{flag},"language":{_json_string(language)},"opaque":',
        f',"serializeTypeCurrentRPC":"JSON","version":{version}}}',
    )


#: The ROCKETMQ header's fixed fields (RocketMQSerializable): code, language, version, opaque, flag.
ROCKETMQ_FIXED = struct.Struct(">hbhii")
_LANGUAGE_CODE = {c.name: int(c) for c in LanguageCode}


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    """The header as RocketMQSerializable writes it: code, language, version, opaque, flag, then the
    remark and the extFields, each after its 4-byte length."""
    try:
        language = _LANGUAGE_CODE[cmd.language]
    except KeyError:
        raise ProtocolError(f"unknown language {cmd.language!r}") from None
    ext = cmd.ext_bytes
    if ext is None:
        ext = b"" if cmd.ext_fields is None else write_ext_fields(cmd.ext_fields)
    remark = b"" if cmd.remark is None else cmd.remark.encode("utf-8")
    return _rocketmq_header(int(cmd.code), language, int(cmd.version), int(cmd.opaque), int(cmd.flag), remark, ext)


def _rocketmq_header(
    code: int, language: int, version: int, opaque: int, flag: int, remark: bytes, ext: bytes
) -> bytes:
    return b"".join(
        (
            ROCKETMQ_FIXED.pack(code, language, version, opaque, flag),
            length_word(len(remark)),
            remark,
            length_word(len(ext)),
            ext,
        )
    )


_PYTHON = _LANGUAGE_CODE["PYTHON"]


def rocketmq_request_head(code: int, opaque: int, ext: bytes, body_length: int = 0) -> bytes:
    """The length words and header of a request in the ROCKETMQ serialization, from its extFields bytes (an
    ExtFieldsTemplate's render) and its body's length: the first part of ``RemotingCommand(code,
    opaque=opaque, serialize_type=ROCKETMQ, ext_bytes=ext, body=body).encode_parts()``, without making the
    command."""
    header = _rocketmq_header(code, _PYTHON, MQ_VERSION_V4_9_8, opaque, 0, b"", ext)
    return _frame_head(SerializeType.ROCKETMQ, header, body_length) + header


def _frame_head(serialize_type: int, header: bytes, body_length: int) -> bytes:
    """The frame's two length words: the frame's length, then the serialize type and the header's length."""
    return _HEAD.pack(4 + len(header) + body_length, (serialize_type << 24) | len(header))
