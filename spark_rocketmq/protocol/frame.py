"""Reading frames: a frame's bytes to a RemotingCommand (either header serialization), and the
stream splitter a connection feeds (NettyDecoder's job). Commands are written by command.py."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProtocolError
from .codes import LanguageCode, SerializeType
from .command import ROCKETMQ_FIXED, RemotingCommand
from .ext_fields import read_ext_fields

#: Largest frame a Netty-based RocketMQ peer accepts (com.rocketmq.remoting.frameMaxLength).
MAX_FRAME_LENGTH = 16 * 1024 * 1024
_LANGUAGE_NAME = {int(c): c.name for c in LanguageCode}


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
    code, lang, version, opaque, flag = ROCKETMQ_FIXED.unpack_from(raw, 0)
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
