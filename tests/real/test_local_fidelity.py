"""The local brokers against the real ones: the same sends, read back from both by the same real Java
consumer, must store the same messages (topic, tags, keys, properties, flags, body, delay).

What may differ is only what a broker assigns itself: queue, offsets, ids, timestamps. This is what
keeps `make test` (local brokers only) honest about real brokers.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.client.remoting import RemotingClient
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.codes import RequestCode, ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.headers import SendMessageRequestHeader
from spark_rocketmq.protocol.message import encode_batch_body, encode_properties
from spark_rocketmq.protocol.stored import decode_stored_messages

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


# -- the read path: the same raw requests to a real broker and a local one answering as its version ------------


def _request(code: int, fields: dict[str, object], body: bytes = b"") -> RemotingCommand:
    return RemotingCommand(code, ext_fields={k: str(v) for k, v in fields.items()}, body=body)


def _send(
    client: RemotingClient, addr: str, topic: str, queue_id: int, records: Sequence[tuple[str | None, bytes]]
) -> None:
    """One message per record (tags, body), or one batch of them with batch=True when there are several."""
    props = [{"UNIQ_KEY": uuid.uuid4().hex.upper(), "WAIT": "true", **({"TAGS": t} if t else {})} for t, _ in records]
    batch = len(records) > 1
    body = (
        encode_batch_body([(0, b, encode_properties(p).encode()) for (_, b), p in zip(records, props, strict=True)])
        if batch
        else records[0][1]
    )
    header = SendMessageRequestHeader(
        producer_group="fidelity",
        topic=topic,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=encode_properties({"WAIT": "true"} if batch else props[0]),
        batch=batch,
    )
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    answer = client.invoke_sync(addr, RemotingCommand(code, ext_fields=header.to_v2_fields(), body=body), 10_000)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def _pull(topic: str, offset: int, queue_id: int = 0, **fields: object) -> RemotingCommand:
    base = {
        "consumerGroup": "fidelity_reader",
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": 4,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
        "bname": "broker-a",
    }
    return _request(RequestCode.PULL_MESSAGE, {**base, **fields})


def _answer(answer: RemotingCommand) -> tuple[Any, ...]:
    """An answer without what differs by connection or clock: (code, remark, header fields, bodies)."""
    remark = re.sub(r"consumer:\[/[0-9.:]+\]", "consumer:[/CLIENT]", answer.remark) if answer.remark else answer.remark
    bodies = [m.body for m in decode_stored_messages(answer.body)] if answer.body else []
    return answer.code, remark, dict(sorted((answer.ext_fields or {}).items())), bodies


def _dispatched(client: RemotingClient, addr: str, topic: str, queue_id: int, count: int) -> None:
    """Return once the queue holds `count` messages: a real broker indexes a stored message a moment later."""
    deadline = time.monotonic() + 10
    cmd = _request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    while int(client.invoke_sync(addr, cmd, 10_000).field("offset") or 0) < count:
        assert time.monotonic() < deadline, f"{topic}: {count} messages not indexed in 10 s"
        time.sleep(0.01)


def _store_times(client: RemotingClient, addr: str, topic: str, count: int) -> list[int]:
    _dispatched(client, addr, topic, 0, count)
    answer = client.invoke_sync(addr, _pull(topic, 0, maxMsgNums=count), 10_000)
    return [m.store_timestamp for m in decode_stored_messages(answer.body)]


def _next_ms(after: int) -> None:
    """Return once the wall clock is past `after` + 5 ms: the next send gets a store time of its own."""
    while time.time() * 1000 < after + 5:
        time.sleep(0.001)


def read_answers(addr: str, topic: str, search_topic: str) -> dict[str, Any]:
    """Every read request a reader makes, on `topic` (2 queues, empty) and `search_topic` (1 queue, empty)."""
    client = RemotingClient(connect_timeout_ms=5000)
    out: dict[str, Any] = {}
    try:

        def call(name: str, cmd: RemotingCommand) -> RemotingCommand:
            answer = client.invoke_sync(addr, cmd, 30_000)
            out[name] = _answer(answer)
            return answer

        def offsets(name: str, code: int, topic_: str, queue_id: int, **fields: object) -> None:
            call(name, _request(code, {"topic": topic_, "queueId": queue_id, **fields}))

        for offset in (0, 5, -1):
            call(f"empty pull {offset}", _pull(topic, offset, queue_id=1))
        offsets("query offset, empty queue", RequestCode.QUERY_CONSUMER_OFFSET, topic, 1, consumerGroup="fresh_g")
        started = time.monotonic()
        call("held pull, nothing arrives", _pull(topic, 0, queue_id=1, sysFlag=6, suspendTimeoutMillis=1000))
        out["held pull waited the suspend time"] = time.monotonic() - started >= 0.95
        for tags, body in (("A", b"A"), ("B", b"B"), ("C", b"C"), ("Aa", b"Aa"), ("BB", b"BB"), (None, b"none")):
            _send(client, addr, topic, 0, [(tags, body)])
        _dispatched(client, addr, topic, 0, 6)
        for sub in ("*", "", "A || B", "Aa", "Z", " * "):
            call(f"pull {sub!r}", _pull(topic, 0, subscription=sub))
        call("pull 1 of 'C'", _pull(topic, 0, subscription="C", maxMsgNums=1))
        for offset in (2, 6, 9, -1):
            call(f"pull {offset}", _pull(topic, offset))
        call("sql92", _pull(topic, 0, subscription="a > 1", expressionType="SQL92"))
        call("subscription ||", _pull(topic, 0, subscription="||"))
        call("queue 9", _pull(topic, 0, queue_id=9))
        call("missing topic", _pull("NoSuchTopic_fidelity", 0))
        call("no subscription flag", _pull(topic, 0, sysFlag=0, consumerGroup="silent_g"))
        for queue_id in (0, 1):
            offsets(f"min offset {queue_id}", RequestCode.GET_MIN_OFFSET, topic, queue_id)
            offsets(f"max offset {queue_id}", RequestCode.GET_MAX_OFFSET, topic, queue_id)
            offsets(
                f"query offset {queue_id}", RequestCode.QUERY_CONSUMER_OFFSET, topic, queue_id, consumerGroup="fresh_g"
            )
        offsets("min offset, no topic", RequestCode.GET_MIN_OFFSET, "NoSuchTopic_fidelity", 0)
        offsets("max offset, no topic", RequestCode.GET_MAX_OFFSET, "NoSuchTopic_fidelity", 0)
        update = {"consumerGroup": "fresh_g", "commitOffset": 2}
        offsets("update, unknown group", RequestCode.UPDATE_CONSUMER_OFFSET, topic, 0, **update)
        offsets("query after it", RequestCode.QUERY_CONSUMER_OFFSET, topic, 0, consumerGroup="fresh_g")
        update["consumerGroup"] = "fidelity_reader"  # pulled: the broker knows it
        offsets("update", RequestCode.UPDATE_CONSUMER_OFFSET, topic, 0, **update)
        offsets("update, no topic", RequestCode.UPDATE_CONSUMER_OFFSET, "NoSuchTopic_fidelity", 0, **update)
        offsets("query after update", RequestCode.QUERY_CONSUMER_OFFSET, topic, 0, consumerGroup="fidelity_reader")
        offsets(
            "query, zero not wanted",
            RequestCode.QUERY_CONSUMER_OFFSET,
            topic,
            1,
            consumerGroup="fresh_g",
            setZeroIfNotFound="false",
        )
        for _ in range(3):
            _send(client, addr, topic, 1, [(None, bytes(100 * 1024))])
        _send(client, addr, topic, 1, [(None, b"s%d" % i) for i in range(40)])
        _dispatched(client, addr, topic, 1, 43)
        call("pull 256 KiB", _pull(topic, 0, queue_id=1, maxMsgNums=64))
        call("pull 32 messages", _pull(topic, 3, queue_id=1, maxMsgNums=64))

        # store times: a batch of 3 (one store time), one message, a batch of 2, each at a time of its own
        sent = 0
        for records in ([(None, b"t0"), (None, b"t1"), (None, b"t2")], [(None, b"t3")], [(None, b"t4"), (None, b"t5")]):
            _send(client, addr, search_topic, 0, records)
            sent += len(records)
            _next_ms(max(_store_times(client, addr, search_topic, sent)))
        times = sorted(set(_store_times(client, addr, search_topic, 6)))
        out["distinct store times"] = len(times)
        probes = {"before": times[0] - 1000, "after": times[-1] + 1000}
        for i, t in enumerate(times):
            probes |= {f"t{i}-1": t - 1, f"t{i}": t, f"t{i}+1": t + 1}
        for name, t in probes.items():
            for boundary in (None, "lower", "upper"):
                extra = {"boundaryType": boundary} if boundary else {}
                offsets(
                    f"search {name} {boundary}",
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                    search_topic,
                    0,
                    timestamp=t,
                    **extra,
                )
        offsets("search, empty queue", RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic, 5, timestamp=1)
    finally:
        client.close()
    return out


def test_local_brokers_answer_read_requests_as_real_brokers_do(kit: Kit, local_cluster: LocalCluster) -> None:
    topic, search_topic = fresh_topic_name("read"), fresh_topic_name("search")
    kit.topic(topic, queues=2, brokers=("a",))
    kit.topic(search_topic, queues=1, brokers=("a",))
    local_cluster.create_topic(topic, queues=2, brokers=["broker-a"])
    local_cluster.create_topic(search_topic, queues=1, brokers=["broker-a"])
    real = read_answers(kit.broker_addr("a"), topic, search_topic)
    local = read_answers(local_cluster.broker("broker-a").addr, topic, search_topic)
    for name, answer in real.items():  # what the real broker answered, bodies as their sizes
        shown = (*answer[:3], [len(b) for b in answer[3]]) if isinstance(answer, tuple) else answer
        print(f"{kit.version} {name}: {shown}")
    assert real["distinct store times"] == 3
    assert {k: v for k, v in local.items() if v != real[k]} == {}
