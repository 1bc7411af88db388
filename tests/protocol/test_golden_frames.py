"""Every captured 4.9.8 frame decodes, re-encodes byte for byte, and says what the READMEs say it says."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wire_samples import sample_names

from spark_rocketmq.protocol.codes import SerializeType
from spark_rocketmq.protocol.command import FLAG_RESPONSE
from spark_rocketmq.protocol.frame import FrameDecoder, decode_frame

JSON = SerializeType.JSON
ROCKETMQ = SerializeType.ROCKETMQ

TOPIC_NOT_EXIST_REMARK = (
    "No topic route info in name server for the topic: {topic}\n"
    "See http://rocketmq.apache.org/docs/faq/ for further details."
)


def _send_fields(**overrides: str) -> dict[str, str]:
    base = {
        "a": "golden_group",
        "b": "GoldenTopic",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "h": "0",
        "j": "0",
        "k": "false",
        "m": "false",
        "n": "broker-a",
    }
    base.update(overrides)
    # Wire order: the one-letter fields a..n (HashMap order of single letters), then anything added.
    letters = sorted(k for k in base if len(k) == 1)
    return {k: base[k] for k in letters + [k for k in base if len(k) > 1]}


def _send_answer(queue_id: str, msg_id: str, queue_offset: str = "0") -> dict[str, str]:
    return {
        "queueId": queue_id,
        "TRACE_ON": "true",
        "MSG_REGION": "DefaultRegion",
        "msgId": msg_id,
        "queueOffset": queue_offset,
    }


@dataclass(frozen=True)
class Expect:
    """What README.md / README-set2.md state about one file."""

    size: int
    code: int
    opaque: int
    ser: SerializeType = JSON
    ext: dict[str, str] | None = None
    #: True when the README gives the extFields in wire order (then the order is checked too).
    ext_ordered: bool = False
    remark: str | None = None
    body_len: int = 0
    version: int = 409


EXPECTED: dict[str, Expect] = {
    "01-route-request.bin": Expect(141, 105, 2, ext={"topic": "GoldenTopic"}, ext_ordered=True),
    "01-route-response.bin": Expect(338, 0, 2, body_len=235),
    "02-route-notfound-request.bin": Expect(149, 105, 14, ext={"topic": "NoSuchTopic_golden"}, ext_ordered=True),
    "02-route-notfound-response.bin": Expect(
        248, 17, 14, remark=TOPIC_NOT_EXIST_REMARK.format(topic="NoSuchTopic_golden")
    ),
    "03-send-v2-request.bin": Expect(
        415,
        310,
        4,
        ext=_send_fields(
            e="1",
            g="1795373996095",
            i="color\x01blue\x02KEYS\x01K1 K2\x02UNIQ_KEY\x01C00002023C465FFD2B277039303F0000"
            "\x02WAIT\x01true\x02TAGS\x01TagA",
        ),
        body_len=12,
    ),
    "03-send-v2-response.bin": Expect(
        239, 0, 4, ext=_send_answer("1", "7F00000100002A9F0000000209588DA4"), ext_ordered=True
    ),
    "04-batch-request.bin": Expect(
        571, 320, 10, ext=_send_fields(e="2", g="1795373996424", i="WAIT\x01true", m="true"), body_len=282
    ),
    "04-batch-response.bin": Expect(
        306,
        0,
        10,
        ext=_send_answer(
            "2",
            "7F00000100002A9F0000000209588E76,7F00000100002A9F0000000209588F45,7F00000100002A9F0000000209589014",
        ),
    ),
    "05-compressed-request.bin": Expect(
        728,
        310,
        12,
        ext=_send_fields(
            e="3",
            f="769",
            g="1795373996731",
            i="UNIQ_KEY\x01C00002023C465FFD2B27703932BA0004\x02WAIT\x01true\x02TAGS\x01TagZ",
        ),
        body_len=364,
    ),
    "05-compressed-response.bin": Expect(240, 0, 12, ext=_send_answer("3", "7F00000100002A9F00000002095890E3")),
    "06-register-broker-request.bin": Expect(
        3829,
        103,
        893146,
        ext={
            "brokerId": "0",
            "bodyCrc32": "1593590959",
            "clusterName": "DefaultCluster",
            "brokerAddr": "127.0.0.1:10911",
            "haServerAddr": "127.0.0.1:10912",
            "compressed": "false",
            "brokerName": "broker-a",
        },
        body_len=3525,
    ),
    "06-register-broker-response.bin": Expect(123, 0, 893146, ext={}),
    "07-route-tbw102-request.bin": Expect(136, 105, 4, ext={"topic": "TBW102"}, ext_ordered=True),
    "07-route-tbw102-response.bin": Expect(518, 0, 4, body_len=415),
    "07b-route-topic-not-exist-request.bin": Expect(141, 105, 2, ext={"topic": "GoldenTopic"}, ext_ordered=True),
    "07b-route-topic-not-exist-response.bin": Expect(
        240, 17, 2, remark=TOPIC_NOT_EXIST_REMARK.format(topic="GoldenTopic")
    ),
    "08-heartbeat-request.bin": Expect(255, 34, 8, body_len=151),
    "08-heartbeat-response.bin": Expect(103, 0, 8),
    "09-send-oversize-request.bin": Expect(
        4194668,
        310,
        4,
        ext=_send_fields(
            g="1795383657015", i="UNIQ_KEY\x01C00002021D735FFD2B2770CC9A360000\x02WAIT\x01true\x02TAGS\x01TagBig"
        ),
        ext_ordered=True,
        body_len=4194305,
    ),
    "09-send-oversize-response.bin": Expect(
        315,
        13,
        4,
        ext={"TRACE_ON": "true", "MSG_REGION": "DefaultRegion"},
        ext_ordered=True,
        remark="the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 4194304B, msg properties length limit 32KB.",
    ),
    "10-send-readonly-topic-request.bin": Expect(
        375,
        310,
        0,
        ext=_send_fields(
            b="GoldenRO",
            g="1795383694003",
            i="UNIQ_KEY\x017F000001000000000000000000000001\x02WAIT\x01true\x02TAGS\x01TagRaw",
        ),
        ext_ordered=True,
        body_len=15,
    ),
    "10-send-readonly-topic-response.bin": Expect(
        239, 0, 0, ext=_send_answer("0", "7F00000100002A9F000000000000048B", "1"), ext_ordered=True
    ),
    "11-route-version0-request.bin": Expect(137, 105, 4242, ext={"topic": "TBW102"}, ext_ordered=True, version=0),
    "11-route-version0-response.bin": Expect(517, 0, 4242, body_len=411),
    "12-pull-message-request.bin": Expect(
        382,
        11,
        4,
        ext={
            "queueId": "0",
            "maxMsgNums": "32",
            "sysFlag": "4",
            "commitOffset": "0",
            "subscription": "*",
            "ReqT": "0",
            "suspendTimeoutMillis": "20000",
            "bname": "broker-a",
            "topic": "GoldenPull",
            "queueOffset": "0",
            "expressionType": "TAG",
            "subVersion": "0",
            "consumerGroup": "golden_consumer_group",
        },
        ext_ordered=True,
    ),
    "12-pull-message-response.bin": Expect(
        1188,
        0,
        4,
        ext={"suggestWhichBrokerId": "0", "nextBeginOffset": "2", "maxOffset": "2", "minOffset": "0"},
        ext_ordered=True,
        remark="FOUND",
        body_len=973,
    ),
    "13-rocketmq-route-request.bin": Expect(51, 105, 0, ser=ROCKETMQ, ext={"topic": "GoldenTopic"}, ext_ordered=True),
    "13-rocketmq-route-response.bin": Expect(444, 0, 0, ser=ROCKETMQ, body_len=415),
    "13-rocketmq-send-request.bin": Expect(
        279,
        310,
        6,
        ser=ROCKETMQ,
        ext=_send_fields(
            e="3",
            g="1795383607345",
            i="KEYS\x01KeyBin\x02UNIQ_KEY\x01C00002021C2E5FFD2B2770CBD8310000\x02WAIT\x01true\x02TAGS\x01TagBin",
            n="broker-b",
        ),
        ext_ordered=True,
        body_len=19,
    ),
    "13-rocketmq-send-response.bin": Expect(
        151,
        0,
        6,
        ser=ROCKETMQ,
        ext={
            "msgId": "7F00000100002AA900000000000000C6",
            "queueId": "3",
            "queueOffset": "0",
            "TRACE_ON": "true",
            "MSG_REGION": "DefaultRegion",
        },
        ext_ordered=True,
    ),
    "14-send-bad-queueid-request.bin": Expect(
        378,
        310,
        0,
        ext=_send_fields(
            e="7",
            g="1795383696492",
            i="UNIQ_KEY\x017F000001000000000000000000000001\x02WAIT\x01true\x02TAGS\x01TagRaw",
        ),
        ext_ordered=True,
        body_len=15,
    ),
    "14-send-bad-queueid-response.bin": Expect(
        370,
        1,
        0,
        ext={"TRACE_ON": "true", "MSG_REGION": "DefaultRegion"},
        ext_ordered=True,
        remark="request queueId[7] is illegal, TopicConfig [topicName=GoldenTopic, readQueueNums=4, "
        "writeQueueNums=4, perm=RW-, topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false] "
        "Producer: 127.0.0.1:60454",
    ),
    "15-unregister-client-request.bin": Expect(
        192,
        35,
        12,
        ext={"producerGroup": "golden_group", "clientID": "192.0.2.2@6769#5946031581710"},
        ext_ordered=True,
    ),
    "15-unregister-client-response.bin": Expect(119, 0, 12, ext={}),
    "16-send-batch-broker-b-request.bin": Expect(
        588,
        320,
        4,
        ext=_send_fields(b="GoldenBatch", g="1795384859220", i="WAIT\x01true", m="true", n="broker-b"),
        ext_ordered=True,
        body_len=300,
    ),
    "16-send-batch-broker-b-response.bin": Expect(
        305,
        0,
        4,
        ext=_send_answer(
            "0",
            "7F00000100002AA90000000000000000,7F00000100002AA900000000000000D5,7F00000100002AA900000000000001AA",
        ),
        ext_ordered=True,
    ),
    "17-get-max-offset-request.bin": Expect(
        173, 30, 6, ext={"queueId": "0", "bname": "broker-b", "topic": "GoldenBatch"}, ext_ordered=True
    ),
    "17-get-max-offset-response.bin": Expect(130, 0, 6, ext={"offset": "3"}, ext_ordered=True),
    "18-query-consumer-offset-request.bin": Expect(
        219,
        14,
        11,
        ext={
            "ReqT": "0",
            "queueId": "0",
            "bname": "broker-b",
            "topic": "GoldenBatch",
            "consumerGroup": "golden_consumer",
        },
    ),
    "18-query-consumer-offset-response.bin": Expect(131, 0, 11, ext={"offset": "0"}, ext_ordered=True),
    "19-acl-signed-send-request.bin": Expect(
        457,
        310,
        6,
        ext=_send_fields(
            b="GoldenBatch",
            e="1",
            g="1795384981945",
            i="KEYS\x01aclkey\x02UNIQ_KEY\x01C000020238275FFD2B2770E0D1B70000\x02WAIT\x01true\x02TAGS\x01TagA",
            n="broker-b",
            Signature="SPy6jO94mdb+ed/WAbe0bQMoII0=",
            AccessKey="goldenAK",
        ),
        ext_ordered=True,
        body_len=8,
    ),
    "19-acl-signed-send-response.bin": Expect(239, 0, 6, ext=_send_answer("1", "7F00000100002AA9000000000000027F")),
    "19b-acl-wrong-secret-send-request.bin": Expect(
        458,
        310,
        23,
        ext=_send_fields(
            b="GoldenBatch",
            e="1",
            g="1795384983064",
            i="KEYS\x01aclkey\x02UNIQ_KEY\x01C000020238275FFD2B2770E0D6180001\x02WAIT\x01true\x02TAGS\x01TagA",
            n="broker-b",
            Signature="k+pA9n7F6KVVako3f0hRyQS2flM=",
            AccessKey="goldenAK",
        ),
        ext_ordered=True,
        body_len=8,
    ),
    "19b-acl-wrong-secret-send-response.bin": Expect(
        302,
        1,
        23,
        remark="org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=goldenAK, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:684)",
    ),
}


def test_every_sample_file_has_an_expectation(wire_samples):
    on_disk = set(sample_names())
    assert on_disk == set(EXPECTED), "a sample file was added or removed: describe it in EXPECTED"


def test_sample_decodes_and_reencodes_byte_identically(sample_name, sample_bytes):
    raw = sample_bytes(sample_name)
    cmd = decode_frame(raw)
    assert cmd.encode() == raw


def test_sample_frame_layout(sample_name, sample_bytes):
    raw = sample_bytes(sample_name)
    length, word = struct.unpack_from(">II", raw, 0)
    assert length == len(raw) - 4
    cmd = decode_frame(raw)
    assert word >> 24 == int(cmd.serialize_type)
    assert 8 + (word & 0xFFFFFF) + len(cmd.body) == len(raw)


def test_sample_fields_match_readme(sample_name, sample_bytes):
    expect = EXPECTED[sample_name]
    raw = sample_bytes(sample_name)
    cmd = decode_frame(raw)
    is_response = sample_name.endswith("-response.bin")
    assert len(raw) == expect.size
    assert cmd.code == expect.code
    assert cmd.opaque == expect.opaque
    assert cmd.flag == (FLAG_RESPONSE if is_response else 0)
    assert cmd.is_response is is_response
    assert not cmd.is_oneway
    assert cmd.serialize_type == expect.ser
    assert cmd.language == "JAVA"
    assert cmd.version == expect.version
    assert cmd.remark == expect.remark
    assert len(cmd.body) == expect.body_len
    if expect.ext is None:
        assert cmd.ext_fields is None
    else:
        assert cmd.ext_fields == expect.ext
        if expect.ext_ordered:
            assert list(cmd.ext_fields) == list(expect.ext)
    for value in (cmd.ext_fields or {}).values():
        assert isinstance(value, str)


def test_request_and_response_share_the_opaque(wire_samples, sample_bytes):
    requests = sorted(p.name for p in wire_samples.glob("*-request.bin"))
    assert requests
    for name in requests:
        answer = name.replace("-request.bin", "-response.bin")
        assert decode_frame(sample_bytes(name)).opaque == decode_frame(sample_bytes(answer)).opaque, name


def test_json_headers_have_sorted_top_level_keys_and_no_nulls(sample_bytes):
    """fastjson writes top-level keys sorted by name and leaves null fields out (every frame with a JSON
    header; the binary ROCKETMQ ones have none)."""
    import json

    frames = {name: sample_bytes(name) for name in sample_names()}
    json_frames = {name: raw for name, raw in frames.items() if raw[4] == JSON}
    assert json_frames and len(json_frames) < len(frames)  # the capture holds both kinds
    for name, raw in json_frames.items():
        header_len = struct.unpack_from(">I", raw, 4)[0] & 0xFFFFFF
        header = json.loads(raw[8 : 8 + header_len])
        assert list(header) == sorted(header), name
        assert None not in header.values(), name
        assert header["serializeTypeCurrentRPC"] == "JSON", name


def test_all_samples_through_one_stream_decoder(wire_samples, sample_bytes):
    """The frames back to back on one connection come out of FrameDecoder whole and in order."""
    names = [n for n in sorted(p.name for p in wire_samples.glob("*.bin")) if not n.startswith("09-")]
    stream = b"".join(sample_bytes(n) for n in names)
    decoder = FrameDecoder()
    out = []
    for start in range(0, len(stream), 97):
        out.extend(decoder.feed(stream[start : start + 97]))
    assert decoder.buffered == 0
    assert [c.encode() for c in out] == [sample_bytes(n) for n in names]


def test_oversize_body_is_all_x(sample_bytes):
    cmd = decode_frame(sample_bytes("09-send-oversize-request.bin"))
    assert cmd.body == b"x" * 4194305


def test_register_broker_body_crc(sample_bytes):
    """bodyCrc32 is CRC32(body) masked to a non-negative int (UtilAll.crc32)."""
    import zlib

    from spark_rocketmq.protocol.stored import body_crc

    cmd = decode_frame(sample_bytes("06-register-broker-request.bin"))
    assert zlib.crc32(cmd.body) == 3741074607
    assert str(body_crc(cmd.body)) == cmd.require("bodyCrc32") == "1593590959"


def test_heartbeat_body_is_the_documented_json(sample_bytes):
    body = decode_frame(sample_bytes("08-heartbeat-request.bin")).body
    assert body == (
        b'{"clientID":"192.0.2.2@6769#5946031581710","consumerDataSet":[],'
        b'"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"},{"groupName":"golden_group"}]}'
    )
