"""Requests the Producer writes, compared byte for byte with frames a 4.9.8 Java producer wrote.

Only what differs by nature is aligned first: opaque, language (JAVA there, PYTHON here) and the
born timestamp (g), which the test sets through the producer's clock. The producer writes its sends in
the ROCKETMQ serialization and the Java client wrote these in JSON (its default): the same fields, in the
same order, are written again in JSON to compare them (tests/protocol/test_golden_encoders.py compares a
send with a Java frame of the ROCKETMQ serialization as it is).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from wire_samples import DIRECTORY, read_sample

from spark_rocketmq import Message, MessageQueue, Producer
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.codes import SerializeType
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.frame import decode_frame


def golden(name: str) -> tuple[bytes, RemotingCommand]:
    raw = read_sample(name)
    if raw is None:
        pytest.fail(f"golden frame {name} is missing from {DIRECTORY}", pytrace=False)
    return raw, decode_frame(raw)


@pytest.fixture
def cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    """Local brokers broker-a and broker-b, keeping the requests they read, with the samples' topics."""
    c = make_cluster(brokers=2, request_log=100)
    for topic in ("GoldenTopic", "GoldenBatch"):
        c.create_topic(topic, queues=4)
    return c


def captured(cluster: LocalCluster, code: int) -> RemotingCommand:
    [cmd] = [r for b in cluster.brokers.values() for r in b.received(code)]
    return cmd


def as_java(cmd: RemotingCommand, opaque: int) -> bytes:
    assert cmd.serialize_type == SerializeType.ROCKETMQ
    cmd.language = "JAVA"
    cmd.opaque = opaque
    cmd.serialize_type = SerializeType.JSON
    return cmd.encode()


def producer_for(cluster: LocalCluster, born: int, **options) -> Producer:
    p = Producer(namesrv_addr=cluster.namesrv_addr, group="golden_group", clock_ms=lambda: born, **options)
    return p


def test_send_message_v2_matches_sample_03(cluster) -> None:
    raw, cmd = golden("03-send-v2-request.bin")
    with producer_for(cluster, int(cmd.ext_fields["g"])) as p:
        p.send(
            Message(
                "GoldenTopic",
                b"hello golden",
                tags="TagA",
                keys=["K1", "K2"],
                properties={"color": "blue"},
                uniq_key="C00002023C465FFD2B277039303F0000",
            ),
            queue=MessageQueue("GoldenTopic", "broker-a", 1),
        )
    assert as_java(captured(cluster, 310), cmd.opaque) == raw


def test_compressed_send_matches_sample_05(cluster) -> None:
    raw, cmd = golden("05-compressed-request.bin")
    with producer_for(cluster, int(cmd.ext_fields["g"])) as p:
        p.send(
            Message(
                "GoldenTopic",
                bytes(i % 251 for i in range(10_000)),
                tags="TagZ",
                uniq_key="C00002023C465FFD2B27703932BA0004",
            ),
            queue=MessageQueue("GoldenTopic", "broker-a", 3),
        )
    assert as_java(captured(cluster, 310), cmd.opaque) == raw


def test_batch_matches_sample_16(cluster) -> None:
    raw, cmd = golden("16-send-batch-broker-b-request.bin")
    ids = ["C000020235765FFD2B2770DEF0FE0000", "C000020235765FFD2B2770DEF0FF0001", "C000020235765FFD2B2770DEF0FF0002"]
    with producer_for(cluster, int(cmd.ext_fields["g"])) as p:
        msgs = [
            Message("GoldenBatch", f"batch-{i}".encode(), tags="TagB", keys=f"key{i}", uniq_key=ids[i])
            for i in range(3)
        ]
        [r] = p.send_batch(msgs, queue=MessageQueue("GoldenBatch", "broker-b", 0))
    assert r.msg_id == ",".join(ids)
    assert as_java(captured(cluster, 320), cmd.opaque) == raw


def test_acl_signed_send_matches_sample_19(cluster) -> None:
    raw, cmd = golden("19-acl-signed-send-request.bin")
    born = int(cmd.ext_fields["g"])
    with producer_for(cluster, born, access_key="goldenAK", secret_key="goldenSecret123") as p:
        p.send(
            Message(
                "GoldenBatch", b"acl-body", tags="TagA", keys="aclkey", uniq_key="C000020238275FFD2B2770E0D1B70000"
            ),
            queue=MessageQueue("GoldenBatch", "broker-b", 1),
        )
    assert as_java(captured(cluster, 310), cmd.opaque) == raw
