"""Per-message encoding shortcuts of the send path, byte-identical to the protocol layer's general code.

``message_properties`` computes the Java HashMap order of every message's property names; for the
common message shape (tags, keys, WAIT, UNIQ_KEY, no user properties, no delay) the order depends
only on which of those names are present, so it is computed once per combination here. Every
other message goes through ``message_properties`` itself.
"""

from __future__ import annotations

from functools import lru_cache

from ..protocol.headers import SendMessageRequestHeader
from ..protocol.javamap import hashmap_order
from ..protocol.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    encode_properties,
    message_properties,
)


@lru_cache(maxsize=16)
def _simple_template(has_tags: bool, has_keys: bool, wait: bool) -> str:
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


def encoded_properties(msg: Message, uniq_key: str) -> str:
    """encode_properties(message_properties(msg, uniq_key)), faster for messages without user properties."""
    if msg.properties or msg.delay_level or msg._extra:
        return encode_properties(message_properties(msg, uniq_key))
    tags = msg.tags or None
    keys = msg.keys
    if keys is not None and not isinstance(keys, str):
        keys = " ".join(keys)
    keys = keys or None
    if (tags is not None and (NAME_VALUE_SEPARATOR in tags or PROPERTY_SEPARATOR in tags)) or (
        keys is not None and (NAME_VALUE_SEPARATOR in keys or PROPERTY_SEPARATOR in keys)
    ):
        return encode_properties(message_properties(msg, uniq_key))  # raises with the full message
    template = _simple_template(tags is not None, keys is not None, bool(msg.wait_store_msg_ok))
    # format() reads braces in the template only; braces inside the values are copied as they are.
    return template.format(tags, keys, uniq_key)


@lru_cache(maxsize=8)
def _v2_order(with_l: bool, with_n: bool) -> tuple[str, ...]:
    names = list("abcdefghijk") + (["l"] if with_l else []) + ["m"] + (["n"] if with_n else [])
    return tuple(hashmap_order(names))


def send_v2_fields(h: SendMessageRequestHeader) -> dict[str, str]:
    """SendMessageRequestHeader.to_v2_fields with the letter order computed once."""
    values = {
        "a": h.producer_group,
        "b": h.topic,
        "c": h.default_topic,
        "d": str(h.default_topic_queue_nums),
        "e": str(h.queue_id),
        "f": str(h.sys_flag),
        "g": str(h.born_timestamp),
        "h": str(h.flag),
        "i": h.properties,
        "j": str(h.reconsume_times),
        "k": "true" if h.unit_mode else "false",
        "l": str(h.max_reconsume_times),
        "m": "true" if h.batch else "false",
        "n": h.broker_name or "",
    }
    return {k: values[k] for k in _v2_order(h.max_reconsume_times is not None, h.broker_name is not None)}
