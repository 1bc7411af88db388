"""A broker's ACL refusal of a read request, as both ACL versions word it, becomes the error that names the
account, the topic, the group and the permission to give (the real brokers' words: tests/real/test_security.py)."""

from __future__ import annotations

import pytest

from spark_rocketmq.client.pull_refusals import pull_refused, refused
from spark_rocketmq.errors import ClusterConfigError
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.route import MessageQueue

TOPIC = "orders"
MQ = MessageQueue(TOPIC, "broker-c", 0)
#: 4.9.8 (ACL 1.0) answers SYSTEM_ERROR with the AclException's text, 5.3.3 (ACL 2.0) NO_PERMISSION.
ACL_1 = (
    ResponseCode.SYSTEM_ERROR,
    f"org.apache.rocketmq.acl.common.AclException: No default permission for topic:{TOPIC}, "
    "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:606)",
)
ACL_2 = (
    ResponseCode.NO_PERMISSION,
    f"User:limited has no permission to access Topic:{TOPIC} from 127.0.0.1, the decision is deny.",
)


@pytest.mark.parametrize(("code", "remark"), [ACL_1, ACL_2], ids=["acl-1.0", "acl-2.0"])
def test_an_acl_refused_pull_names_the_account_topic_group_and_permission(code: int, remark: str) -> None:
    resp = RemotingCommand(code, remark=remark)
    error = pull_refused(resp, "127.0.0.1:10911", MQ, 7, "*", "TAG", "readers", "limited")
    assert isinstance(error, ClusterConfigError)
    text = str(error)
    assert f"refused PULL_MESSAGE of {TOPIC}/broker-c/0 at offset 7 for ACL" in text
    assert f"the account 'limited' may not read topic {TOPIC} as group readers: give it SUB" in text
    assert f"-s User:limited -r Topic:{TOPIC} -a Sub -d Allow, and -r Group:readers" in text


def test_an_acl_refused_offset_request_of_an_unsigned_reader_names_its_own_group() -> None:
    resp = RemotingCommand(ACL_2[0], remark=ACL_2[1])
    error = refused(resp, "127.0.0.1:10911", "GET_MIN_OFFSET", MQ, None, "spark_rocketmq_reader")
    text = str(error)
    assert isinstance(error, ClusterConfigError) and "refused GET_MIN_OFFSET for ACL" in text
    assert "the account may not read topic orders as group spark_rocketmq_reader" in text
    assert "-s User:NAME" in text and "-r Group:spark_rocketmq_reader" in text
