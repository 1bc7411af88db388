"""The requests a reader makes of a local broker, raw: PULL_MESSAGE (statuses, offsets, tag filter, caps, long
polling), GET_MIN/MAX_OFFSET with retention, SEARCH_OFFSET_BY_TIMESTAMP, and consumer offsets, answered as
the real 4.9.8 and 5.3.3 brokers answer them (tests/real/test_local_fidelity.py compares them with those)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spark_rocketmq.local import LocalBroker, LocalCluster
from spark_rocketmq.local.consume_queue import java_string_hash
from spark_rocketmq.protocol.codes import RequestCode, ResponseCode, SysFlag
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.stored import decode_stored_messages

from .wire import Wire, send_request

TOPIC = "Read"
VERSIONS = ["4.9.8", "5.3.3"]


def pull_request(offset: int, *, queue_id: int = 0, max_nums: int = 32, **fields: str) -> RemotingCommand:
    """A pull as the reader sends it: with its subscription, naming the broker (bname) as 5.x clients do."""
    ext = {
        "consumerGroup": "reader",
        "topic": TOPIC,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
        "bname": "broker-a",
        **fields,
    }
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext)


def header(answer: RemotingCommand) -> tuple[int, str | None, int, int, int]:
    """(code, remark, nextBeginOffset, minOffset, maxOffset)."""
    return (
        answer.code,
        answer.remark,
        int(answer.require("nextBeginOffset")),
        int(answer.require("minOffset")),
        int(answer.require("maxOffset")),
    )


def bodies(answer: RemotingCommand) -> list[bytes]:
    return [m.body for m in decode_stored_messages(answer.body)]


def offset_request(code: int, queue_id: int = 0, /, topic: str = TOPIC, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields={"topic": topic, "queueId": str(queue_id), **fields})


@pytest.fixture(params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def cluster(make_cluster: Callable[..., LocalCluster], version: str, tmp_path: Path) -> LocalCluster:
    cluster = make_cluster(brokers=1, rocketmq_version=version, store_dir=tmp_path)
    cluster.create_topic(TOPIC, queues=2)
    return cluster


@pytest.fixture
def broker(cluster: LocalCluster) -> LocalBroker:
    return cluster.broker("broker-a")


@pytest.fixture
def wire(broker: LocalBroker) -> Iterator[Wire]:
    w = Wire(broker.addr)
    yield w
    w.close()


def send(wire: Wire, *bodies_: bytes, tags: str | None = None, queue_id: int = 0) -> None:
    for i, body in enumerate(bodies_):
        props = {"UNIQ_KEY": f"{time.time_ns() + i:032X}", "WAIT": "true", **({"TAGS": tags} if tags else {})}
        assert wire.call(send_request(TOPIC, body=body, queue_id=queue_id, props=props)).code == 0


# -- PULL_MESSAGE ----------------------------------------------------------------------------------


def test_an_empty_queue_answers_not_found_at_0_and_offset_moved_to_0_elsewhere(wire: Wire) -> None:
    NOT_FOUND, MOVED = ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED
    assert header(wire.call(pull_request(0))) == (NOT_FOUND, "NO_MESSAGE_IN_QUEUE", 0, 0, 0)
    assert header(wire.call(pull_request(5))) == (MOVED, "NO_MESSAGE_IN_QUEUE", 0, 0, 0)
    assert header(wire.call(pull_request(-1))) == (MOVED, "NO_MESSAGE_IN_QUEUE", 0, 0, 0)


def test_pull_statuses_and_offsets(wire: Wire, broker: LocalBroker, version: str) -> None:
    send(wire, *(f"m{i}".encode() for i in range(5)))
    found = wire.call(pull_request(1, max_nums=3))
    assert header(found) == (ResponseCode.SUCCESS, "FOUND", 4, 0, 5)
    assert bodies(found) == [b"m1", b"m2", b"m3"]
    assert found.require("suggestWhichBrokerId") == "0"
    assert (found.field("topicSysFlag"), found.field("groupSysFlag")) == ((None, None) if version < "5" else ("0", "0"))
    assert header(wire.call(pull_request(5))) == (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", 5, 0, 5)
    assert header(wire.call(pull_request(9))) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", 5, 0, 5)

    assert broker.delete_before(TOPIC, 0, 3) == 3
    moved = wire.call(pull_request(1))
    assert header(moved) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", 3, 3, 5)
    assert bodies(wire.call(pull_request(3))) == [b"m3", b"m4"]
    assert header(wire.call(pull_request(-1))) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", 3, 3, 5)


def test_tags_are_filtered_by_hash_code_and_the_next_offset_passes_what_was_skipped(wire: Wire) -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")  # a collision: the broker cannot tell them apart
    for tags in ("A", "B", "C", "Aa", "BB", None):
        send(wire, (tags or "none").encode(), tags=tags)
    assert bodies(wire.call(pull_request(0, subscription="A || B"))) == [b"A", b"B"]
    assert bodies(wire.call(pull_request(0, subscription="Aa"))) == [b"Aa", b"BB"]
    assert len(bodies(wire.call(pull_request(0, subscription="*")))) == 6
    assert len(bodies(wire.call(pull_request(0, subscription="")))) == 6
    none = wire.call(pull_request(0, subscription="Z"))
    assert header(none) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", 6, 0, 6)
    assert none.body in (b"", None)
    skipped = wire.call(pull_request(0, max_nums=1, subscription="C"))
    assert (header(skipped)[2], bodies(skipped)) == (3, [b"C"])


def test_refusals(wire: Wire, version: str) -> None:
    faq = (
        "http://rocketmq.apache.org/docs/faq/"
        if version < "5"
        else "https://rocketmq.apache.org/docs/bestPractice/06FAQ"
    )
    missing = wire.call(pull_request(0, topic="NoSuchTopic"))
    assert (missing.code, missing.remark) == (
        ResponseCode.TOPIC_NOT_EXIST,
        f"topic[NoSuchTopic] not exist, apply first please! \nSee {faq} for further details.",
    )
    sql = wire.call(pull_request(0, subscription="a > 1", expressionType="SQL92"))
    assert (sql.code, sql.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "The broker does not support consumer to filter message by SQL92",
    )
    parse = wire.call(pull_request(0, subscription="||"))
    assert (parse.code, parse.remark) == (
        ResponseCode.SUBSCRIPTION_PARSE_FAILED,
        "parse the consumer's subscription failed",
    )
    bad_queue = wire.call(pull_request(0, queue_id=9))
    assert bad_queue.code == (ResponseCode.SYSTEM_ERROR if version < "5" else ResponseCode.INVALID_PARAMETER)
    assert bad_queue.remark is not None
    assert bad_queue.remark.startswith(
        f"queueId[9] is illegal, topic:[{TOPIC}] topicConfig.readQueueNums:[2] consumer:[/"
    )
    no_sub = wire.call(pull_request(0, sysFlag="0", consumerGroup="silent"))
    assert (no_sub.code, no_sub.remark) == (
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        f"the consumer's group info not exist\nSee {faq} for further details.",
    )


def test_a_pull_without_its_subscription_uses_the_groups_heartbeat(wire: Wire) -> None:
    send(wire, b"x", tags="X")
    send(wire, b"y", tags="Y")
    consumer = {"groupName": "hb", "subscriptionDataSet": [{"topic": TOPIC, "subString": "Y", "expressionType": "TAG"}]}
    heartbeat = {"clientID": "c@1", "consumerDataSet": [consumer], "producerDataSet": []}
    assert wire.call(RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())).code == 0
    assert bodies(wire.call(pull_request(0, sysFlag="0", consumerGroup="hb"))) == [b"y"]


def test_a_pull_answers_at_most_32_messages_and_256_kib(wire: Wire) -> None:
    send(wire, *(b"s%d" % i for i in range(40)))
    assert len(bodies(wire.call(pull_request(0, max_nums=64)))) == 32
    big = bytes(100 * 1024)
    send(wire, big, big, big, queue_id=1)
    two = wire.call(pull_request(0, queue_id=1, max_nums=32))
    assert (len(bodies(two)), header(two)[2]) == (2, 2)


def test_a_suspended_pull_is_held_until_a_message_arrives_and_the_connection_serves_meanwhile(
    wire: Wire, broker: LocalBroker
) -> None:
    held = pull_request(0, sysFlag=str(4 | 2), suspendTimeoutMillis="20000")
    held.opaque = 1000
    wire.sock.sendall(held.encode())
    # the connection answers other requests while the pull is held
    assert wire.call(offset_request(RequestCode.GET_MAX_OFFSET)).require("offset") == "0"
    other = Wire(broker.addr)
    send(other, b"tagless")  # matches "*"
    other.close()
    answer = wire.read()
    assert (answer.opaque, answer.code, bodies(answer)) == (1000, ResponseCode.SUCCESS, [b"tagless"])


def test_a_held_pull_ignores_messages_it_does_not_match_and_answers_not_found_when_its_time_is_up(
    wire: Wire, broker: LocalBroker
) -> None:
    held = pull_request(0, sysFlag=str(4 | 2), suspendTimeoutMillis="600", subscription="Wanted")
    held.opaque = 1000
    started = time.monotonic()
    wire.sock.sendall(held.encode())
    # answered after the pull on the same connection: the pull is held before the message is sent (sent
    # first, an unmatched message is answered NO_MATCHED_MESSAGE at once, as a real broker does)
    assert wire.call(offset_request(RequestCode.GET_MAX_OFFSET)).require("offset") == "0"
    other = Wire(broker.addr)
    send(other, b"other", tags="Other")
    other.close()
    answer = wire.read()
    assert time.monotonic() - started >= 0.55
    assert answer.opaque == 1000
    assert header(answer) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", 1, 0, 1)


def test_a_delayed_message_is_visible_only_when_due_and_a_half_never_before_its_commit(wire: Wire) -> None:
    props = {"UNIQ_KEY": "D" * 32, "WAIT": "true", "DELAY": "1"}
    assert wire.call(send_request(TOPIC, body=b"later", props=props)).code == 0
    half = {"UNIQ_KEY": "E" * 32, "WAIT": "true", "TRAN_MSG": "true", "PGROUP": "tx"}
    sent = wire.call(send_request(TOPIC, body=b"half", props=half, sys_flag=SysFlag.TRANSACTION_PREPARED))
    assert sent.code == 0
    assert wire.call(offset_request(RequestCode.GET_MAX_OFFSET)).require("offset") == "0"
    # held until the delay (level 1, 1 s) has passed
    due = wire.call(pull_request(0, sysFlag=str(4 | 2), suspendTimeoutMillis="10000"))
    assert bodies(due) == [b"later"]


# -- offsets ---------------------------------------------------------------------------------------


def test_min_offset_follows_retention_and_survives_a_restart(
    wire: Wire, cluster: LocalCluster, broker: LocalBroker, make_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    send(wire, *(b"r%d" % i for i in range(4)))
    assert wire.call(offset_request(RequestCode.GET_MIN_OFFSET)).require("offset") == "0"
    assert broker.delete_before(TOPIC, 0, 2) == 2
    assert broker.delete_before(TOPIC, 0, 1) == 2  # never back
    assert wire.call(offset_request(RequestCode.GET_MIN_OFFSET)).require("offset") == "2"
    assert wire.call(offset_request(RequestCode.GET_MAX_OFFSET)).require("offset") == "4"
    assert wire.call(offset_request(RequestCode.GET_MIN_OFFSET, topic="Unknown")).require("offset") == "0"
    wire.close()
    version = broker.rocketmq_version
    cluster.stop()
    again = make_cluster(brokers=1, rocketmq_version=version, store_dir=tmp_path).broker("broker-a")
    w = Wire(again.addr)
    assert w.call(offset_request(RequestCode.GET_MIN_OFFSET)).require("offset") == "2"
    assert [m.body for m in again.messages(TOPIC)] == [b"r2", b"r3"]
    assert bodies(w.call(pull_request(0))) == []
    w.close()


def test_search_offset_by_timestamp(broker: LocalBroker, wire: Wire, version: str) -> None:
    for store_time in (100, 100, 100, 200, 300, 300):
        broker.store.append_messages(
            TOPIC,
            0,
            [(0, b"t", b"")],
            sys_flag=0,
            born_timestamp=store_time,
            born_host=("127.0.0.1", 1),
            store_host=("127.0.0.1", 2),
            reconsume_times=0,
            store_timestamp=store_time,
        )

    def search(timestamp: int, boundary: str | None = None) -> int:
        extra = {"boundaryType": boundary} if boundary else {}
        cmd = offset_request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=str(timestamp), **extra)
        return int(wire.call(cmd).require("offset"))

    times = (50, 100, 140, 160, 200, 300, 400)
    if version < "5":  # the unit the binary search hits, else the closest; boundaryType unknown
        expected = [0, 2, 2, 3, 3, 4, 5]
        assert [search(t) for t in times] == [search(t, "upper") for t in times] == expected
    else:
        assert [search(t) for t in times] == [0, 0, 3, 3, 3, 4, 6]
        assert [search(t, "upper") for t in times] == [0, 2, 2, 2, 3, 5, 5]
    assert search(1, None) == search(1, "lower")
    empty = offset_request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, 1, timestamp="1")
    assert wire.call(empty).require("offset") == "0"


def test_consumer_offsets_as_each_version_answers_them(
    wire: Wire,
    cluster: LocalCluster,
    broker: LocalBroker,
    version: str,
    make_cluster: Callable[..., LocalCluster],
    tmp_path: Path,
) -> None:
    def query(queue_id: int, group: str = "fresh") -> RemotingCommand:
        return wire.call(offset_request(RequestCode.QUERY_CONSUMER_OFFSET, queue_id, consumerGroup=group))

    def update(group: str, offset: int, topic: str = TOPIC) -> RemotingCommand:
        fields = {"consumerGroup": group, "commitOffset": str(offset)}
        return wire.call(offset_request(RequestCode.UPDATE_CONSUMER_OFFSET, topic=topic, **fields))

    send(wire, b"q0", b"q1", b"q2")
    not_found = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
    # queue 0 starts at offset 0: 0; queue 1 is empty: 0 from 4.9.8, QUERY_NOT_FOUND from 5.3.3
    assert (query(0).code, query(0).field("offset")) == (ResponseCode.SUCCESS, "0")
    empty = query(1)
    if version < "5":
        assert (empty.code, empty.field("offset")) == (ResponseCode.SUCCESS, "0")
        assert update("fresh", 2).code == ResponseCode.SUCCESS
        assert update("fresh", 1, topic="NoSuchTopic").code == ResponseCode.SUCCESS
    else:
        assert (empty.code, empty.remark) == (ResponseCode.QUERY_NOT_FOUND, not_found)
        refused = update("fresh", 2)
        assert (refused.code, refused.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "Group fresh not exist!")
        assert wire.call(pull_request(0, consumerGroup="fresh")).code == ResponseCode.SUCCESS  # the pull creates it
        missing = update("fresh", 1, topic="NoSuchTopic")
        assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST, "Topic NoSuchTopic not exist!")
        assert update("fresh", 2).code == ResponseCode.SUCCESS
    assert query(0).field("offset") == "2"
    broker.delete_before(TOPIC, 0, 1)
    gone = query(0, group="late")
    assert (gone.code, gone.remark) == (ResponseCode.QUERY_NOT_FOUND, not_found)
    # a pull with the commit-offset flag commits its commitOffset
    assert wire.call(pull_request(1, sysFlag=str(4 | 1), commitOffset="3")).code == ResponseCode.SUCCESS
    assert query(0, group="reader").field("offset") == "3"
    wire.close()
    cluster.stop()
    again = make_cluster(brokers=1, rocketmq_version=version, store_dir=tmp_path).broker("broker-a")
    w = Wire(again.addr)
    kept = w.call(offset_request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="fresh"))
    assert kept.field("offset") == "2"
    w.close()
