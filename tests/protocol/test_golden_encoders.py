"""Our encoders, fed semantic values (topic, tags, keys, ids...), write exactly the captured 4.9.8 bytes.

Only the opaque, timestamps and ids are taken from the samples; everything else is built the way the
producer (or our local NameServer/broker) builds it, never copied from the decoded frame.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import zlib

import pytest

from spark_rocketmq.protocol.acl import acl_signature, sign_fields
from spark_rocketmq.protocol.codes import RequestCode, ResponseCode, SerializeType, SysFlag
from spark_rocketmq.protocol.command import FLAG_RESPONSE, RemotingCommand
from spark_rocketmq.protocol.frame import decode_frame
from spark_rocketmq.protocol.headers import (
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    heartbeat_body,
    heartbeat_request,
    route_request,
    unregister_client_request,
)
from spark_rocketmq.protocol.javamap import hashmap_order
from spark_rocketmq.protocol.message import (
    Message,
    compress_body,
    encode_batch_body,
    encode_batch_record,
    encode_properties,
    message_properties,
)
from spark_rocketmq.protocol.requests import message_request, send_command
from spark_rocketmq.protocol.route import BrokerData, QueueData, TopicRouteData
from spark_rocketmq.protocol.stored import offset_msg_id
from spark_rocketmq.protocol.transaction import query_uniq_key_request

GROUP = "golden_group"
CLIENT_ID = "192.0.2.2@6769#5946031581710"
BROKER_A = ("127.0.0.1", 10911)
BROKER_B = ("127.0.0.1", 10921)
TOPIC_NOT_EXIST_REMARK = (
    "No topic route info in name server for the topic: {topic}\n"
    "See http://rocketmq.apache.org/docs/faq/ for further details."
)


def java(cmd: RemotingCommand) -> RemotingCommand:
    """The samples were written by the Java client: same frame, language JAVA."""
    return dataclasses.replace(cmd, language="JAVA")


def props_of(msg: Message, uniq_key: str | None) -> str:
    return encode_properties(message_properties(msg, uniq_key))


def send_request(
    msg: Message,
    *,
    uniq_key: str | None,
    queue_id: int,
    born_timestamp: int,
    opaque: int,
    broker_name: str,
    sys_flag: int = 0,
    body: bytes | None = None,
    code: int = RequestCode.SEND_MESSAGE_V2,
    serialize_type: SerializeType = SerializeType.JSON,
) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group=GROUP,
        topic=msg.topic,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        flag=msg.flag,
        properties=props_of(msg, uniq_key),
        broker_name=broker_name,
        batch=code == RequestCode.SEND_BATCH_MESSAGE,
    )
    return RemotingCommand(
        code=code,
        opaque=opaque,
        language="JAVA",
        ext_fields=header.to_v2_fields(),
        body=msg.body if body is None else body,
        serialize_type=serialize_type,
    )


def send_answer(request: RemotingCommand, msg_ids: list[str], queue_id: int, queue_offset: int) -> RemotingCommand:
    """A broker's SUCCESS: SendMessageResponseHeader plus TRACE_ON / MSG_REGION, in HashMap order."""
    fields = SendMessageResponseHeader(",".join(msg_ids), queue_id, queue_offset).to_fields()
    fields.update({"TRACE_ON": "true", "MSG_REGION": "DefaultRegion"})
    if request.serialize_type == SerializeType.JSON:
        fields = {k: fields[k] for k in hashmap_order(fields)}
    return request.response(ResponseCode.SUCCESS, ext_fields=fields)


# -- route lookups -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sample", "topic", "opaque"),
    [
        ("01-route-request.bin", "GoldenTopic", 2),
        ("02-route-notfound-request.bin", "NoSuchTopic_golden", 14),
        ("07-route-tbw102-request.bin", "TBW102", 4),
        ("07b-route-topic-not-exist-request.bin", "GoldenTopic", 2),
    ],
)
def test_route_request(sample_bytes, sample, topic, opaque):
    assert java(route_request(topic, opaque=opaque)).encode() == sample_bytes(sample)


def test_route_request_version0(sample_bytes):
    cmd = dataclasses.replace(java(route_request("TBW102", opaque=4242)), version=0)
    assert cmd.encode() == sample_bytes("11-route-version0-request.bin")


def test_route_request_binary_header(sample_bytes):
    cmd = dataclasses.replace(java(route_request("GoldenTopic", opaque=0)), serialize_type=SerializeType.ROCKETMQ)
    assert cmd.encode() == sample_bytes("13-rocketmq-route-request.bin")


def test_route_request_accept_standard_json_only_is_an_ext_field():
    cmd = route_request("T", accept_standard_json_only=True)
    assert cmd.ext_fields == {"topic": "T", "acceptStandardJsonOnly": "true"}


def _route(*brokers: tuple[str, tuple[str, int], int, int]) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData(name, nums, nums, perm, 0) for name, _addr, perm, nums in brokers],
        broker_datas=[BrokerData("DefaultCluster", name, {0: f"{a[0]}:{a[1]}"}) for name, a, _p, _n in brokers],
    )


ROUTE_GOLDEN_ONE_BROKER = _route(("broker-a", BROKER_A, 6, 4))
ROUTE_TBW102 = _route(("broker-b", BROKER_B, 7, 8), ("broker-a", BROKER_A, 7, 8))
ROUTE_GOLDEN_TWO_BROKERS = _route(("broker-b", BROKER_B, 6, 4), ("broker-a", BROKER_A, 6, 4))


@pytest.mark.parametrize(
    ("request_sample", "response_sample", "route", "standard"),
    [
        ("01-route-request.bin", "01-route-response.bin", ROUTE_GOLDEN_ONE_BROKER, True),
        ("07-route-tbw102-request.bin", "07-route-tbw102-response.bin", ROUTE_TBW102, True),
        ("11-route-version0-request.bin", "11-route-version0-response.bin", ROUTE_TBW102, False),
        ("13-rocketmq-route-request.bin", "13-rocketmq-route-response.bin", ROUTE_GOLDEN_TWO_BROKERS, True),
    ],
)
def test_route_response(sample_bytes, request_sample, response_sample, route, standard):
    """A NameServer's answer: the body dialect follows the request version (>= 401 standard JSON)."""
    request = decode_frame(sample_bytes(request_sample))
    assert (request.version >= 401) is standard
    body = route.to_json(standard=standard)
    assert body == decode_frame(sample_bytes(response_sample)).body
    assert request.response(ResponseCode.SUCCESS, body=body).encode() == sample_bytes(response_sample)


def test_legacy_route_dialect_has_bare_integer_keys():
    text = ROUTE_TBW102.to_json(standard=False).decode()
    assert '{0:"127.0.0.1:10921"}' in text
    assert '"0"' not in text


@pytest.mark.parametrize(
    ("request_sample", "response_sample", "topic"),
    [
        ("02-route-notfound-request.bin", "02-route-notfound-response.bin", "NoSuchTopic_golden"),
        ("07b-route-topic-not-exist-request.bin", "07b-route-topic-not-exist-response.bin", "GoldenTopic"),
    ],
)
def test_topic_not_exist_answer(sample_bytes, request_sample, response_sample, topic):
    request = decode_frame(sample_bytes(request_sample))
    answer = request.response(ResponseCode.TOPIC_NOT_EXIST, remark=TOPIC_NOT_EXIST_REMARK.format(topic=topic))
    assert answer.encode() == sample_bytes(response_sample)


# -- single sends ------------------------------------------------------------------------------
MSG_03 = Message("GoldenTopic", b"hello golden", tags="TagA", keys=["K1", "K2"], properties={"color": "blue"})


def test_send_v2_request(sample_bytes):
    cmd = send_request(
        MSG_03,
        uniq_key="C00002023C465FFD2B277039303F0000",
        queue_id=1,
        born_timestamp=1795373996095,
        opaque=4,
        broker_name="broker-a",
    )
    assert cmd.encode() == sample_bytes("03-send-v2-request.bin")


def test_send_v2_keys_as_one_string_is_the_same(sample_bytes):
    msg = dataclasses.replace(MSG_03, keys="K1 K2")
    cmd = send_request(
        msg,
        uniq_key="C00002023C465FFD2B277039303F0000",
        queue_id=1,
        born_timestamp=1795373996095,
        opaque=4,
        broker_name="broker-a",
    )
    assert cmd.encode() == sample_bytes("03-send-v2-request.bin")


def test_send_v2_response(sample_bytes):
    request = decode_frame(sample_bytes("03-send-v2-request.bin"))
    msg_id = offset_msg_id(*BROKER_A, 0x209588DA4)
    assert msg_id == "7F00000100002A9F0000000209588DA4"
    assert send_answer(request, [msg_id], 1, 0).encode() == sample_bytes("03-send-v2-response.bin")


COMPRESSIBLE_BODY = bytes(i % 251 for i in range(10000))


def test_compressed_body_is_the_java_zlib_stream(sample_bytes):
    captured = decode_frame(sample_bytes("05-compressed-request.bin")).body
    ours = compress_body(COMPRESSIBLE_BODY)
    assert len(ours) == 364
    assert ours[:2] == b"\x78\x5e"
    assert ours == captured
    assert zlib.crc32(zlib.decompress(captured)) == 2780508273


def test_compressed_send_request(sample_bytes):
    msg = Message("GoldenTopic", COMPRESSIBLE_BODY, tags="TagZ")
    sys_flag = SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB
    assert sys_flag == 0x301
    cmd = send_request(
        msg,
        uniq_key="C00002023C465FFD2B27703932BA0004",
        queue_id=3,
        born_timestamp=1795373996731,
        opaque=12,
        broker_name="broker-a",
        sys_flag=sys_flag,
        body=compress_body(msg.body),
    )
    assert cmd.encode() == sample_bytes("05-compressed-request.bin")


def test_compressed_send_response(sample_bytes):
    request = decode_frame(sample_bytes("05-compressed-request.bin"))
    answer = send_answer(request, [offset_msg_id(*BROKER_A, 8746733795)], 3, 0)
    assert answer.encode() == sample_bytes("05-compressed-response.bin")


@pytest.mark.parametrize(
    ("sample", "topic", "queue_id", "born"),
    [
        ("10-send-readonly-topic-request.bin", "GoldenRO", 0, 1795383694003),
        ("14-send-bad-queueid-request.bin", "GoldenTopic", 7, 1795383696492),
    ],
)
def test_hand_built_send_requests(sample_bytes, sample, topic, queue_id, born):
    msg = Message(topic, b"raw golden body", tags="TagRaw")
    cmd = send_request(
        msg,
        uniq_key="7F000001000000000000000000000001",
        queue_id=queue_id,
        born_timestamp=born,
        opaque=0,
        broker_name="broker-a",
    )
    assert cmd.encode() == sample_bytes(sample)


def test_readonly_topic_send_response(sample_bytes):
    request = decode_frame(sample_bytes("10-send-readonly-topic-request.bin"))
    answer = send_answer(request, [offset_msg_id(*BROKER_A, 0x48B)], 0, 1)
    assert answer.encode() == sample_bytes("10-send-readonly-topic-response.bin")


def test_oversize_send_request_and_message_illegal_answer(sample_bytes):
    msg = Message("GoldenTopic", b"x" * 4194305, tags="TagBig")
    cmd = send_request(
        msg,
        uniq_key="C00002021D735FFD2B2770CC9A360000",
        queue_id=0,
        born_timestamp=1795383657015,
        opaque=4,
        broker_name="broker-a",
    )
    assert cmd.encode() == sample_bytes("09-send-oversize-request.bin")
    answer = cmd.response(
        ResponseCode.MESSAGE_ILLEGAL,
        remark="the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 4194304B, msg properties length limit 32KB.",
        ext_fields={"TRACE_ON": "true", "MSG_REGION": "DefaultRegion"},
    )
    assert answer.encode() == sample_bytes("09-send-oversize-response.bin")


def test_bad_queue_id_system_error_answer(sample_bytes):
    request = decode_frame(sample_bytes("14-send-bad-queueid-request.bin"))
    remark = (
        "request queueId[7] is illegal, TopicConfig [topicName=GoldenTopic, readQueueNums=4, writeQueueNums=4, "
        "perm=RW-, topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false] Producer: 127.0.0.1:60454"
    )
    answer = request.response(
        ResponseCode.SYSTEM_ERROR, remark=remark, ext_fields={"TRACE_ON": "true", "MSG_REGION": "DefaultRegion"}
    )
    assert answer.encode() == sample_bytes("14-send-bad-queueid-response.bin")


def test_binary_header_send_request_and_answer(sample_bytes):
    msg = Message("GoldenTopic", b"hello binary header", tags="TagBin", keys="KeyBin")
    cmd = send_request(
        msg,
        uniq_key="C00002021C2E5FFD2B2770CBD8310000",
        queue_id=3,
        born_timestamp=1795383607345,
        opaque=6,
        broker_name="broker-b",
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert cmd.encode() == sample_bytes("13-rocketmq-send-request.bin")
    answer = send_answer(cmd, [offset_msg_id(*BROKER_B, 0xC6)], 3, 0)
    assert answer.encode() == sample_bytes("13-rocketmq-send-response.bin")


def test_the_producers_send_command_is_the_java_clients_binary_header_frame(sample_bytes):
    """What the producer writes for a send (requests.send_command, from its extFields template) is the
    frame the Java client writes with the ROCKETMQ serialization, but for the language byte."""
    msg = Message("GoldenTopic", b"hello binary header", tags="TagBin", keys="KeyBin")
    req = message_request(msg, "C00002021C2E5FFD2B2770CBD8310000", max_message_size=1 << 22, compress_over=4096)
    cmd = send_command(
        req,
        group=GROUP,
        queue_id=3,
        broker_name="broker-b",
        born_timestamp=1795383607345,
        default_topic="TBW102",
        default_topic_queue_nums=4,
    )
    cmd.opaque = 6
    assert java(cmd).encode() == sample_bytes("13-rocketmq-send-request.bin")


# -- batches -----------------------------------------------------------------------------------
def batch_request(
    topic: str,
    inner: list[tuple[Message, str]],
    *,
    queue_id: int,
    born_timestamp: int,
    opaque: int,
    broker_name: str,
) -> RemotingCommand:
    """The batch wrapper carries only its own WAIT; each record carries its message's properties."""
    body = encode_batch_body((m.flag, m.body, props_of(m, uniq).encode()) for m, uniq in inner)
    wrapper = Message(topic, body)
    return send_request(
        wrapper,
        uniq_key=None,
        queue_id=queue_id,
        born_timestamp=born_timestamp,
        opaque=opaque,
        broker_name=broker_name,
        code=RequestCode.SEND_BATCH_MESSAGE,
    )


BATCH_04 = [
    (Message("GoldenTopic", f"b{i}".encode(), tags="TagB", keys=f"BK{i}"), f"C00002023C465FFD2B2770393188000{i + 1}")
    for i in range(3)
]
#: The first id's time field is 1 ms earlier than the others' (ids are made as the messages are).
BATCH_16_IDS = [
    "C000020235765FFD2B2770DEF0FE0000",
    "C000020235765FFD2B2770DEF0FF0001",
    "C000020235765FFD2B2770DEF0FF0002",
]
BATCH_16 = [
    (Message("GoldenBatch", f"batch-{i}".encode(), tags="TagB", keys=[f"key{i}"]), uniq)
    for i, uniq in enumerate(BATCH_16_IDS)
]


def test_batch_request(sample_bytes):
    cmd = batch_request(
        "GoldenTopic", BATCH_04, queue_id=2, born_timestamp=1795373996424, opaque=10, broker_name="broker-a"
    )
    captured = decode_frame(sample_bytes("04-batch-request.bin"))
    assert cmd.body == captured.body
    assert len(cmd.body) == 282
    assert cmd.encode() == sample_bytes("04-batch-request.bin")


def test_batch_request_to_broker_b(sample_bytes):
    cmd = batch_request(
        "GoldenBatch", BATCH_16, queue_id=0, born_timestamp=1795384859220, opaque=4, broker_name="broker-b"
    )
    assert cmd.body == decode_frame(sample_bytes("16-send-batch-broker-b-request.bin")).body
    assert cmd.encode() == sample_bytes("16-send-batch-broker-b-request.bin")


def test_batch_records_one_by_one(sample_bytes):
    """encode_batch_record lays out one record as encode_batch_body does: 100 bytes each in 16."""
    body = decode_frame(sample_bytes("16-send-batch-broker-b-request.bin")).body
    records = [encode_batch_record(m.flag, m.body, props_of(m, u).encode()) for m, u in BATCH_16]
    assert [len(r) for r in records] == [100, 100, 100]
    assert b"".join(records) == body


@pytest.mark.parametrize(
    ("request_sample", "response_sample", "broker", "offsets", "queue_id"),
    [
        ("04-batch-request.bin", "04-batch-response.bin", BROKER_A, [8746733174, 8746733381, 8746733588], 2),
        ("16-send-batch-broker-b-request.bin", "16-send-batch-broker-b-response.bin", BROKER_B, [0, 213, 426], 0),
    ],
)
def test_batch_response(sample_bytes, request_sample, response_sample, broker, offsets, queue_id):
    request = decode_frame(sample_bytes(request_sample))
    ids = [offset_msg_id(*broker, off) for off in offsets]
    assert send_answer(request, ids, queue_id, 0).encode() == sample_bytes(response_sample)


# -- client lifecycle --------------------------------------------------------------------------
def test_heartbeat_request(sample_bytes):
    cmd = java(heartbeat_request(CLIENT_ID, [GROUP], opaque=8))
    assert cmd.encode() == sample_bytes("08-heartbeat-request.bin")


def test_heartbeat_body_lists_each_group_once():
    body = heartbeat_body(CLIENT_ID, [GROUP, "CLIENT_INNER_PRODUCER", GROUP])
    assert body.count(b'"golden_group"') == 1
    assert body.count(b'"CLIENT_INNER_PRODUCER"') == 1


def test_unregister_client_request(sample_bytes):
    cmd = java(unregister_client_request(CLIENT_ID, GROUP, opaque=12))
    assert cmd.encode() == sample_bytes("15-unregister-client-request.bin")


@pytest.mark.parametrize(
    ("request_sample", "response_sample", "ext_fields"),
    [
        ("08-heartbeat-request.bin", "08-heartbeat-response.bin", None),
        ("15-unregister-client-request.bin", "15-unregister-client-response.bin", {}),
        ("06-register-broker-request.bin", "06-register-broker-response.bin", {}),
    ],
)
def test_plain_success_answers(sample_bytes, request_sample, response_sample, ext_fields):
    """No custom header -> no extFields key; an all-null custom header -> "extFields":{}."""
    request = decode_frame(sample_bytes(request_sample))
    answer = request.response(ResponseCode.SUCCESS, ext_fields=ext_fields)
    assert answer.encode() == sample_bytes(response_sample)
    assert answer.flag == FLAG_RESPONSE


# -- ACL 1.0 -----------------------------------------------------------------------------------
ACCESS_KEY = "goldenAK"
SECRET_KEY = "goldenSecret123"
MSG_19 = Message("GoldenBatch", b"acl-body", tags="TagA", keys="aclkey")


def test_acl_signed_send_request(sample_bytes):
    plain = send_request(
        MSG_19,
        uniq_key="C000020238275FFD2B2770E0D1B70000",
        queue_id=1,
        born_timestamp=1795384981945,
        opaque=6,
        broker_name="broker-b",
    )
    fields = sign_fields(plain.ext_fields, plain.body, ACCESS_KEY, SECRET_KEY)
    assert fields["Signature"] == "SPy6jO94mdb+ed/WAbe0bQMoII0="
    assert list(fields)[-2:] == ["Signature", "AccessKey"]
    signed = dataclasses.replace(plain, ext_fields=fields)
    assert signed.encode() == sample_bytes("19-acl-signed-send-request.bin")


def test_acl_signature_verifies_the_captured_request(sample_bytes):
    cmd = decode_frame(sample_bytes("19-acl-signed-send-request.bin"))
    assert acl_signature(SECRET_KEY, cmd.ext_fields, cmd.body) == cmd.field("Signature")


def test_acl_signature_of_the_wrong_secret_request_does_not_verify(sample_bytes):
    cmd = decode_frame(sample_bytes("19b-acl-wrong-secret-send-request.bin"))
    assert cmd.field("AccessKey") == ACCESS_KEY
    assert acl_signature(SECRET_KEY, cmd.ext_fields, cmd.body) != cmd.field("Signature")


def test_acl_signature_covers_the_body(sample_bytes):
    cmd = decode_frame(sample_bytes("19-acl-signed-send-request.bin"))
    assert acl_signature(SECRET_KEY, cmd.ext_fields, cmd.body + b"!") != cmd.field("Signature")


def test_acl_security_token_is_signed():
    with_token = sign_fields({"topic": "T"}, None, ACCESS_KEY, SECRET_KEY, security_token="tok")
    without = sign_fields({"topic": "T"}, None, ACCESS_KEY, SECRET_KEY)
    assert with_token["SecurityToken"] == "tok"
    assert with_token["Signature"] != without["Signature"]
    assert acl_signature(SECRET_KEY, with_token, None) == with_token["Signature"]


def test_a_signed_unique_key_query_verifies_on_4_and_5_brokers():
    """A 4.9.8 broker verifies a signature over every extField but Signature and _UNIQUE_KEY_QUERY
    (PlainAccessValidator.parse); a 5.x broker leaves _UNIQUE_KEY_QUERY out only for request versions up to
    4.9.3 (DefaultAuthenticationContextBuilder). The query carries no such flag (maxNum says what it would),
    so one signature verifies on both, as each computes it."""
    cmd = query_uniq_key_request("GoldenTx", "C000020238275FFD2B2770E0D1B70000", 0, 1795384981945)
    fields = sign_fields(cmd.fields(), None, ACCESS_KEY, SECRET_KEY)
    assert "_UNIQUE_KEY_QUERY" not in fields
    assert fields["maxNum"] == "32"  # the brokers' defaultQueryMaxNum, what the flag would have set
    as_4_9_8 = b"".join(fields[k].encode() for k in sorted(fields) if k not in ("Signature", "_UNIQUE_KEY_QUERY"))
    as_5_3_3 = b"".join(fields[k].encode() for k in sorted(fields) if k != "Signature")
    for content in (as_4_9_8, as_5_3_3):
        expected = base64.b64encode(hmac.new(SECRET_KEY.encode(), content, hashlib.sha1).digest()).decode()
        assert fields["Signature"] == expected
