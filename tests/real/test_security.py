"""TLS and ACL (1.0 on 4.x, 2.0 on 5.x) against a real RocketMQ.

TLS: the kits' brokers take TLS in permissive mode (plain or TLS by the first bytes); a private cluster
started with -Dtls.server.mode=enforcing refuses plain connections, so a send there proves the client
spoke TLS. ACL: the 4.9.8 kit's broker-c checks ACL 1.0 signatures (accounts in its conf/plain_acl.yml), the 5.3.3
kit's ACL 2.0 ones (the same accounts, made users and ACLs by `rmq start acl`).
"""

from __future__ import annotations

import re
import time

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import Message, Producer, RocketMQSink, SendStatus
from spark_rocketmq.errors import ClusterConfigError

from .conftest import fresh_topic_name
from .kit import Kit
from .readback import assert_each_body_once

ADMIN = {"access_key": "RocketMQ", "secret_key": "12345678"}
LIMITED = {"access_key": "limited", "secret_key": "limited-secret"}
#: A broker's JVM option: TLS required, plain connections refused.
ENFORCING_TLS = "-Dtls.server.mode=enforcing"


def test_tls_producer_and_sink(spark, kit: Kit, real_addr: str, real_topic: str) -> None:
    bodies = [f"tls-{i}".encode() for i in range(100)]
    with Producer(namesrv_addr=real_addr, group="spark_rocketmq_real_tls", use_tls=True) as p:
        assert p.send(Message(real_topic, bodies[0])).status is SendStatus.SEND_OK
        assert sum(r.count for r in p.send_batch([Message(real_topic, b) for b in bodies[1:]])) == 99
    sink = RocketMQSink(namesrv_addr=real_addr, topic=real_topic, use_tls=True)
    report = sink(spark.range(0, 1000, numPartitions=2).select(F.concat(F.lit("tls-row-"), "id").alias("body")), 0)
    assert (report.messages, report.failed_rows) == (1000, 0)
    expected = [*bodies, *(f"tls-row-{i}" for i in range(1000))]
    assert_each_body_once(kit.dump(real_topic, at_least=len(expected)), expected)


def test_tls_against_a_broker_that_requires_it(private_kit) -> None:
    enforcing = private_kit(brokers=("a",), opts=ENFORCING_TLS)
    topic = fresh_topic_name("tls_enforcing")
    with Producer(namesrv_addr=enforcing.namesrv_addr, group="spark_rocketmq_real_tls", use_tls=True) as p:
        results = [p.send(Message(topic, f"enforced-{i}".encode())) for i in range(20)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 20


def stored_count(acl: Kit, topic: str) -> int:
    """Messages stored in `topic`, from mqadmin topicStatus (signed as the ACL admin; a plain consumer may not pull)."""
    out = acl.admin("topicStatus", "-n", acl.namesrv_addr, "-t", topic)
    # rows: "#Broker Name  #QID  #Min Offset  #Max Offset  #Last Updated"
    return sum(int(m[2]) - int(m[1]) for m in re.finditer(r"broker-c\s+\d+\s+(\d+)\s+(\d+)", out))


def test_acl_signed_sends_are_stored_and_a_denied_account_is_told(spark, kit: Kit, private_kit) -> None:
    if not kit.has_acl_broker:
        pytest.skip(f"the RocketMQ {kit.version} kit has no ACL broker")
    acl = private_kit(brokers=("acl",))
    topic = fresh_topic_name("acl")
    acl.admin("updateTopic", "-b", acl.broker_addr("acl"), "-t", topic, "-r", "4", "-w", "4")
    with Producer(namesrv_addr=acl.namesrv_addr, group="spark_rocketmq_real_acl", **ADMIN) as p:
        assert sum(r.count for r in p.send_batch([Message(topic, f"acl-{i}".encode()) for i in range(50)])) == 50
        assert p.send(Message(topic, b"acl-one")).status is SendStatus.SEND_OK
    sink = RocketMQSink(namesrv_addr=acl.namesrv_addr, topic=topic, **ADMIN)
    report = sink(spark.range(0, 500, numPartitions=2).select(F.concat(F.lit("acl-row-"), "id").alias("body")), 0)
    assert (report.messages, report.failed_rows) == (500, 0)
    assert stored_count(acl, topic) == 551

    # 4.9.8 (ACL 1.0) answers a refusal with SYSTEM_ERROR and the AclException's text, 5.x (ACL 2.0) with
    # NO_PERMISSION and the AuthorizationException's: the error carries it, and the fix names the account
    said = (
        f"No default permission for topic:{topic}"
        if kit.major < 5
        else f"User:limited has no permission to access Topic:{topic} from 127.0.0.1, the decision is deny"
    )
    fix = (
        "give it PUB in topicPerms" if kit.major < 5 else f"createAcl -b BROKER -s User:limited -r Topic:{topic} -a Pub"
    )
    with (
        Producer(namesrv_addr=acl.namesrv_addr, group="spark_rocketmq_real_acl", **LIMITED) as p,
        pytest.raises(ClusterConfigError) as refused,
    ):
        p.send(Message(topic, b"not allowed"))
    assert said in str(refused.value) and fix in str(refused.value)
    assert stored_count(acl, topic) == 551


def test_acl_signed_reads_and_a_denied_account_is_told_what_to_give(spark, kit: Kit, private_kit) -> None:
    """spark.read signs its requests: the admin account reads what was sent; an account that may not read the
    topic fails the read in seconds with an error naming the permission to give it (SUB)."""
    if not kit.has_acl_broker:
        pytest.skip(f"the RocketMQ {kit.version} kit has no ACL broker")
    acl = private_kit(brokers=("acl",))
    topic = fresh_topic_name("acl_read")
    acl.admin("updateTopic", "-b", acl.broker_addr("acl"), "-t", topic, "-r", "2", "-w", "2")
    bodies = [f"acl-read-{i}".encode() for i in range(20)]
    with Producer(namesrv_addr=acl.namesrv_addr, group="spark_rocketmq_real_acl", **ADMIN) as p:
        p.send_batch([Message(topic, body) for body in bodies])

    def read(account: dict[str, str]) -> list[bytes]:
        reader = spark.read.format("rocketmq").option("namesrvAddr", acl.namesrv_addr).option("topic", topic)
        reader = reader.option("accessKey", account["access_key"]).option("secretKey", account["secret_key"])
        return sorted(bytes(r.body) for r in reader.load().collect())

    assert read(ADMIN) == sorted(bodies)
    started = time.monotonic()
    # 4.9.8 refuses the task's PULL_MESSAGE, 5.3.3 the driver's GET_MIN_OFFSET: the read fails either way
    with pytest.raises(Exception, match=f"the account 'limited' may not read topic {topic} as group") as refused:
        read(LIMITED)
    assert time.monotonic() - started < 60, "the refused read took longer than its requests' timeouts"
    assert "give it SUB on the topic and on the group" in str(refused.value)
