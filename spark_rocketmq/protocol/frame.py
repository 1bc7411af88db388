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
import re
import struct
from collections.abc import Callable, Mapping, Sequence
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


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The header as fastjson writes it: keys in name order, no spaces, no null fields."""
    ext_json = None if cmd.ext_fields is None else ext_fields_json(_json_string_map(cmd.ext_fields))
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
_ROCKETMQ_FIXED = struct.Struct(">hbhii")
_LANGUAGE_CODE = {c.name: int(c) for c in LanguageCode}
_LANGUAGE_NAME = {int(c): c.name for c in LanguageCode}
#: Four-byte big-endian lengths of short values (an integer's digits), made once.
_LENGTHS = tuple(n.to_bytes(4, "big") for n in range(64))


def _length(n: int) -> bytes:
    return _LENGTHS[n] if n < 64 else n.to_bytes(4, "big")


def write_ext_fields(fields: Mapping[str, str]) -> bytes:
    """extFields in the ROCKETMQ serialization, in the given order: per entry a 2-byte key length, the
    key, a 4-byte value length, the value (UTF-8)."""
    out: list[bytes] = []
    for key, value in fields.items():
        if type(value) is not str:  # None left out, booleans as Java writes them, the rest as text
            return write_ext_fields(_json_string_map(fields))
        v = value.encode("utf-8")
        out += (_KEY_HEADS.get(key) or _key_head(key), _length(len(v)), v)
    return b"".join(out)


#: A key's length and UTF-8 bytes, kept for the header field names a process writes over and over.
_KEY_HEADS: dict[str, bytes] = {}
_MAX_KEY_HEADS = 1024


def _key_head(key: str) -> bytes:
    """An entry's start: the key's 2-byte length and its UTF-8 bytes."""
    k = key.encode("utf-8")
    head = len(k).to_bytes(2, "big") + k
    if len(_KEY_HEADS) < _MAX_KEY_HEADS:
        _KEY_HEADS[key] = head
    return head


def read_ext_fields(raw: bytes, pos: int, end: int) -> dict[str, str]:
    """The extFields entries of ``raw[pos:end]`` (the caller checked that ``end`` is within ``raw``): by a
    shape already seen twice (one regular-expression match, _Shapes), else entry by entry."""
    if end - pos <= _Shapes.MAX_TEXT:
        try:
            text = raw[pos:end].decode("ascii")
        except UnicodeDecodeError:  # a value that is not ASCII, or a length byte over 0x7F
            return _read_entries(raw, pos, end)
        for match, keys in _shapes.known:
            m = match(text)
            if m is not None:
                return dict(zip(keys, m.groups(), strict=True))
        ext = _read_entries(raw, pos, end)
        _shapes.seen(ext)
        return ext
    return _read_entries(raw, pos, end)


def _read_entries(raw: bytes, pos: int, end: int) -> dict[str, str]:
    ext: dict[str, str] = {}
    try:
        while pos < end:
            key_end = pos + 2 + ((raw[pos] << 8) | raw[pos + 1])
            value_end = key_end + 4 + int.from_bytes(raw[key_end : key_end + 4], "big")
            if value_end > end:
                raise ProtocolError("an extFields entry runs past the map's declared length")
            ext[raw[pos + 2 : key_end].decode("utf-8")] = raw[key_end + 4 : value_end].decode("utf-8")
            pos = value_end
    except IndexError:
        raise ProtocolError("an extFields entry runs past the header") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"ROCKETMQ header holds invalid UTF-8: {exc}") from None
    return ext


class _Shapes:
    """extFields shapes (the keys in order and each value's length) seen more than once, as patterns:
    an answer of a kind a connection reads over and over (a send's msgId, queueId, queueOffset...) is
    then read by one match of its ASCII text instead of a Python step per entry. A text that matches a
    shape's pattern is that shape's entries by construction: the pattern is each entry's exact key and
    length bytes, then any characters, as many as the length says."""

    #: Shapes kept (the oldest goes), candidates counted before they are forgotten, longest text tried.
    MAX_SHAPES = 8
    MAX_CANDIDATES = 1024
    MAX_TEXT = 512

    def __init__(self) -> None:
        self.known: tuple[tuple[Callable[[str], re.Match[str] | None], tuple[str, ...]], ...] = ()
        self._candidates: dict[tuple[tuple[str, ...], tuple[int, ...]], int] = {}

    def seen(self, ext: dict[str, str]) -> None:
        """An ASCII extFields map read entry by entry: its shape is learnt the second time it is seen."""
        keys = tuple(ext)
        shape = (keys, tuple(map(len, ext.values())))
        if self._candidates.get(shape, 0) == 0:
            if len(self._candidates) >= self.MAX_CANDIDATES:
                self._candidates.clear()
            self._candidates[shape] = 1
            return
        self._candidates.pop(shape, None)
        pattern = "".join(
            re.escape(len(key).to_bytes(2, "big").decode("latin-1") + key + _length(n).decode("latin-1"))
            + f"(.{{{n}}})"
            for key, n in zip(*shape, strict=True)
        )
        match: Callable[[str], re.Match[str] | None] = re.compile(pattern, re.DOTALL).fullmatch
        known = ((match, keys), *self.known)
        self.known = known[: self.MAX_SHAPES]  # one assignment: readers on other threads see either tuple


_shapes = _Shapes()


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
            _ROCKETMQ_FIXED.pack(code, language, version, opaque, flag),
            _length(len(remark)),
            remark,
            _length(len(ext)),
            ext,
        )
    )


_PYTHON = _LANGUAGE_CODE["PYTHON"]


def rocketmq_request_head(code: int, opaque: int, ext: bytes) -> bytes:
    """The length words and header of a body-less request in the ROCKETMQ serialization, from its extFields
    bytes (an ExtFieldsTemplate's render): the bytes of ``RemotingCommand(code, opaque=opaque,
    serialize_type=ROCKETMQ, ext_bytes=ext).encode()``, without making the command."""
    header = _rocketmq_header(code, _PYTHON, MQ_VERSION_V4_9_8, opaque, 0, b"", ext)
    return _frame_head(SerializeType.ROCKETMQ, header, 0) + header


def _frame_head(serialize_type: int, header: bytes, body_length: int) -> bytes:
    """The frame's two length words: the frame's length, then the serialize type and the header's length."""
    return _HEAD.pack(4 + len(header) + body_length, (serialize_type << 24) | len(header))


class ExtFieldsTemplate:
    """The extFields of one kind of request whose fields but a few (the slots) are the same request after
    request, in the ROCKETMQ serialization: the fixed entries are written once, and ``render`` puts in
    the slots' values (an integer as its digits, a text as UTF-8), each after its length. The same bytes
    as write_ext_fields, without a dict, a HashMap order or an encoding of every field per request."""

    __slots__ = ("_format", "_slots")

    def __init__(self, fields: Mapping[str, str], slots: Sequence[str]) -> None:
        """``fields``: every entry in wire order (a slot's value is ignored); ``slots``: the names of the
        entries that ``render`` fills, in the order of its arguments."""
        missing = [name for name in slots if name not in fields]
        if missing:
            raise ValueError(f"slots {missing} are not among the fields")
        position = {name: i for i, name in enumerate(slots)}
        text: list[bytes] = []
        order: list[int] = []
        for key, value in _json_string_map(fields).items():
            if key in position:
                text.append(_key_head(key).replace(b"%", b"%%") + b"%b%b")  # then the value's length, the value
                order.append(position[key])
            else:
                text.append(write_ext_fields({key: value}).replace(b"%", b"%%"))
        self._format = b"".join(text)
        self._slots = tuple(order)

    def render(self, *values: int | str) -> bytes:
        """The entries with these slot values (in the slots' order)."""
        args: list[bytes] = []
        for i in self._slots:
            value = values[i]
            v = b"%d" % value if type(value) is int else value.encode("utf-8")  # type: ignore[union-attr]
            args += (_length(len(v)), v)
        return self._format % tuple(args)


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


#: json's C scanner of one value: what json.loads runs, without its two layers of Python calls.
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_json_header(raw: bytes) -> RemotingCommand:
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
    raw = bytes(raw)
    if len(raw) < 21:
        raise ProtocolError(f"truncated ROCKETMQ header: {len(raw)} bytes")
    code, lang, version, opaque, flag = _ROCKETMQ_FIXED.unpack_from(raw, 0)
    remark_end = 17 + int.from_bytes(raw[13:17], "big", signed=True)
    if remark_end < 17 or remark_end + 4 > len(raw):
        raise ProtocolError(f"remark length {remark_end - 17} runs past the header")
    try:
        remark = raw[17:remark_end].decode("utf-8") if remark_end > 17 else None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"ROCKETMQ header holds invalid UTF-8: {exc}") from None
    end = remark_end + 4 + int.from_bytes(raw[remark_end : remark_end + 4], "big", signed=True)
    if end < remark_end + 4 or end > len(raw):
        raise ProtocolError(f"extFields length {end - remark_end - 4} runs past the header")
    ext = read_ext_fields(raw, remark_end + 4, end) if end > remark_end + 4 else None
    language = _LANGUAGE_NAME.get(lang) or f"UNKNOWN({lang})"
    return RemotingCommand(code, opaque, flag, ext, remark, b"", language, version, SerializeType.ROCKETMQ)


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
