"""A held message's way out: a delayed (schedule.py), timer (timer.py) or committed half (transaction.py)
message is stored again in the topic and queue it was sent to, which it carries as REAL_TOPIC and REAL_QID."""

from __future__ import annotations

from collections.abc import Mapping

from ..protocol.message import encode_hashmap_properties
from ..protocol.stored import StoredMessage
from ..protocol.transaction import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from .store import MessageStore


def deliver_held(
    store: MessageStore, held: StoredMessage, properties: Mapping[str, str], *, sys_flag: int, store_timestamp: int
) -> None:
    """Store ``held`` again in the topic and queue its ``properties`` name (REAL_TOPIC, REAL_QID), with
    those properties written in the HashMap's order: its flag, body, born time and host, store host and
    reconsume times as held, ``sys_flag`` and ``store_timestamp`` as the caller's service sets them."""
    store.append_messages(
        properties[PROPERTY_REAL_TOPIC],
        int(properties[PROPERTY_REAL_QUEUE_ID]),
        [(held.flag, held.body, encode_hashmap_properties(properties).encode())],
        sys_flag=sys_flag,
        born_timestamp=held.born_timestamp,
        born_host=held.born_host,
        store_host=held.store_host,
        reconsume_times=held.reconsume_times,
        store_timestamp=store_timestamp,
    )
