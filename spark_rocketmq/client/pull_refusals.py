"""A broker's refusal of a read request, as the error that names its fix: a subscription it cannot parse, an
SQL92 expression on a broker without enablePropertyFilter, a group it does not have or may not serve, ACL.

The read side's counterpart of client/diagnosis.py (whose ACL diagnosis it reuses, naming the read's own
permission: SUB on the topic and the group)."""

from __future__ import annotations

from ..errors import BrokerError, ClusterConfigError, InvalidSubscriptionError, TopicNotFoundError
from ..protocol.codes import ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.route import MessageQueue
from .diagnosis import explain_refusal

#: What 4.9.8 and 5.x answer (SYSTEM_ERROR) a SQL92 pull when enablePropertyFilter is false.
_NO_PROPERTY_FILTER = "does not support consumer to filter message by"
#: What a 5.x broker with rejectPullConsumerEnable=true answers a pull of an unregistered group.
_PULL_CONSUMER_REJECTED = "pull consumer is rejected by server"


def describe(mq: MessageQueue) -> str:
    return f"{mq.topic}/{mq.broker_name}/{mq.queue_id}"


def pull_refused(
    resp: RemotingCommand,
    addr: str,
    mq: MessageQueue,
    offset: int,
    expression: str,
    kind: str,
    group: str,
    account: str | None = None,
) -> Exception:
    """The error for a refused PULL_MESSAGE of ``group`` (without namespace), by ``account`` (its access key)."""
    where = f"broker {mq.broker_name} at {addr}"
    remark = resp.remark or ""
    request = f"PULL_MESSAGE of {describe(mq)} at offset {offset}"
    if resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
        return InvalidSubscriptionError(
            f"{where} could not parse the {kind} expression {expression!r} of {request} ({remark}): correct it"
        )
    if _NO_PROPERTY_FILTER in remark:
        return ClusterConfigError(
            f"{where} refused the {kind} expression of {request} ({remark}): it runs with "
            "enablePropertyFilter=false (the default). Set enablePropertyFilter=true in the broker.conf of every "
            "broker of the topic and restart them, or filter by TAG"
        )
    if resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST and _PULL_CONSUMER_REJECTED in remark:
        return ClusterConfigError(
            f"{where} refused {request} of group {group} ({remark}): it runs with "
            "rejectPullConsumerEnable=true, which refuses pulls of groups without a registered consumer. Set "
            "rejectPullConsumerEnable=false on the brokers of the topic"
        )
    return refused(resp, addr, request, mq, group, group, account)


def refused(
    resp: RemotingCommand,
    addr: str,
    request: str,
    mq: MessageQueue,
    group: str | None,
    default_group: str,
    account: str | None = None,
) -> Exception:
    """The error for a broker's refusal of a request about ``mq`` (of ``group``, else the consumer's
    ``default_group``), made by ``account`` (the access key the request was signed with, if any)."""
    where = f"broker {mq.broker_name} at {addr}"
    error = BrokerError(resp.code, resp.remark, addr, request=request)
    remark = resp.remark or ""
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return TopicNotFoundError(mq.topic, f"{where} answered TOPIC_NOT_EXIST to {request}: {remark}")
    if resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and group is not None:
        return ClusterConfigError(
            f"{where} refused {request} ({remark}): it has no subscription group {group!r} (a broker with "
            f"autoCreateSubscriptionGroup=false, or a 5.x broker asked to update the offset of a group it never "
            f"saw). Create it (mqadmin updateSubGroup -c CLUSTER -g {group}) or use a group the brokers have"
        )
    if resp.code == ResponseCode.NO_PERMISSION and remark.startswith("subscription group no permission"):
        return ClusterConfigError(
            f"{where} refused {request} ({remark}): the group's consumeEnable is false. Enable it "
            f"(mqadmin updateSubGroup -c CLUSTER -g {group} -s true) or use another group"
        )
    explained = explain_refusal(error, mq.broker_name, 0, 0)
    if explained is not None and ("publish" in str(explained) or " -a Pub " in str(explained)):
        # the diagnosis names a send's fix; a read needs SUB on the topic and on the group
        who, reader = (f" {account!r}", account) if account else ("", "NAME")
        as_group = group or default_group
        return ClusterConfigError(
            f"{where} refused {request} for ACL ({remark.strip()}): the account{who} may not read topic "
            f"{mq.topic} as group {as_group}: give it SUB on the topic and on the group (ACL 1.0: topicPerms "
            f"and groupPerms in plain_acl.yml; ACL 2.0: mqadmin createAcl -b BROKER -s User:{reader} "
            f"-r Topic:{mq.topic} -a Sub -d Allow, and -r Group:{as_group}), or use an account that may"
        )
    if explained is not None:  # the diagnosis speaks of a send: name this request instead
        return ClusterConfigError(str(explained).replace("refused the send", f"refused {request}", 1))
    return error
