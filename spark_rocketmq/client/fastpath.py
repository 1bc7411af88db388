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
def _simple_order(has_tags: bool, has_keys: bool) -> tuple[str, ...]:
    names = []
    if has_tags:
        names.append(PROPERTY_TAGS)
    if has_keys:
        names.append(PROPERTY_KEYS)
    names += [PROPERTY_WAIT_STORE_MSG_OK, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
    return tuple(hashmap_order(names))


def encoded_properties(msg: Message, uniq_key: str) -> str:
    """encode_properties(message_properties(msg, uniq_key)), faster for messages without user properties."""
    if msg.properties or msg.delay_level or msg._extra:
        return encode_properties(message_properties(msg, uniq_key))
    tags = msg.tags or None
    keys = msg.keys_string or None
    for text in (tags, keys):
        if text is not None and (NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text):
            return encode_properties(message_properties(msg, uniq_key))  # raises with the full message
    values = {
        PROPERTY_TAGS: tags,
        PROPERTY_KEYS: keys,
        PROPERTY_WAIT_STORE_MSG_OK: "true" if msg.wait_store_msg_ok else "false",
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq_key,
    }
    return PROPERTY_SEPARATOR.join(
        f"{name}{NAME_VALUE_SEPARATOR}{values[name]}" for name in _simple_order(tags is not None, keys is not None)
    )


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
