"""Decoders read the captured frames' bodies and headers into the values the READMEs describe."""

from __future__ import annotations

import datetime as dt
import json
import zlib
from pathlib import Path

import pytest

from spark_rocketmq.errors import InvalidMessageError, ProtocolError
from spark_rocketmq.protocol.codes import Perm, RequestCode, SysFlag
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.frame import decode_frame
from spark_rocketmq.protocol.headers import SendMessageRequestHeader, SendMessageResponseHeader
from spark_rocketmq.protocol.javamap import hashmap_order, java_string_hash
from spark_rocketmq.protocol.message import decode_batch_body, decode_properties, encode_properties
from spark_rocketmq.protocol.route import BrokerData, MessageQueue, QueueData, TopicRouteData, publish_info
from spark_rocketmq.protocol.stored import (
    MESSAGE_MAGIC_CODE,
    body_crc,
    decode_stored_messages,
    encode_stored_message,
    offset_msg_id,
    parse_offset_msg_id,
)
from spark_rocketmq.protocol.uniq_id import (
    check_uniq_id,
    make_uniq_id,
    make_uniq_ids,
    month_start_ms,
    uniq_id_prefix,
    uniq_id_time_offset,
)

DATA = Path(__file__).parent / "data"


def body_of(sample_bytes, name: str) -> bytes:
    return decode_frame(sample_bytes(name)).body


# -- routes ------------------------------------------------------------------------------------
def test_route_standard_dialect(sample_bytes):
    route = TopicRouteData.from_json(body_of(sample_bytes, "01-route-response.bin"))
    assert route.queue_datas == [QueueData("broker-a", 4, 4, 6, 0)]
    assert route.broker_datas == [BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"})]
    assert route.order_topic_conf is None
    assert route.filter_server_table == {}
    assert route.broker_addr("broker-a") == "127.0.0.1:10911"
    assert route.broker_addr("broker-x") is None


@pytest.mark.parametrize("sample", ["07-route-tbw102-response.bin", "11-route-version0-response.bin"])
def test_route_both_dialects_give_the_same_route(sample_bytes, sample):
    route = TopicRouteData.from_json(body_of(sample_bytes, sample))
    assert {(q.broker_name, q.perm, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas} == {
        ("broker-a", 7, 8, 8),
        ("broker-b", 7, 8, 8),
    }
    assert {b.broker_name: b.master_addr for b in route.broker_datas} == {
        "broker-a": "127.0.0.1:10911",
        "broker-b": "127.0.0.1:10921",
    }


def test_legacy_dialect_is_not_strict_json_but_parses(sample_bytes):
    raw = body_of(sample_bytes, "11-route-version0-response.bin")
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    assert TopicRouteData.from_json(raw) == TopicRouteData.from_json(
        body_of(sample_bytes, "07-route-tbw102-response.bin")
    )


def test_route_from_json_accepts_str_and_leaves_string_values_alone():
    text = (
        '{"brokerDatas":[{"brokerAddrs":{0:"h:1",1:"h:2"},"brokerName":"b{0:x}","cluster":"c"}],'
        '"queueDatas":[{"brokerName":"b{0:x}","perm":6,"readQueueNums":1,"writeQueueNums":2}],'
        '"orderTopicConf":"b{0:x}:2"}'
    )
    route = TopicRouteData.from_json(text)
    assert route.broker_datas[0].broker_addrs == {0: "h:1", 1: "h:2"}
    assert route.broker_datas[0].broker_name == "b{0:x}"
    assert route.order_topic_conf == "b{0:x}:2"
    assert route.queue_datas[0].topic_sys_flag == 0


@pytest.mark.parametrize(
    ("addrs", "asked", "proxy"),
    [
        # a 5.3.3 Proxy's answer: its own address for every brokerName
        ({"broker-a": {0: "p:10997"}, "broker-b": {0: "p:10997"}}, ["p:10997"], "p:10997"),
        ({"broker-a": {0: "p:10997"}, "broker-b": {0: "p:10997"}}, ["lb:80"], "p:10997"),  # behind a balancer
        ({"broker-a": {0: "p:10997"}}, ["p:10997"], "p:10997"),
        ({"broker-a": {0: "h:10911"}}, ["h:9876"], None),  # one broker, reached directly
        ({"broker-a": {0: "h:10911"}, "broker-b": {0: "h:10921"}}, ["h:9876"], None),
        ({"broker-a": {0: "h:10911", 1: "h:10912"}}, ["h:9876"], None),
    ],
)
def test_a_route_tells_a_proxy_by_one_address_for_every_broker(addrs, asked, proxy):
    datas = [BrokerData("c", name, dict(a)) for name, a in addrs.items()]
    route = TopicRouteData(queue_datas=[QueueData(n, 4, 4, 6) for n in addrs], broker_datas=datas)
    assert route.proxy_addr(asked) == proxy


@pytest.mark.parametrize(
    "raw", [b"", b"not json", b"\xff\xfe", b"[]", b'{"queueDatas":[{"perm":6}]}', b'{"brokerDatas":3}']
)
def test_route_garbage_is_a_protocol_error(raw):
    with pytest.raises(ProtocolError):
        TopicRouteData.from_json(raw)


def test_publish_info_sorts_queue_data_by_broker_name(sample_bytes):
    route = TopicRouteData.from_json(body_of(sample_bytes, "07-route-tbw102-response.bin"))
    assert [q.broker_name for q in route.queue_datas] == ["broker-b", "broker-a"]
    info = publish_info("TBW102", route)
    assert info.message_queues == [MessageQueue("TBW102", "broker-a", i) for i in range(8)] + [
        MessageQueue("TBW102", "broker-b", i) for i in range(8)
    ]
    assert info.ok
    assert not info.order_topic
    assert info.broker_names == ["broker-a", "broker-b"]
    assert info.write_queue_nums("broker-b") == 8
    assert info.write_queue_nums("broker-z") == -1


def _route(queue_datas, broker_datas, order=None):
    return TopicRouteData(queue_datas=queue_datas, broker_datas=broker_datas, order_topic_conf=order)


def test_publish_info_keeps_writable_queues_of_brokers_with_a_master_only():
    route = _route(
        [
            QueueData("broker-c", 2, 3, Perm.READ_WRITE),
            QueueData("broker-ro", 4, 4, Perm.READ),
            QueueData("broker-slave-only", 4, 4, Perm.READ_WRITE),
            QueueData("broker-gone", 4, 4, Perm.READ_WRITE),
            QueueData("broker-a", 8, 1, Perm.WRITE),
        ],
        [
            BrokerData("c", "broker-a", {0: "h:1"}),
            BrokerData("c", "broker-c", {0: "h:3", 1: "h:4"}),
            BrokerData("c", "broker-ro", {0: "h:5"}),
            BrokerData("c", "broker-slave-only", {1: "h:6"}),
        ],
    )
    info = publish_info("T", route)
    assert info.message_queues == [
        MessageQueue("T", "broker-a", 0),
        MessageQueue("T", "broker-c", 0),
        MessageQueue("T", "broker-c", 1),
        MessageQueue("T", "broker-c", 2),
    ]
    assert info.write_queue_nums("broker-ro") == -1
    assert info.write_queue_nums("broker-c") == 3


def test_publish_info_with_no_writable_queue_is_not_ok():
    route = _route([QueueData("broker-a", 4, 4, Perm.READ)], [BrokerData("c", "broker-a", {0: "h:1"})])
    info = publish_info("T", route)
    assert info.message_queues == []
    assert not info.ok


def test_publish_info_order_topic_conf():
    route = _route(
        [QueueData("broker-a", 8, 8, Perm.READ)],
        [BrokerData("c", "broker-a", {1: "h:1"})],
        order="broker-b:2;broker-a:3",
    )
    info = publish_info("T", route)
    assert info.order_topic
    assert info.message_queues == [
        MessageQueue("T", "broker-b", 0),
        MessageQueue("T", "broker-b", 1),
        MessageQueue("T", "broker-a", 0),
        MessageQueue("T", "broker-a", 1),
        MessageQueue("T", "broker-a", 2),
    ]


def test_publish_info_bad_order_topic_conf_is_a_protocol_error():
    route = _route([], [], order="broker-a")
    with pytest.raises(ProtocolError, match="broker-a"):
        publish_info("T", route)


def test_route_order_topic_conf_round_trips_through_json():
    route = _route([QueueData("b", 1, 1, 6)], [BrokerData("c", "b", {0: "h:1"})], order="b:1")
    for standard in (True, False):
        assert TopicRouteData.from_json(route.to_json(standard=standard)) == route


# -- stored messages (PULL_MESSAGE body) -------------------------------------------------------
PULL_PROPS_1 = (
    "color\x01blue\x02KEYS\x01KeyPull1 KeyPull2\x02UNIQ_KEY\x01C00002021BDE5FFD2B2770CBCDA20000"
    "\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagPull\x02n\x0142"
)
PULL_PROPS_2 = "UNIQ_KEY\x01C00002021BDE5FFD2B2770CBCDF30001\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagZip"
COMPRESSIBLE_TEXT = "".join(f"line {i} of a compressible golden body\n" for i in range(213)).encode()


def test_pull_body_first_message(sample_bytes):
    body = body_of(sample_bytes, "12-pull-message-response.bin")
    assert len(body) == 973
    first, _second = decode_stored_messages(body)
    assert first.topic == "GoldenPull"
    assert first.queue_id == 0
    assert first.flag == 0
    assert first.queue_offset == 0
    assert first.commit_log_offset == 190
    assert first.sys_flag == 0
    assert first.born_timestamp == 1795383604643
    assert first.born_host == ("127.0.0.1", 59662)
    assert first.store_timestamp == 1795383604676
    assert first.store_host == ("127.0.0.1", 10911)
    assert first.reconsume_times == 0
    assert first.prepared_transaction_offset == 0
    assert first.body == b"first message with props"
    assert first.body_crc == 778071447 == body_crc(first.body)
    assert first.properties == decode_properties(PULL_PROPS_1)
    assert first.properties["n"] == "42"
    assert first.tags == "TagPull"
    assert first.keys == ["KeyPull1", "KeyPull2"]
    assert first.uniq_key == "C00002021BDE5FFD2B2770CBCDA20000"
    assert first.msg_id == first.uniq_key
    assert first.offset_msg_id == "7F00000100002A9F00000000000000BE"
    assert not first.compressed
    assert first.decompressed_body() == first.body


def test_pull_body_second_message_is_zlib(sample_bytes):
    _first, second = decode_stored_messages(body_of(sample_bytes, "12-pull-message-response.bin"))
    assert second.queue_offset == 1
    assert second.commit_log_offset == 431
    assert second.sys_flag == 0x301 == SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB
    assert second.compressed
    assert second.born_timestamp == 1795383604727
    assert second.store_timestamp == 1795383604754
    assert second.born_host == ("127.0.0.1", 59662)
    assert second.store_host == ("127.0.0.1", 10911)
    assert len(second.body) == 555
    assert second.body[:2] == b"\x78\x5e"
    assert second.body_crc == 1014415626 == body_crc(second.body)
    inflated = second.decompressed_body()
    assert len(inflated) == 8197
    assert inflated == COMPRESSIBLE_TEXT
    assert second.tags == "TagZip"
    assert second.keys == []
    assert second.properties == decode_properties(PULL_PROPS_2)


def test_pull_body_record_sizes_and_magic(sample_bytes):
    body = body_of(sample_bytes, "12-pull-message-response.bin")
    assert int.from_bytes(body[0:4], "big") == 241
    assert int.from_bytes(body[241:245], "big") == 732
    assert int.from_bytes(body[4:8], "big", signed=True) == MESSAGE_MAGIC_CODE
    assert MESSAGE_MAGIC_CODE & 0xFFFFFFFF == 0xDAA320A7


def test_stored_encoder_rebuilds_the_pull_body(sample_bytes):
    """What our local broker writes for PULL_MESSAGE equals the 4.9.8 commit-log bytes."""
    common = {"topic": "GoldenPull", "queue_id": 0, "flag": 0, "born_host": ("127.0.0.1", 59662)}
    store = ("127.0.0.1", 10911)
    first = encode_stored_message(
        **common,
        queue_offset=0,
        commit_log_offset=190,
        sys_flag=0,
        born_timestamp=1795383604643,
        store_timestamp=1795383604676,
        store_host=store,
        body=b"first message with props",
        properties=PULL_PROPS_1,
    )
    second = encode_stored_message(
        **common,
        queue_offset=1,
        commit_log_offset=431,
        sys_flag=0x301,
        born_timestamp=1795383604727,
        store_timestamp=1795383604754,
        store_host=store,
        body=zlib.compress(COMPRESSIBLE_TEXT, 5),
        properties=PULL_PROPS_2,
    )
    assert first + second == body_of(sample_bytes, "12-pull-message-response.bin")


def test_decode_stored_messages_stops_at_a_zero_size():
    rec = encode_stored_message(
        topic="T",
        queue_id=1,
        queue_offset=2,
        commit_log_offset=3,
        sys_flag=0,
        flag=0,
        born_timestamp=4,
        born_host=("10.0.0.1", 5),
        store_timestamp=6,
        store_host=("10.0.0.2", 7),
        body=b"x",
        properties="",
    )
    assert len(decode_stored_messages(rec + b"\x00" * 8)) == 1
    assert decode_stored_messages(b"") == []


@pytest.mark.parametrize("cut", [4, 20, 90, 120])
def test_truncated_stored_message_is_a_protocol_error(sample_bytes, cut):
    body = body_of(sample_bytes, "12-pull-message-response.bin")
    with pytest.raises(ProtocolError):
        decode_stored_messages(body[:cut])


def test_offset_msg_ids_of_the_send_answers(sample_bytes):
    cmd = decode_frame(sample_bytes("04-batch-response.bin"))
    ids = SendMessageResponseHeader.from_command(cmd).msg_id.split(",")
    assert [parse_offset_msg_id(i) for i in ids] == [
        ("127.0.0.1", 10911, 8746733174),
        ("127.0.0.1", 10911, 8746733381),
        ("127.0.0.1", 10911, 8746733588),
    ]
    assert offset_msg_id("127.0.0.1", 10911, 8746732964) == "7F00000100002A9F0000000209588DA4"
    assert offset_msg_id("127.0.0.1", 10921, 0x1AA) == "7F00000100002AA900000000000001AA"


@pytest.mark.parametrize("bad", ["zz", "7F000001", "7F00000100002A9F0000000209588DA4FF"])
def test_bad_offset_msg_id_is_a_protocol_error(bad):
    with pytest.raises(ProtocolError):
        parse_offset_msg_id(bad)


# -- batch bodies ------------------------------------------------------------------------------
def test_decode_batch_body_04(sample_bytes):
    records = decode_batch_body(body_of(sample_bytes, "04-batch-request.bin"))
    assert [(r.flag, r.body) for r in records] == [(0, b"b0"), (0, b"b1"), (0, b"b2")]
    for i, r in enumerate(records):
        assert r.properties == {
            "KEYS": f"BK{i}",
            "UNIQ_KEY": f"C00002023C465FFD2B2770393188000{i + 1}",
            "WAIT": "true",
            "TAGS": "TagB",
        }
        assert list(r.properties) == ["KEYS", "UNIQ_KEY", "WAIT", "TAGS"]


def test_decode_batch_body_16(sample_bytes):
    records = decode_batch_body(body_of(sample_bytes, "16-send-batch-broker-b-request.bin"))
    assert [r.body for r in records] == [b"batch-0", b"batch-1", b"batch-2"]
    assert [r.properties["KEYS"] for r in records] == ["key0", "key1", "key2"]
    assert [r.properties["UNIQ_KEY"][-4:] for r in records] == ["0000", "0001", "0002"]


def test_batch_record_layout_16(sample_bytes):
    body = body_of(sample_bytes, "16-send-batch-broker-b-request.bin")
    assert len(body) == 300
    rec = body[:100]
    assert int.from_bytes(rec[0:4], "big") == 100  # total size
    assert rec[4:16] == b"\x00" * 12  # magic, body CRC, flag: zero on the client side
    assert int.from_bytes(rec[16:20], "big") == 7
    assert rec[20:27] == b"batch-0"
    assert int.from_bytes(rec[27:29], "big") == 71
    assert rec[29:] == b"KEYS\x01key0\x02UNIQ_KEY\x01C000020235765FFD2B2770DEF0FE0000\x02WAIT\x01true\x02TAGS\x01TagB"


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x00\x00\x10",
        b"\x00\x00\x00\x16" + b"\x00" * 17,  # one byte of the properties length missing
        b"\x00\x00\x00\x05" + b"\x00" * 30,
        b"\x00\x00\x00\x18\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02ab\x00\x01",
    ],
)
def test_bad_batch_body_is_a_protocol_error(raw):
    with pytest.raises(ProtocolError):
        decode_batch_body(raw)


# -- properties --------------------------------------------------------------------------------
def test_decode_properties_of_the_send_sample(sample_bytes):
    props = decode_properties(decode_frame(sample_bytes("03-send-v2-request.bin")).require("i"))
    assert props == {
        "color": "blue",
        "KEYS": "K1 K2",
        "UNIQ_KEY": "C00002023C465FFD2B277039303F0000",
        "WAIT": "true",
        "TAGS": "TagA",
    }
    assert list(props) == ["color", "KEYS", "UNIQ_KEY", "WAIT", "TAGS"]
    assert encode_properties(props) == decode_frame(sample_bytes("03-send-v2-request.bin")).require("i")


def test_decode_properties_is_lenient_like_java():
    assert decode_properties("") == {}
    assert decode_properties("a\x01b\x02") == {"a": "b"}
    assert decode_properties("a\x01b\x02\x02c\x01d") == {"a": "b", "c": "d"}
    assert decode_properties("novalue\x02k\x01v") == {"k": "v"}
    assert decode_properties("\x01x\x02k\x01v") == {"k": "v"}


def test_encode_properties_has_no_trailing_separator_and_skips_none():
    assert encode_properties({"a": "1", "b": None, "c": "3"}) == "a\x011\x02c\x013"  # type: ignore[dict-item]
    assert encode_properties({}) == ""


# -- send request headers ----------------------------------------------------------------------
def test_send_header_from_v2_sample(sample_bytes):
    header = SendMessageRequestHeader.from_command(decode_frame(sample_bytes("03-send-v2-request.bin")))
    assert header == SendMessageRequestHeader(
        producer_group="golden_group",
        topic="GoldenTopic",
        queue_id=1,
        sys_flag=0,
        born_timestamp=1795373996095,
        flag=0,
        properties="color\x01blue\x02KEYS\x01K1 K2\x02UNIQ_KEY\x01C00002023C465FFD2B277039303F0000"
        "\x02WAIT\x01true\x02TAGS\x01TagA",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        reconsume_times=0,
        unit_mode=False,
        batch=False,
        broker_name="broker-a",
        max_reconsume_times=None,
    )


@pytest.mark.parametrize(
    ("sample", "batch", "sys_flag", "broker"),
    [
        ("04-batch-request.bin", True, 0, "broker-a"),
        ("05-compressed-request.bin", False, 0x301, "broker-a"),
        ("13-rocketmq-send-request.bin", False, 0, "broker-b"),
        ("16-send-batch-broker-b-request.bin", True, 0, "broker-b"),
    ],
)
def test_send_header_from_other_samples(sample_bytes, sample, batch, sys_flag, broker):
    cmd = decode_frame(sample_bytes(sample))
    header = SendMessageRequestHeader.from_command(cmd)
    assert header.batch is batch
    assert header.sys_flag == sys_flag
    assert header.broker_name == broker
    assert header.to_v2_fields() == cmd.ext_fields
    assert list(header.to_v2_fields()) == list(cmd.ext_fields)


def test_send_header_v1_long_names_round_trip():
    header = SendMessageRequestHeader(
        producer_group="g",
        topic="T",
        queue_id=3,
        sys_flag=1,
        born_timestamp=123,
        flag=7,
        properties="WAIT\x01true",
        default_topic_queue_nums=8,
        reconsume_times=2,
        unit_mode=True,
        broker_name="broker-x",
    )
    fields = header.to_v1_fields()
    assert fields["producerGroup"] == "g"
    assert fields["bname"] == "broker-x"
    assert fields["unitMode"] == "true"
    assert fields["batch"] == "false"
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=fields)
    assert SendMessageRequestHeader.from_command(cmd) == header


def test_send_header_v1_field_order_is_java_hashmap_order():
    header = SendMessageRequestHeader("g", "T", 0, 0, 1, 0, "", broker_name="b")
    # Printed by java.util.HashMap on OpenJDK 17 for SendMessageRequestHeader's field names.
    assert list(header.to_v1_fields()) == [
        "queueId",
        "flag",
        "sysFlag",
        "reconsumeTimes",
        "batch",
        "unitMode",
        "defaultTopic",
        "defaultTopicQueueNums",
        "producerGroup",
        "bname",
        "topic",
        "bornTimestamp",
        "properties",
    ]


def test_send_header_max_reconsume_times_round_trips():
    header = SendMessageRequestHeader("g", "T", 0, 0, 1, 0, "", max_reconsume_times=16)
    fields = header.to_v2_fields()
    assert fields["l"] == "16"
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=fields)
    assert SendMessageRequestHeader.from_command(cmd) == header


@pytest.mark.parametrize(("m", "batch"), [(None, False), ("false", False), ("true", True), ("TRUE", True)])
def test_batch_is_the_header_flag_alone(m, batch):
    # As SendMessageRequestHeaderV2 decodes "m" (Boolean.parseBoolean, false when absent): a
    # SEND_BATCH_MESSAGE without it is not a batch to a broker.
    fields = SendMessageRequestHeader("g", "T", 0, 0, 1, 0, "").to_v2_fields()
    del fields["m"]
    if m is not None:
        fields["m"] = m
    header = SendMessageRequestHeader.from_command(
        RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=fields)
    )
    assert header.batch is batch


@pytest.mark.parametrize(("drop", "name"), [("a", "producer_group"), ("b", "topic"), ("e", "queue_id")])
def test_send_header_missing_required_field(drop, name):
    fields = SendMessageRequestHeader("g", "T", 0, 0, 1, 0, "").to_v2_fields()
    del fields[drop]
    with pytest.raises(ProtocolError, match=name):
        SendMessageRequestHeader.from_command(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=fields))


def test_send_header_non_numeric_field():
    fields = SendMessageRequestHeader("g", "T", 0, 0, 1, 0, "").to_v2_fields()
    fields["e"] = "one"
    with pytest.raises(ProtocolError, match="'e'"):
        SendMessageRequestHeader.from_command(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=fields))


def test_send_response_header(sample_bytes):
    header = SendMessageResponseHeader.from_command(decode_frame(sample_bytes("03-send-v2-response.bin")))
    assert header == SendMessageResponseHeader("7F00000100002A9F0000000209588DA4", 1, 0, None)
    with pytest.raises(ProtocolError, match="msgId"):
        SendMessageResponseHeader.from_command(decode_frame(sample_bytes("09-send-oversize-response.bin")))


# -- client message ids (UNIQ_KEY) -------------------------------------------------------------
def test_uniq_id_layout():
    prefix = uniq_id_prefix(bytes([192, 0, 2, 2]), 0x3C46, 0x5FFD2B27)
    assert prefix == "C00002023C465FFD2B27"
    assert make_uniq_ids(prefix, 0x7039303F, 0, 1) == ["C00002023C465FFD2B277039303F0000"]
    assert make_uniq_ids(prefix, 0x703932BA, 4, 2) == [
        "C00002023C465FFD2B27703932BA0004",
        "C00002023C465FFD2B27703932BA0005",
    ]
    # one id at a time is the same id, counters and time offsets wrapping as Java's casts do
    assert (
        make_uniq_ids(prefix, 0x1_0000_0005, 0xFFFF, 2)
        == [
            make_uniq_id(prefix, 5, 0xFFFF),
            make_uniq_id(prefix, 0x1_0000_0005, 0x1_0000),
        ]
        == ["C00002023C465FFD2B2700000005FFFF", "C00002023C465FFD2B27000000050000"]
    )


@pytest.mark.parametrize(("first", "count"), [(5, 0), (0, 1000), (0xFFF0, 40), (7, 0x10000), (0xFFFF, 0x20003)])
def test_uniq_id_runs_are_the_ids_one_at_a_time(first: int, count: int) -> None:
    """A run of ids (cut from the counter table, across its end and more than once round) is make_uniq_id's."""
    prefix = "C00002023C465FFD2B27"
    assert make_uniq_ids(prefix, 0x7039303F, first, count) == [
        make_uniq_id(prefix, 0x7039303F, first + i) for i in range(count)
    ]


def test_uniq_id_time_field_is_ms_since_the_utc_month_start():
    born = 1795373996095  # 03's bornTimestamp
    start = month_start_ms(born, dt.UTC)
    assert start == int(dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert born - start == 0x7039303F
    assert uniq_id_time_offset("C00002023C465FFD2B277039303F0000") == born - start


def test_month_start_follows_the_time_zone():
    born = int(dt.datetime(2026, 12, 1, 2, 0, tzinfo=dt.UTC).timestamp() * 1000)
    assert month_start_ms(born, dt.UTC) == born - 2 * 3600 * 1000
    new_york = dt.timezone(dt.timedelta(hours=-5))
    assert month_start_ms(born, new_york) == int(dt.datetime(2026, 11, 1, tzinfo=new_york).timestamp() * 1000)


def test_uniq_id_fields_wrap_like_java_casts():
    prefix = uniq_id_prefix(bytes(4), 0x13C46, 0x1_5FFD2B27)
    assert prefix == "000000003C465FFD2B27"
    assert make_uniq_ids(prefix, -1, 0x10001, 1)[0].endswith("FFFFFFFF0001")
    assert [i[-4:] for i in make_uniq_ids(prefix, 0, 0xFFFE, 4)] == ["FFFE", "FFFF", "0000", "0001"]


def test_uniq_id_checks():
    assert check_uniq_id("C00002023C465FFD2B277039303F0000")
    for bad in ["c00002023c465ffd2b277039303f0000", "C00002023C465FFD2B277039303F000", "G" * 32]:
        with pytest.raises(InvalidMessageError):
            check_uniq_id(bad)
    with pytest.raises(ValueError):
        uniq_id_prefix(b"\x00" * 16, 1, 1)


def test_all_sample_uniq_keys_share_the_client_prefix(sample_bytes):
    names = ["03-send-v2-request.bin", "05-compressed-request.bin"]
    for name in names:
        uniq = decode_properties(decode_frame(sample_bytes(name)).require("i"))["UNIQ_KEY"]
        assert uniq.startswith("C00002023C465FFD2B27")
    for record in decode_batch_body(body_of(sample_bytes, "04-batch-request.bin")):
        assert record.properties["UNIQ_KEY"].startswith("C00002023C465FFD2B27")


# -- Java HashMap order ------------------------------------------------------------------------
def test_hashmap_order_known_cases():
    assert hashmap_order(["TAGS", "KEYS", "WAIT", "color", "UNIQ_KEY"]) == ["color", "KEYS", "UNIQ_KEY", "WAIT", "TAGS"]
    letters = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "n", "Signature", "AccessKey"]
    assert hashmap_order(letters) == letters
    props = [f"prop{i * 7}" for i in range(20)] + ["KEYS", "UNIQ_KEY"]
    assert hashmap_order(props) == [
        "prop126", "prop105", "prop91", "prop119", "prop70", "prop84", "prop7", "prop28", "prop49", "prop0",
        "KEYS", "prop42", "prop63", "prop77", "prop21", "prop98", "prop35", "prop133", "UNIQ_KEY", "prop56",
        "prop112", "prop14",
    ]  # fmt: skip


def _java_cases() -> list[tuple[list[str], list[str]]]:
    doc = json.loads((DATA / "java_hashmap_orders.json").read_text("utf-8"))
    return [(c["put"], c["iterates"]) for c in doc["cases"]]


@pytest.mark.parametrize(("put", "iterates"), _java_cases())
def test_hashmap_order_matches_java(put, iterates):
    """Orders printed by OpenJDK 17's HashMap.keySet() (random names, resizes, non-BMP characters)."""
    assert hashmap_order(put) == iterates


def test_hashmap_order_keeps_the_first_slot_of_a_duplicate():
    assert hashmap_order(["b", "a", "b"]) == hashmap_order(["b", "a"])


def test_java_string_hash():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_string_hash("😀") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair


def test_cluster_info_broker_names_in_both_json_dialects() -> None:
    from spark_rocketmq.protocol.registry import cluster_info_body, registered_broker_names

    fastjson = (
        b'{"brokerAddrTable":{"broker-b":{"brokerAddrs":{0:"10.0.0.2:10911"},"brokerName":"broker-b",'
        b'"cluster":"DefaultCluster"},"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.3:10911"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a","broker-b"]}}'
    )
    assert registered_broker_names(fastjson) == ["broker-a", "broker-b"]
    assert registered_broker_names(cluster_info_body({"b1": ("C", {0: "h:1"})})) == ["b1"]
    assert registered_broker_names(b'{"brokerAddrTable":{},"clusterAddrTable":{}}') == []  # a restarted NameServer
    with pytest.raises(ProtocolError, match="cluster info"):
        registered_broker_names(b"[not json")
