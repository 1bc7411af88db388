"""The local NameServer and brokers, spoken to with raw sockets and the protocol layer."""

from __future__ import annotations

import itertools
import json
import random
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from wire_samples import read_sample

from spark_rocketmq import Message, Producer
from spark_rocketmq.local import Faults, LocalCluster, LocalNameServer, read_store
from spark_rocketmq.local.send import stored_properties
from spark_rocketmq.local.stamp import broker_stamp
from spark_rocketmq.protocol.codes import Perm, RequestCode, ResponseCode, SysFlag
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.frame import decode_frame
from spark_rocketmq.protocol.headers import route_request
from spark_rocketmq.protocol.message import encode_batch_body, encode_properties
from spark_rocketmq.protocol.registry import TopicConfig, register_broker_request
from spark_rocketmq.protocol.route import TopicRouteData
from spark_rocketmq.protocol.stored import decode_stored_messages

from .wire import Wire, send_request


def route(addr: str, topic: str, version: int = 409) -> RemotingCommand:
    wire = Wire(addr)
    try:
        req = route_request(topic)
        req.version = version
        return wire.call(req)
    finally:
        wire.close()


def wait_until(cond: Callable[[], Any], ns: LocalNameServer, timeout: float = 10.0) -> Any:
    """Wait for a route condition on the NameServer's change notifications."""
    deadline = time.monotonic() + timeout
    with ns.changed:
        while not (value := cond()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("condition not reached in time")
            ns.changed.wait(left)
    return value


# -- NameServer --------------------------------------------------------------------------------


def test_brokers_register_and_routes_come_in_both_json_dialects(local_cluster: LocalCluster) -> None:
    local_cluster.create_topic("Routed", queues=3)
    ns = local_cluster.namesrvs[0]

    modern = route(ns.addr, "Routed", version=409)
    assert modern.code == ResponseCode.SUCCESS
    data = json.loads(modern.body)  # standard JSON: quoted integer keys
    assert sorted(b["brokerName"] for b in data["brokerDatas"]) == ["broker-a", "broker-b"]
    assert all(q["writeQueueNums"] == 3 and q["perm"] == 6 for q in data["queueDatas"])

    legacy = route(ns.addr, "Routed", version=0)
    assert b'"brokerAddrs":{0:"127.0.0.1:' in legacy.body
    with pytest.raises(json.JSONDecodeError):
        json.loads(legacy.body)
    assert TopicRouteData.from_json(legacy.body) == TopicRouteData.from_json(modern.body)


def test_unknown_topic_is_topic_not_exist_with_the_real_remark(local_cluster: LocalCluster) -> None:
    answer = route(local_cluster.namesrv_addr, "NoSuchTopic")
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert answer.remark == (
        "No topic route info in name server for the topic: NoSuchTopic\n"
        "See http://rocketmq.apache.org/docs/faq/ for further details."
    )
    assert answer.ext_fields is None and answer.body == b""


def test_default_topic_tbw102_is_routed_with_perm_7_and_8_queues(local_cluster: LocalCluster) -> None:
    data = TopicRouteData.from_json(route(local_cluster.namesrv_addr, "TBW102").body)
    assert {(q.broker_name, q.perm, q.write_queue_nums) for q in data.queue_datas} == {
        ("broker-a", 7, 8),
        ("broker-b", 7, 8),
    }


def test_a_send_to_an_unknown_topic_auto_creates_it_and_routes_it_at_once(local_cluster: LocalCluster) -> None:
    broker = local_cluster.broker("broker-a")
    wire = Wire(broker.addr)
    answer = wire.call(send_request("AutoMade"))
    wire.close()
    assert answer.code == ResponseCode.SUCCESS
    data = TopicRouteData.from_json(route(local_cluster.namesrv_addr, "AutoMade").body)
    assert [(q.broker_name, q.write_queue_nums) for q in data.queue_datas] == [("broker-a", 4)]


def test_a_silent_broker_expires_and_a_closed_connection_removes_its_broker_at_once(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(brokers=0, broker_expiry_s=1.0, scan_interval_s=0.2)
    ns = cluster.namesrvs[0]

    def register(wire: Wire, name: str) -> None:
        req = register_broker_request(
            cluster_name="DefaultCluster",
            broker_name=name,
            broker_addr=f"127.0.0.1:{1000 + len(name)}",
            broker_id=0,
            ha_server_addr="127.0.0.1:1",
            topics=[TopicConfig("Ghost", 2, 2)],
            counter=1,
            timestamp=0,
        )
        assert wire.call(req).code == ResponseCode.SUCCESS

    silent = Wire(ns.addr)
    register(silent, "silent-broker")
    assert ns.broker_names() == ["silent-broker"]
    started = time.monotonic()
    wait_until(lambda: ns.broker_names() == [], ns)  # the connection stays open: only the scan removes it
    assert time.monotonic() - started >= 0.9
    silent.close()

    leaving = Wire(ns.addr)
    register(leaving, "leaving-broker")
    assert route(ns.addr, "Ghost").code == ResponseCode.SUCCESS
    leaving.close()
    wait_until(lambda: ns.broker_names() == [], ns, timeout=0.9)  # well before the expiry
    assert route(ns.addr, "Ghost").code == ResponseCode.TOPIC_NOT_EXIST


def test_unregister_broker_and_cluster_info(local_cluster: LocalCluster) -> None:
    ns = local_cluster.namesrvs[0]
    wire = Wire(ns.addr)
    info = json.loads(wire.call(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": local_cluster.broker("broker-b").addr}

    b = local_cluster.broker("broker-b")
    fields = {"brokerName": "broker-b", "brokerAddr": b.addr, "clusterName": "DefaultCluster", "brokerId": "0"}
    assert wire.call(RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext_fields=fields)).code == 0
    assert ns.broker_names() == ["broker-a"]
    wire.close()


def test_several_namesrvs_each_know_every_broker(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=2, namesrvs=2)
    cluster.create_topic("Everywhere")
    for ns in cluster.namesrvs:
        data = TopicRouteData.from_json(route(ns.addr, "Everywhere").body)
        assert sorted(q.broker_name for q in data.queue_datas) == ["broker-a", "broker-b"]


def test_a_restarted_namesrv_learns_the_brokers_again(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=2, namesrvs=1)
    ns = cluster.namesrv(0)
    port = ns.port
    ns.stop()
    ns.start()
    assert ns.port == port
    wait_until(lambda: ns.broker_names() == ["broker-a", "broker-b"], ns)  # next registration round


# -- broker: sends and checks -------------------------------------------------------------------


def test_send_and_batch_answers_like_a_real_broker(local_cluster: LocalCluster) -> None:
    local_cluster.create_topic("Answers", queues=4)
    broker = local_cluster.broker("broker-a")
    wire = Wire(broker.addr)
    one = wire.call(send_request("Answers", queue_id=2))
    assert one.code == ResponseCode.SUCCESS
    assert list(one.ext_fields or {}) == ["queueId", "TRACE_ON", "MSG_REGION", "msgId", "queueOffset"]
    assert (one.field("queueId"), one.field("queueOffset")) == ("2", "0")
    assert one.field("msgId", "").startswith(f"7F000001{broker.port:08X}")

    records = [(0, f"m{i}".encode(), encode_properties({"UNIQ_KEY": f"{i:032X}"}).encode()) for i in range(3)]
    # A batch's own properties are the Java client's (WAIT only): the broker appends them to every record's.
    batch = wire.call(
        send_request("Answers", body=encode_batch_body(records), queue_id=2, batch=True, props={"WAIT": "true"})
    )
    assert batch.code == ResponseCode.SUCCESS
    assert batch.field("queueOffset") == "1"
    assert len((batch.field("msgId") or "").split(",")) == 3
    wire.close()

    stored = [m for m in local_cluster.messages("Answers") if m.queue_id == 2]
    assert [m.queue_offset for m in stored] == [0, 1, 2, 3]
    assert [m.body for m in stored] == [b"hello", b"m0", b"m1", b"m2"]
    assert stored[1].uniq_key == f"{0:032X}" and stored[1].properties["CLUSTER"] == "DefaultCluster"


def test_a_send_batch_request_without_the_batch_flag_is_one_message(local_cluster: LocalCluster) -> None:
    # SendMessageProcessor goes by requestHeader.isBatch() (V2 field "m"), not by the request code:
    # without the flag, 4.9.8 and 5.3.3 store the whole payload as one message's body.
    local_cluster.create_topic("NoFlag", queues=1)
    body = encode_batch_body(
        [(0, f"m{i}".encode(), encode_properties({"UNIQ_KEY": f"{i:032X}"}).encode()) for i in range(3)]
    )
    cmd = send_request("NoFlag", body=body, batch=True)
    assert cmd.code == RequestCode.SEND_BATCH_MESSAGE
    del (cmd.ext_fields or {})["m"]
    wire = Wire(local_cluster.broker("broker-a").addr)
    answer = wire.call(cmd)
    wire.close()
    assert answer.code == ResponseCode.SUCCESS
    assert "," not in (answer.field("msgId") or "")
    assert [m.body for m in local_cluster.messages("NoFlag")] == [body]


#: SendMessageProcessor's remark for MESSAGE_ILLEGAL, with a max_message_size of 2048.
ILLEGAL_2048 = (
    "the message is illegal, maybe msg body or properties length not matched. msg body length limit 2048B, "
    "msg properties length limit 32KB."
)
ONE_RECORD = encode_batch_body([(0, b"m", encode_properties({"UNIQ_KEY": "0" * 32}).encode())])


@pytest.mark.parametrize(
    ("request_kw", "code", "remark_part"),
    [
        ({"queue_id": 7}, ResponseCode.SYSTEM_ERROR, "request queueId[7] is illegal, TopicConfig [topicName=Checked"),
        ({"body": b"x" * 2049}, ResponseCode.MESSAGE_ILLEGAL, ILLEGAL_2048),
        ({"props": {"p": "v" * 33000}}, ResponseCode.MESSAGE_ILLEGAL, ILLEGAL_2048),
        ({"body": b""}, ResponseCode.MESSAGE_ILLEGAL, "empty"),
        # CommitLog.asyncPutMessages: a batch may be neither delayed nor transactional.
        ({"body": ONE_RECORD, "batch": True, "props": {"DELAY": "3"}}, ResponseCode.MESSAGE_ILLEGAL, ILLEGAL_2048),
        (
            {"body": ONE_RECORD, "batch": True, "sys_flag": SysFlag.TRANSACTION_PREPARED},
            ResponseCode.MESSAGE_ILLEGAL,
            ILLEGAL_2048,
        ),
    ],
)
def test_broker_checks(
    make_cluster: Callable[..., LocalCluster], request_kw: dict, code: int, remark_part: str
) -> None:
    cluster = make_cluster(brokers=1, max_message_size=2048)
    cluster.create_topic("Checked", queues=4)
    wire = Wire(cluster.broker("broker-a").addr)
    answer = wire.call(send_request("Checked", **request_kw))
    wire.close()
    assert answer.code == code
    assert remark_part in (answer.remark or "")
    assert answer.ext_fields == {"TRACE_ON": "true", "MSG_REGION": "DefaultRegion"}
    assert cluster.messages("Checked") == []


@pytest.mark.parametrize(
    ("topic", "code", "remark"),
    [
        (" ", ResponseCode.SYSTEM_ERROR, "The specified topic is blank."),
        (
            "Bad Topic",
            ResponseCode.SYSTEM_ERROR,
            "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
        ),
        ("T" * 128, ResponseCode.SYSTEM_ERROR, "The specified topic is longer than topic max length."),
        (
            "T" * 128 + "!",
            ResponseCode.SYSTEM_ERROR,
            "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
        ),
        (
            "SCHEDULE_TOPIC_XXXX",
            ResponseCode.NO_PERMISSION,
            "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden.",
        ),
    ],
)
def test_topics_are_checked_as_topic_validator_checks_them(
    local_cluster: LocalCluster, topic: str, code: int, remark: str
) -> None:
    wire = Wire(local_cluster.broker("broker-a").addr)
    answer = wire.call(send_request(topic))
    wire.close()
    assert (answer.code, answer.remark) == (code, remark)
    assert local_cluster.broker("broker-a").topic(topic) is None


def test_unknown_topic_without_auto_create_is_refused(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, auto_create_topic=False)
    wire = Wire(cluster.broker("broker-a").addr)
    answer = wire.call(send_request("NotCreated"))
    wire.close()
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    faq = "http://rocketmq.apache.org/docs/faq/"
    assert answer.remark == f"topic[NotCreated] not exist, apply first please!\nSee {faq} for further details."


# -- broker: store ---------------------------------------------------------------------------------


def test_restart_keeps_the_store_and_continues_offsets(
    tmp_path: Any, make_cluster: Callable[..., LocalCluster]
) -> None:
    cluster = make_cluster(brokers=1, store_dir=tmp_path)
    cluster.create_topic("Kept", queues=1)
    broker = cluster.broker("broker-a")
    wire = Wire(broker.addr)
    for _ in range(3):
        assert wire.call(send_request("Kept")).code == 0
    wire.close()
    port = broker.port
    broker.stop()
    broker.start()
    assert broker.port == port
    wire = Wire(broker.addr)
    assert wire.call(send_request("Kept", body=b"after")).field("queueOffset") == "3"
    wire.close()
    assert [m.queue_offset for m in cluster.messages("Kept")] == [0, 1, 2, 3]
    assert [m.body for m in read_store(tmp_path, "Kept")] == [b"hello"] * 3 + [b"after"]
    cluster.stop()

    again = make_cluster(brokers=1, store_dir=tmp_path)
    assert again.broker("broker-a").topic("Kept") is not None
    assert len(again.messages("Kept")) == 4


def test_a_torn_last_record_is_cut_at_restart(tmp_path: Any, make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, store_dir=tmp_path)
    cluster.create_topic("Torn", queues=1)
    wire = Wire(cluster.broker("broker-a").addr)
    assert wire.call(send_request("Torn")).code == 0
    wire.close()
    cluster.stop()
    with open(tmp_path / "broker-a" / "commitlog", "ab") as fh:
        fh.write(struct.pack(">i", 500) + b"\x00" * 40)  # a record cut short by a crash
    again = make_cluster(brokers=1, store_dir=tmp_path)
    assert len(again.messages("Torn")) == 1
    wire = Wire(again.broker("broker-a").addr)
    assert wire.call(send_request("Torn")).field("queueOffset") == "1"
    wire.close()
    assert len(again.messages("Torn")) == 2


# -- broker: consumer side -------------------------------------------------------------------------


def test_pull_and_offsets_serve_a_consumer(local_cluster: LocalCluster) -> None:
    local_cluster.create_topic("Pulled", queues=1, brokers=["broker-a"])
    wire = Wire(local_cluster.broker("broker-a").addr)
    for i in range(3):
        props = {"UNIQ_KEY": f"{i:032X}", "TAGS": "even" if i % 2 == 0 else "odd"}
        assert wire.call(send_request("Pulled", body=f"p{i}".encode(), props=props)).code == 0

    def offset_of(code: int, **extra: str) -> str | None:
        fields = {"topic": "Pulled", "queueId": "0", **extra}
        return wire.call(RemotingCommand(code=code, ext_fields=fields)).field("offset")

    assert offset_of(RequestCode.GET_MAX_OFFSET) == "3"
    assert offset_of(RequestCode.GET_MIN_OFFSET) == "0"

    pull_fields = {
        "consumerGroup": "cg",
        "topic": "Pulled",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "20000",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    found = wire.call(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=pull_fields))
    assert (found.code, found.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert found.field("nextBeginOffset") == "3" and found.field("maxOffset") == "3"
    assert [m.body for m in decode_stored_messages(found.body)] == [b"p0", b"p1", b"p2"]

    tagged = wire.call(
        RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={**pull_fields, "subscription": "odd"})
    )
    assert [m.body for m in decode_stored_messages(tagged.body)] == [b"p1"]

    at_end = wire.call(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={**pull_fields, "queueOffset": "3"}))
    assert at_end.code == ResponseCode.PULL_NOT_FOUND

    group = {"consumerGroup": "cg"}
    assert offset_of(RequestCode.QUERY_CONSUMER_OFFSET, **group) == "0"
    update = RemotingCommand(
        code=RequestCode.UPDATE_CONSUMER_OFFSET,
        ext_fields={"topic": "Pulled", "queueId": "0", "consumerGroup": "cg", "commitOffset": "2"},
    )
    assert wire.call(update).code == ResponseCode.SUCCESS
    assert offset_of(RequestCode.QUERY_CONSUMER_OFFSET, **group) == "2"

    heartbeat = {"clientID": "127.0.0.1@test", "consumerDataSet": [{"groupName": "cg"}], "producerDataSet": []}
    assert wire.call(RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())).code == 0
    members = wire.call(RemotingCommand(code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields=group))
    assert json.loads(members.body) == {"consumerIdList": ["127.0.0.1@test"]}
    wire.close()


def test_update_and_create_topic_reaches_the_namesrv(local_cluster: LocalCluster) -> None:
    wire = Wire(local_cluster.broker("broker-b").addr)
    fields = {"topic": "Made", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6", "defaultTopic": "TBW102"}
    assert wire.call(RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=fields)).code == 0
    wire.close()
    data = TopicRouteData.from_json(route(local_cluster.namesrv_addr, "Made").body)
    assert [(q.broker_name, q.write_queue_nums) for q in data.queue_datas] == [("broker-b", 2)]


# -- faults ----------------------------------------------------------------------------------------


def test_injected_codes_for_n_sends_then_normal(local_cluster: LocalCluster) -> None:
    local_cluster.create_topic("Faulty")
    broker = local_cluster.broker("broker-a")
    broker.inject(code=ResponseCode.SYSTEM_BUSY, times=2)
    wire = Wire(broker.addr)
    codes = [wire.call(send_request("Faulty")).code for _ in range(3)]
    wire.close()
    assert codes == [ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_BUSY, ResponseCode.SUCCESS]
    assert len(local_cluster.messages("Faulty")) == 1


def test_injected_fraction_and_latency(local_cluster: LocalCluster) -> None:
    local_cluster.create_topic("Flaky")
    broker = local_cluster.broker("broker-a")
    broker.inject(code=ResponseCode.SERVICE_NOT_AVAILABLE, fraction=0.5)
    wire = Wire(broker.addr)
    codes = [wire.call(send_request("Flaky")).code for _ in range(200)]
    assert 40 < codes.count(ResponseCode.SERVICE_NOT_AVAILABLE) < 160
    broker.inject(latency_ms=150)
    started = time.monotonic()
    assert wire.call(send_request("Flaky")).code == ResponseCode.SUCCESS
    assert time.monotonic() - started >= 0.15
    broker.clear_faults()
    wire.close()


def test_a_stored_not_ok_code_stores_and_a_fault_sequence_follows(local_cluster: LocalCluster) -> None:
    local_cluster.create_topic("Flushing")
    broker = local_cluster.broker("broker-a")
    broker.inject(code=ResponseCode.FLUSH_DISK_TIMEOUT, times=1, then=Faults(code=ResponseCode.SYSTEM_BUSY, times=1))
    wire = Wire(broker.addr)
    answers = [wire.call(send_request("Flushing")) for _ in range(3)]
    wire.close()
    assert [a.code for a in answers] == [ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.SYSTEM_BUSY, 0]
    stored = local_cluster.messages("Flushing")
    assert [m.queue_offset for m in stored] == [0, 1]  # the FLUSH_DISK_TIMEOUT send was stored
    assert answers[0].field("queueOffset") == "0" and answers[0].field("msgId") == stored[0].offset_msg_id
    assert broker.sends == 1  # SEND_OK answers only


def test_the_request_log_keeps_the_last_requests_and_delete_topic_leaves_the_route(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(request_log=3)
    cluster.create_topic("Logged")
    broker = cluster.broker("broker-a")
    wire = Wire(broker.addr)
    sent = [send_request("Logged") for _ in range(4)]
    for cmd in sent:
        wire.call(cmd)
    wire.call(RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "Logged", "queueId": "0"}))
    wire.close()
    assert [r.opaque for r in broker.received(RequestCode.SEND_MESSAGE_V2)] == [c.opaque for c in sent[2:]]
    assert [r.code for r in broker.received()][-1] == RequestCode.GET_MAX_OFFSET
    ns = cluster.namesrv(0)
    cluster.delete_topic("Logged", brokers=["broker-a"])
    route = ns.route("Logged")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert len(broker.messages("Logged")) == 4  # its stored messages stay


def test_dropped_connections(local_cluster: LocalCluster) -> None:
    broker = local_cluster.broker("broker-a")
    wire = Wire(broker.addr)
    assert wire.call(send_request("BeforeDrop")).code == ResponseCode.SUCCESS  # the broker holds the connection
    broker.drop_connections()
    assert wire.closed_by_peer()
    wire.close()
    fresh = Wire(broker.addr)
    assert fresh.call(send_request("AfterDrop")).code == ResponseCode.SUCCESS
    fresh.close()


def test_write_permission_off(local_cluster: LocalCluster) -> None:
    local_cluster.create_topic("ReadOnly")
    broker = local_cluster.broker("broker-a")
    broker.create_topic("Ordered", order=True)
    broker.set_writable(False)
    data = TopicRouteData.from_json(route(local_cluster.namesrv_addr, "ReadOnly").body)
    assert {q.broker_name: q.perm for q in data.queue_datas} == {"broker-a": Perm.READ, "broker-b": Perm.READ_WRITE}
    wire = Wire(broker.addr)
    # A 4.9.8 broker without write permission refuses sends to order topics only (msgCheck); the
    # route keeps clients away from its other queues.
    refused = wire.call(send_request("Ordered"))
    assert (refused.code, refused.remark) == (
        ResponseCode.NO_PERMISSION,
        "the broker[127.0.0.1] sending message is forbidden",
    )
    assert wire.call(send_request("ReadOnly")).code == ResponseCode.SUCCESS
    broker.set_writable(True)
    assert wire.call(send_request("Ordered")).code == ResponseCode.SUCCESS
    wire.close()


def test_broker_stop_leaves_the_route_and_start_returns(local_cluster: LocalCluster) -> None:
    local_cluster.create_topic("Comeback")
    ns = local_cluster.namesrvs[0]
    broker = local_cluster.broker("broker-b")
    broker.stop()
    assert ns.broker_names() == ["broker-a"]
    with pytest.raises(OSError):
        Wire(broker.addr)
    broker.start()
    assert ns.broker_names() == ["broker-a", "broker-b"]
    data = TopicRouteData.from_json(route(ns.addr, "Comeback").body)
    assert sorted(q.broker_name for q in data.queue_datas) == ["broker-a", "broker-b"]


# -- hostile input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">I", 0xFFFFFFF0) + b"x" * 16,  # absurd length
        struct.pack(">I", 2) + b"ab",  # shorter than a header word
        struct.pack(">II", 12, 0x00000008) + b"{not json",  # garbled JSON header
        struct.pack(">II", 8, 0x05000004) + b"abcd",  # unknown serialize type
        struct.pack(">II", 8, 0x00000100) + b"\x00" * 4,  # header length past the frame
    ],
)
def test_garbage_closes_the_connection_and_the_server_keeps_serving(
    local_cluster: LocalCluster, garbage: bytes
) -> None:
    local_cluster.create_topic("Survivor", queues=1, brokers=["broker-a"])
    for addr in (local_cluster.broker("broker-a").addr, local_cluster.namesrv_addr):
        wire = Wire(addr)
        wire.sock.sendall(garbage)
        assert wire.closed_by_peer()
        wire.close()
    wire = Wire(local_cluster.broker("broker-a").addr)
    assert wire.call(send_request("Survivor")).code == ResponseCode.SUCCESS
    wire.close()
    assert [m.body for m in local_cluster.messages("Survivor")] == [b"hello"]
    assert route(local_cluster.namesrv_addr, "Survivor").code == ResponseCode.SUCCESS


def test_random_bytes_never_kill_the_servers(local_cluster: LocalCluster) -> None:
    rng = random.Random(3)
    for _ in range(30):
        for addr in (local_cluster.broker("broker-a").addr, local_cluster.namesrv_addr):
            wire = Wire(addr)
            wire.sock.sendall(rng.randbytes(rng.randrange(1, 300)))
            wire.close()
    assert route(local_cluster.namesrv_addr, "TBW102").code == ResponseCode.SUCCESS
    wire = Wire(local_cluster.broker("broker-a").addr)
    assert wire.call(send_request("AfterNoise")).code == ResponseCode.SUCCESS
    wire.close()


def test_unknown_codes_and_missing_fields_get_error_answers(local_cluster: LocalCluster) -> None:
    servers = [
        (local_cluster.broker("broker-a").addr, RequestCode.SEND_MESSAGE_V2),
        (local_cluster.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC),
    ]
    for addr, missing_code in servers:
        wire = Wire(addr)
        unknown = wire.call(RemotingCommand(code=9999))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "9999" in (unknown.remark or "")
        missing = wire.call(RemotingCommand(code=missing_code, ext_fields={}))
        assert missing.code == ResponseCode.SYSTEM_ERROR
        assert "lacks" in (missing.remark or "")
        wire.close()
    broker_wire = Wire(local_cluster.broker("broker-a").addr)
    bad_batch = send_request("BadBatch", body=b"\x00\x00\x00\x05junk", batch=True)
    assert broker_wire.call(bad_batch).code == ResponseCode.MESSAGE_ILLEGAL
    broker_wire.close()


# -- broker: stored properties, against the captured 4.9.8 broker ----------------------------------


def test_a_single_messages_properties_are_stored_as_a_4_9_8_broker_stores_them() -> None:
    # Message 1 of the captured PULL answer, as its producer sent it (WAIT=true, no CLUSTER): the
    # broker put CLUSTER in, took WAIT out and wrote the HashMap back in its own order.
    sent = {
        "color": "blue",
        "KEYS": "KeyPull1 KeyPull2",
        "UNIQ_KEY": "C00002021BDE5FFD2B2770CBCDA20000",
        "WAIT": "true",
        "TAGS": "TagPull",
        "n": "42",
    }
    stored = stored_properties(encode_properties(sent), broker_stamp("DefaultCluster", "4.9.8"), keep_wait=False)
    assert stored == (
        b"color\x01blue\x02KEYS\x01KeyPull1 KeyPull2\x02UNIQ_KEY\x01C00002021BDE5FFD2B2770CBCDA20000"
        b"\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagPull\x02n\x0142"
    )


def test_a_batchs_records_are_stored_as_long_as_a_4_9_8_broker_stores_them(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    # The captured SEND_BATCH_MESSAGE (3 records) replayed: the commit-log offsets in the answer's
    # msgId are as far apart as the real broker's, so every stored record has its size (its own
    # properties, then the batch's: CLUSTER and WAIT).
    request, answer = (read_sample(f"16-send-batch-broker-b-{kind}.bin") for kind in ("request", "response"))
    assert request is not None and answer is not None
    cmd = decode_frame(request)
    cluster = make_cluster(brokers=1)
    cluster.create_topic(cmd.require("b"), queues=4)
    wire = Wire(cluster.broker("broker-a").addr)
    got = wire.call(cmd)
    wire.close()

    def gaps(msg_ids: str) -> list[int]:
        offsets = [int(i[16:], 16) for i in msg_ids.split(",")]
        return [b - a for a, b in itertools.pairwise(offsets)]

    assert got.code == ResponseCode.SUCCESS
    assert gaps(got.require("msgId")) == gaps(decode_frame(answer).require("msgId")) == [213, 213]
    stored = cluster.messages(cmd.require("b"))
    assert [m.properties["CLUSTER"] for m in stored] == ["DefaultCluster"] * 3
    assert [m.properties["KEYS"] for m in stored] == ["key0", "key1", "key2"]


@pytest.mark.parametrize(
    ("version", "added", "single_wait"),
    [
        ("4.9.8", {"CLUSTER": "DefaultCluster"}, None),
        ("5.3.3", {"CLUSTER": "DefaultCluster", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}, "true"),
    ],
)
def test_what_each_version_adds_to_a_stored_message(make_cluster, version: str, added: dict, single_wait) -> None:
    # As the real 4.9.8 and 5.3.3 store them, read back by the Java consumer (tests/real/test_local_fidelity.py):
    # both put CLUSTER in; 5.3.3 also MSG_REGION and TRACE_ON, and keeps a single message's WAIT.
    cluster = make_cluster(rocketmq_version=version)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="stamp") as p:
        p.send(Message("Stamped", b"single", properties={"p": "v"}))
        p.send_batch([Message("Stamped", b"batched")])
    stored = {m.body: m.properties for m in cluster.messages("Stamped")}
    for body, wait in ((b"single", single_wait), (b"batched", "true")):
        props = stored[body]
        assert {k: props[k] for k in added} == added
        assert props.get("WAIT") == wait
