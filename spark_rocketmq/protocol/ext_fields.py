"""extFields in the ROCKETMQ serialization (RocketMQSerializable's map): written from a dict or an
ExtFieldsTemplate, read entry by entry or, for a shape seen before, by one pattern match."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from ..errors import ProtocolError


def as_string_map(fields: Mapping[str, str]) -> Mapping[str, str]:
    """extFields with string values only (the JSON header's and this serialization's): None left out,
    booleans as Java writes them, the rest as text; the map itself when it holds strings only."""
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


#: Four-byte big-endian lengths of short values (an integer's digits), made once.
_LENGTHS = tuple(n.to_bytes(4, "big") for n in range(64))


def length_word(n: int) -> bytes:
    """A 4-byte big-endian length, as the ROCKETMQ serialization writes before a value."""
    return _LENGTHS[n] if n < 64 else n.to_bytes(4, "big")


def write_ext_fields(fields: Mapping[str, str]) -> bytes:
    """extFields in the ROCKETMQ serialization, in the given order: per entry a 2-byte key length, the
    key, a 4-byte value length, the value (UTF-8)."""
    out: list[bytes] = []
    for key, value in fields.items():
        if type(value) is not str:  # None left out, booleans as Java writes them, the rest as text
            return write_ext_fields(as_string_map(fields))
        v = value.encode("utf-8")
        out += (_KEY_HEADS.get(key) or _key_head(key), length_word(len(v)), v)
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
            re.escape(len(key).to_bytes(2, "big").decode("latin-1") + key + length_word(n).decode("latin-1"))
            + f"(.{{{n}}})"
            for key, n in zip(*shape, strict=True)
        )
        match: Callable[[str], re.Match[str] | None] = re.compile(pattern, re.DOTALL).fullmatch
        known = ((match, keys), *self.known)
        self.known = known[: self.MAX_SHAPES]  # one assignment: readers on other threads see either tuple


_shapes = _Shapes()


class ExtFieldsTemplate:
    """The extFields of one kind of request whose fields but a few (the slots) are the same request after
    request, in the ROCKETMQ serialization: the fixed entries are written once, and ``render`` puts in
    the slots' values (an integer as its digits, a text as UTF-8), each after its length. The same bytes
    as write_ext_fields, without a dict, a HashMap order or an encoding of every field per request."""

    __slots__ = ("_lead", "_slots")

    def __init__(self, fields: Mapping[str, str], slots: Sequence[str]) -> None:
        """``fields``: every entry in wire order (a slot's value is ignored); ``slots``: the names of the
        entries that ``render`` fills, in the order of its arguments."""
        missing = [name for name in slots if name not in fields]
        if missing:
            raise ValueError(f"slots {missing} are not among the fields")
        position = {name: i for i, name in enumerate(slots)}
        # The fixed bytes before the first slot's value, then per slot: its argument's position and the fixed
        # bytes after its value (up to the next slot's value).
        text: list[bytes] = []
        order: list[tuple[int, bytes]] = []
        for key, value in as_string_map(fields).items():
            if key in position:
                text.append(_key_head(key))  # then the value's length, the value
                order.append((position[key], b"".join(text)))
                text = []
            else:
                text.append(write_ext_fields({key: value}))
        order.append((-1, b"".join(text)))
        self._lead = order[0][1]
        # (slot, bytes after its value): each slot's own entry head moves to the end of the piece before it.
        self._slots = tuple((order[i][0], order[i + 1][1]) for i in range(len(order) - 1))

    def render(self, *values: int | str) -> bytes:
        """The entries with these slot values (in the slots' order)."""
        out = [self._lead]
        lengths = _LENGTHS
        for i, after in self._slots:
            value = values[i]
            v = b"%d" % value if type(value) is int else value.encode("utf-8")  # type: ignore[union-attr]
            n = len(v)
            out += (lengths[n] if n < 64 else n.to_bytes(4, "big"), v, after)  # length_word, without a call
        return b"".join(out)
