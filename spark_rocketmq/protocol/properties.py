"""A message's properties string as the send path encodes it, byte-identical to message_properties.

``message_properties`` computes the Java HashMap order of every message's property names; that order
depends only on the sequence of names, so it is computed once per sequence here (a str.format template
for the common tags / keys / WAIT / UNIQ_KEY shape). Delayed messages, and anything to refuse, go
through ``message_properties`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from .javamap import hashmap_order, hashmap_order_of
from .message import (
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    RESERVED_PROPERTY_NAMES,
    Message,
    encode_properties,
    message_properties,
)


@lru_cache(maxsize=16)
def simple_properties_template(has_tags: bool, has_keys: bool, wait: bool) -> str:
    """A str.format template of the properties: {0} tags, {1} keys, {2} UNIQ_KEY, in HashMap order."""
    names = []
    if has_tags:
        names.append(PROPERTY_TAGS)
    if has_keys:
        names.append(PROPERTY_KEYS)
    names += [PROPERTY_WAIT_STORE_MSG_OK, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
    slots = {
        PROPERTY_TAGS: "{0}",
        PROPERTY_KEYS: "{1}",
        PROPERTY_WAIT_STORE_MSG_OK: "true" if wait else "false",
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "{2}",
    }
    return PROPERTY_SEPARATOR.join(f"{name}{NAME_VALUE_SEPARATOR}{slots[name]}" for name in hashmap_order(names))


def _plain_property(name: object, value: object) -> bool:
    """A user property that encodes as it is: strings, not blank, not reserved, no separators."""
    return (
        isinstance(name, str)
        and isinstance(value, str)
        and bool(name.strip())
        and bool(value.strip())
        and name not in RESERVED_PROPERTY_NAMES
        and not _bad_text(name)
        and not _bad_text(value)
    )


def _with_user_properties(msg: Message, uniq_key: str, extra: Mapping[str, str] | None) -> str:
    """Messages with user properties or properties the sender adds (a half message's, a namespace's):
    message_properties' layout, the order cached per name sequence."""
    props = msg.properties or {}
    for name, value in props.items():
        if not _plain_property(name, value):
            return encode_properties(message_properties(msg, uniq_key, extra))  # raises naming the property
    values: dict[str, str] = {}
    tags = msg.tags
    if tags:
        values[PROPERTY_TAGS] = tags
    keys = msg.keys_string
    if keys:
        values[PROPERTY_KEYS] = keys
    for text in (tags, keys):
        if text and (NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text):
            return encode_properties(message_properties(msg, uniq_key, extra))
    values[PROPERTY_WAIT_STORE_MSG_OK] = "true" if msg.wait_store_msg_ok else "false"
    values.update(props)
    if msg._extra:
        values.update(msg._extra)
    if extra:
        values.update(extra)
    values[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_key
    return _pairs_format(tuple(values)).format(*values.values())


@lru_cache(maxsize=256)
def _around_uniq_key(wait: bool, extra: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """_with_user_properties of a message with no tags, keys or properties of its own and these ``extra``
    ones (a half message's; a sink task sends every row with the same), as the text before and after the
    UNIQ_KEY's value: laid out by _pairs_format around a marker that no name or value holds."""
    values = {PROPERTY_WAIT_STORE_MSG_OK: "true" if wait else "false"}
    values.update(extra)
    texts = [*values, *map(str, values.values())]
    marker = "\x00"
    while any(marker in text for text in texts):
        marker += "\x00"
    values[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = marker
    before, after = _pairs_format(tuple(values)).format(*values.values()).split(marker)
    return before, after


@lru_cache(maxsize=1024)
def _pairs_format(names: tuple[str, ...]) -> str:
    """A str.format template that writes values given in ``names``' order as name/value pairs in the Java
    HashMap's order of those names (braces in a name written as they are)."""
    position = {name: i for i, name in enumerate(names)}
    return PROPERTY_SEPARATOR.join(
        name.replace("{", "{{").replace("}", "}}") + f"{NAME_VALUE_SEPARATOR}{{{position[name]}}}"
        for name in hashmap_order_of(names)
    )


def encoded_properties(msg: Message, uniq_key: str, extra: Mapping[str, str] | None = None) -> str:
    """encode_properties(message_properties(msg, uniq_key, extra)), with the HashMap order computed once per shape."""
    if msg.delay_level or msg.is_timer:
        return encode_properties(message_properties(msg, uniq_key, extra))
    if msg.properties or msg._extra or extra:
        if extra and not (msg.properties or msg._extra or msg.tags or msg.keys_string):
            try:  # only the UNIQ_KEY changes from message to message: the rest laid out once per shape
                before, after = _around_uniq_key(bool(msg.wait_store_msg_ok), tuple(extra.items()))
            except TypeError:  # an extra value that cannot be a cache key: laid out for this message alone
                return _with_user_properties(msg, uniq_key, extra)
            return before + uniq_key + after
        return _with_user_properties(msg, uniq_key, extra)
    tags = msg.tags or None
    keys = msg.keys
    if keys is not None and not isinstance(keys, str):
        keys = " ".join(keys)
    keys = keys or None
    if (tags is not None and (NAME_VALUE_SEPARATOR in tags or PROPERTY_SEPARATOR in tags)) or (
        keys is not None and (NAME_VALUE_SEPARATOR in keys or PROPERTY_SEPARATOR in keys)
    ):
        return encode_properties(message_properties(msg, uniq_key))  # raises with the full message
    template = simple_properties_template(tags is not None, keys is not None, bool(msg.wait_store_msg_ok))
    # format() reads braces in the template only; braces inside the values are copied as they are.
    return template.format(tags, keys, uniq_key)


def _bad_text(text: str | None) -> bool:
    if not text:
        return False
    return NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text


def properties_need_full_check(msg: Message) -> bool:
    """False when the message's properties surely encode fine and within the length limit.

    True means: run message_properties / the exact length check (they raise with the reason).
    """
    if msg.delay_level or msg._extra or msg.is_timer:
        return True
    tags = msg.tags
    keys = msg.keys_string
    if _bad_text(tags) or _bad_text(keys):
        return True
    chars = 64 + len(tags or "") + len(keys or "")  # 64: WAIT and UNIQ_KEY with separators
    for name, value in (msg.properties or {}).items():
        if not _plain_property(name, value):
            return True
        chars += len(name) + len(value) + 2
    return chars * 4 > MAX_PROPERTIES_LENGTH  # UTF-8 takes at most 4 bytes a character


def properties_size_bound(msg: Message) -> int:
    """An upper bound of the encoded properties' length in bytes (for messages that passed the check above)."""
    chars = 64 + len(msg.tags or "") + len(msg.keys_string or "")
    for name, value in (msg.properties or {}).items():
        chars += len(name) + len(value) + 2
    return chars * 4
