"""The local brokers against the real ones: the same sends, read back from both by the same real Java
consumer, must store the same messages (topic, tags, keys, properties, flags, body, delay).

What may differ is only what a broker assigns itself: queue, offsets, ids, timestamps. This is what
keeps `make test` (local brokers only) honest about real brokers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.local import LocalCluster

from .conftest import fresh_topic_name
from .kit import Kit

#: What each broker assigns itself, or the consumer adds per pull (MIN_OFFSET, MAX_OFFSET).
ASSIGNED = {"broker", "queue", "offset", "uniq", "msgId", "bornTimestamp", "storeTimestamp", "topic"}
ASSIGNED_PROPS = {"MIN_OFFSET", "MAX_OFFSET", "UNIQ_KEY", "REAL_QID"}


def sends(topic: str) -> list[Callable[[Producer], object]]:
    """Every kind of message the producer writes, one call each."""
    compressible = bytes(i % 251 for i in range(10_000))
    return [
        lambda p: p.send(Message(topic, b"plain")),
        lambda p: p.send(Message(topic, b"fields", tags="TagA", keys=["k1", "k2"], properties={"p": "v", "q": "w x"})),
        lambda p: p.send(Message(topic, "unicode ключ".encode(), tags="标签", keys="ключ", properties={"名": "值"})),
        lambda p: p.send(Message(topic, compressible)),
        lambda p: p.send(Message(topic, b"no-wait", wait_store_msg_ok=False)),
        lambda p: p.send(Message(topic, b"flagged", flag=7)),
        lambda p: p.send(Message(topic, b"sharded"), sharding_key="user-1"),
        lambda p: p.send_batch([Message(topic, f"batch-{i}".encode(), tags="b", keys=f"bk{i}") for i in range(3)]),
        lambda p: p.send_batch([Message(topic, compressible + bytes([i])) for i in range(2)]),
        lambda p: p.send(Message(topic, b"delayed", delay_level=1)),
    ]


def comparable(stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored messages without what a broker assigns, in a fixed order."""
    out = []
    for m in stored:
        m = {k: v for k, v in m.items() if k not in ASSIGNED}
        m["props"] = {k: v for k, v in m["props"].items() if k not in ASSIGNED_PROPS}
        out.append(m)
    return sorted(out, key=lambda m: (m["bodySha256"], sorted(m["props"].items())))


@pytest.fixture
def local_cluster(kit: Kit) -> Iterator[LocalCluster]:
    """Local brokers answering as the kit's version does (4.9.8, or 5.3.3)."""
    cluster = LocalCluster(brokers=2, namesrvs=1, rocketmq_version=kit.version).start()
    yield cluster
    cluster.stop()


def test_local_brokers_store_what_real_brokers_store(kit: Kit, local_cluster: LocalCluster, tmp_path: Path) -> None:
    topic = fresh_topic_name("fidelity")
    count = 13
    read: dict[str, list[dict[str, Any]]] = {}
    for name, addr in (("real", kit.namesrv_addr), ("local", local_cluster.namesrv_addr)):
        with Producer(namesrv_addr=addr, group="spark_rocketmq_real_fidelity") as p:
            for send in sends(topic):
                send(p)
        # the same real Java consumer, pointed at this cluster's NameServer
        reader = Kit(kit.folder, {"RMQ_NAMESRV_PORT": addr.rsplit(":", 1)[1], "RMQ_RUN": str(tmp_path / name)})
        read[name] = reader.dump(topic, at_least=count)
    assert len(read["real"]) == len(read["local"]) == count
    assert comparable(read["local"]) == comparable(read["real"])
