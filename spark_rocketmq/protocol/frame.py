"""Remoting frames: RemotingCommand and its two header serializations.

Frame layout (RemotingCommand.encode / NettyDecoder)::

    [4 big-endian: length of all that follows]
    [4: high byte serialize type (0 JSON, 1 ROCKETMQ), low 3 bytes header length]
    [header][body]

The JSON header is written as fastjson writes it: top-level keys sorted by name, null fields
left out, extFields values always strings, in the order the caller gave them.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from ..errors import ProtocolError
from .codes import MQ_VERSION_V4_9_8, LanguageCode, SerializeType

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

#: Largest frame a Netty-based RocketMQ peer accepts (com.rocketmq.remoting.frameMaxLength).
MAX_FRAME_LENGTH = 16 * 1024 * 1024

_LANGUAGE_BY_NAME = {c.name: c for c in LanguageCode}


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
    #: extFields already written as fastjson writes them (headers.SendHeaderTemplate), in place of
    #: ext_fields; read back into ext_fields on first use (``fields``).
    ext_json: str | None = None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def fields(self) -> dict[str, str] | None:
        """extFields as a dict (one written as JSON text is parsed once, and kept as the dict from then on)."""
        if self.ext_json is not None:
            self.ext_fields = json.loads(self.ext_json)
            self.ext_json = None
        return self.ext_fields

    def field(self, name: str, default: str | None = None) -> str | None:
        ext = self.ext_fields if self.ext_json is None else self.fields()
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
            self.fields()
            return encode_rocketmq_header(self)
        return encode_json_header(self)

    def encode_parts(self) -> tuple[bytes, bytes | memoryview]:
        """The frame as (length words + header, body): written as two buffers, the body is never copied."""
        header = self.encode_header()
        body = self.body or b""
        return _HEAD.pack(4 + len(header) + len(body), (int(self.serialize_type) << 24) | len(header)) + header, body

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


def _json_string_map(fields: Mapping[str, str]) -> Mapping[str, str]:
    if all(type(v) is str for v in fields.values()):
        return fields
    out: dict[str, str] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = value if isinstance(value, str) else str(value)
    return out


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


class ExtFieldsTemplate:
    """The extFields JSON of one kind of request whose fields but a few are the same request after
    request: written once by ext_fields_json from fields holding a marker in place of each value that
    changes, then ``format(**values)`` puts those in (an integer as it is, a text slot already quoted by
    json.encoder.encode_basestring): the same text, without a dict, a HashMap order and an encoding per
    request. ValueError when a marker is not found exactly once (a fixed field holds its text)."""

    __slots__ = ("format",)

    def __init__(self, marked: Mapping[str, str], *, ints: Mapping[str, str], texts: Mapping[str, str]) -> None:
        text = ext_fields_json(marked).replace("{", "{{").replace("}", "}}")
        pieces = [(f'"{mark}"', f'"{{{slot}}}"') for slot, mark in ints.items()]
        pieces += [(encode_basestring(mark), f"{{{slot}}}") for slot, mark in texts.items()]
        for mark, slot in pieces:
            if text.count(mark) != 1:
                raise ValueError(f"cannot make an extFields template: {mark!r} occurs {text.count(mark)} times")
            text = text.replace(mark, slot)
        self.format: Callable[..., str] = text.format


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The header as fastjson writes it: keys in name order, no spaces, no null fields."""
    ext_json = cmd.ext_json
    if ext_json is None and cmd.ext_fields is not None:
        ext_json = ext_fields_json(_json_string_map(cmd.ext_fields))
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


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    try:
        lang = int(_LANGUAGE_BY_NAME[cmd.language])
    except KeyError:
        raise ProtocolError(f"unknown language {cmd.language!r}") from None
    remark = cmd.remark.encode("utf-8") if cmd.remark is not None else b""
    ext = bytearray()
    if cmd.ext_fields:
        for key, value in _json_string_map(cmd.ext_fields).items():
            k = key.encode("utf-8")
            v = value.encode("utf-8")
            ext += struct.pack(">H", len(k)) + k + struct.pack(">I", len(v)) + v
    return b"".join(
        (
            struct.pack(">hbhii", int(cmd.code), lang, int(cmd.version), int(cmd.opaque), int(cmd.flag)),
            struct.pack(">i", len(remark)),
            remark,
            struct.pack(">i", len(ext)),
            bytes(ext),
        )
    )


# -- decoding -----------------------------------------------------------------------------------
def decode_frame_body(data: bytes | memoryview, *, copy_body: bool = True) -> RemotingCommand:
    """Decode a frame without its 4-byte length prefix. ``copy_body=False`` leaves the body a view
    of ``data`` (for a buffer that belongs to this frame alone)."""
    data = memoryview(data)
    if len(data) < 4:
        raise ProtocolError(f"frame of {len(data)} bytes is shorter than its 4-byte header word")
    (word,) = struct.unpack_from(">I", data, 0)
    ser = word >> 24
    header_len = word & 0xFFFFFF
    if header_len > len(data) - 4:
        raise ProtocolError(f"header length {header_len} exceeds the frame ({len(data) - 4} bytes left)")
    header = data[4 : 4 + header_len]
    body = bytes(data[4 + header_len :]) if copy_body else data[4 + header_len :]
    if ser == SerializeType.JSON:
        cmd = decode_json_header(bytes(header))
    elif ser == SerializeType.ROCKETMQ:
        cmd = decode_rocketmq_header(header)
    else:
        raise ProtocolError(f"unknown header serialize type {ser}")
    cmd.body = body
    return cmd


def decode_frame(data: bytes | memoryview) -> RemotingCommand:
    """Decode one complete frame, length prefix included."""
    data = memoryview(data)
    if len(data) < 4:
        raise ProtocolError("frame shorter than its length prefix")
    (length,) = struct.unpack_from(">I", data, 0)
    if length != len(data) - 4:
        raise ProtocolError(f"length prefix {length} does not match the {len(data) - 4} bytes that follow")
    return decode_frame_body(data[4:])


def _as_int(obj: Mapping[str, object], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.lstrip("-").isdigit():
            try:
                return int(value)
            except ValueError:  # "--5", "²": isdigit() is wider than int()
                pass
        raise ProtocolError(f"header field {key!r} is not an integer: {value!r}")
    return value


#: A JSON header longer than this may carry a batch answer's msgId (33 characters a message).
LONG_JSON_HEADER = 16 * 1024
_MSG_ID_KEY = b'"msgId":"'


def decode_json_header(raw: bytes) -> RemotingCommand:
    """A JSON header. A batch answer's long msgId is cut out of the text before json.loads and put
    back as it is: parsing the rest costs a fraction of parsing it all (the value of a few thousand
    offset ids is most of the header)."""
    if len(raw) > LONG_JSON_HEADER:
        cut = _cut_msg_id(raw)
        if cut is not None:
            rest, msg_id = cut
            cmd = _decode_json_header(rest)
            if cmd.ext_fields is not None and cmd.ext_fields.get("msgId") == "":
                cmd.ext_fields["msgId"] = msg_id
                return cmd
    return _decode_json_header(raw)


def _cut_msg_id(raw: bytes) -> tuple[bytes, str] | None:
    """(the header with an empty msgId, msgId's value) when the header has a msgId key whose value
    holds no escape; else None (parse it whole). A value with an escape would end at its first
    escaped quote here, so any backslash sends it to json.loads."""
    key = raw.find(_MSG_ID_KEY)
    if key <= 0 or raw[key - 1] not in b"{,":  # a key, not text inside a string
        return None
    start = key + len(_MSG_ID_KEY)
    end = raw.find(b'"', start)
    if end < 0:
        return None
    value = raw[start:end]
    if b"\\" in value:
        return None
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return raw[:start] + raw[end:], text


#: json's C scanner of one value: what json.loads runs, without its two layers of Python calls.
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _decode_json_header(raw: bytes) -> RemotingCommand:
    try:
        text = raw.decode("utf-8")
        try:
            obj, end = _scan_json(text, 0)
        except StopIteration:  # not a value at the first character (whitespace, garbage): json.loads says why
            end = -1
        if end != len(text):
            obj = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, huge integers
        raise ProtocolError(f"header is not JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("JSON header is not an object")
    ext = obj.get("extFields")
    if ext is not None:
        if not isinstance(ext, dict):
            raise ProtocolError("extFields is not an object")
        if not set(map(type, ext.values())) <= _STR_ONLY:  # values are strings but for odd peers
            ext = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in ext.items()}
    remark = obj.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise ProtocolError("remark is not a string")
    language = obj.get("language", "JAVA")
    if not isinstance(language, str):
        raise ProtocolError("language is not a string")
    code = obj.get("code")
    opaque = obj.get("opaque", 0)
    flag = obj.get("flag", 0)
    version = obj.get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int):
        code, opaque, flag, version = (_as_int(obj, k, d) for k, d in _INT_FIELDS)  # strings, or refused
    return RemotingCommand(code, opaque, flag, ext, remark, b"", language, version, SerializeType.JSON)


_STR_ONLY = frozenset([str])
#: The header's integer fields and their defaults (code has none).
_INT_FIELDS: tuple[tuple[str, int | None], ...] = (("code", None), ("opaque", 0), ("flag", 0), ("version", 0))


def decode_rocketmq_header(raw: bytes | memoryview) -> RemotingCommand:
    raw = memoryview(raw)
    try:
        code, lang, version, opaque, flag, remark_len = struct.unpack_from(">hbhiii", raw, 0)
        pos = 17
        if remark_len < 0 or pos + remark_len > len(raw):
            raise ProtocolError(f"remark length {remark_len} runs past the header")
        remark = bytes(raw[pos : pos + remark_len]).decode("utf-8") if remark_len > 0 else None
        pos += remark_len
        (ext_len,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len > len(raw):
            raise ProtocolError(f"extFields length {ext_len} runs past the header")
        end = pos + ext_len
        ext: dict[str, str] | None = {} if ext_len > 0 else None
        while pos < end:
            (klen,) = struct.unpack_from(">H", raw, pos)
            pos += 2
            key = bytes(raw[pos : pos + klen]).decode("utf-8")
            pos += klen
            (vlen,) = struct.unpack_from(">i", raw, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise ProtocolError(f"extFields value length {vlen} runs past the header")
            assert ext is not None
            ext[key] = bytes(raw[pos : pos + vlen]).decode("utf-8")
            pos += vlen
        if pos != end:
            raise ProtocolError("extFields entries overrun their declared length")
    except struct.error as exc:
        raise ProtocolError(f"truncated ROCKETMQ header: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"ROCKETMQ header holds invalid UTF-8: {exc}") from None
    try:
        language = LanguageCode(lang).name
    except ValueError:
        language = f"UNKNOWN({lang})"
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        ext_fields=ext,
        remark=remark,
        language=language,
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


@dataclass
class FrameDecoder:
    """Incremental frame splitter: feed it bytes as they arrive, take whole commands out.

    Raises ProtocolError on an absurd length, after which the stream is unusable.
    """

    max_frame_length: int = MAX_FRAME_LENGTH
    _buf: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes | memoryview) -> list[RemotingCommand]:
        """Add bytes; return the commands now complete, in order. Each frame is decoded from a view of
        the buffer: its body is copied once, into the command."""
        self._buf += data
        buf = self._buf
        out: list[RemotingCommand] = []
        pos = 0
        with memoryview(buf) as view:
            while len(buf) - pos >= 4:
                (length,) = struct.unpack_from(">I", buf, pos)
                if length < 4 or length > self.max_frame_length:
                    raise ProtocolError(
                        f"frame length {length} is outside 4..{self.max_frame_length}: not a RocketMQ peer?"
                    )
                if len(buf) - pos - 4 < length:
                    break
                out.append(decode_frame_body(view[pos + 4 : pos + 4 + length]))
                pos += 4 + length
        # Only after a clean pass: a ProtocolError leaves the stream unusable, and its traceback may
        # still hold views of the buffer, which could then not be resized.
        if pos:
            del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def pending_frame_length(self) -> int | None:
        """The length of the incomplete frame the buffer starts with (after feed), None if not known yet."""
        if len(self._buf) < 4:
            return None
        (length,) = struct.unpack_from(">I", self._buf, 0)
        return int(length)

    def take_pending(self, frame: bytearray) -> int:
        """Move the buffered start of the pending frame (length word left out) into ``frame``, a
        buffer of pending_frame_length() bytes; the number of bytes moved."""
        taken = len(self._buf) - 4
        frame[:taken] = memoryview(self._buf)[4:]
        self._buf.clear()
        return taken
