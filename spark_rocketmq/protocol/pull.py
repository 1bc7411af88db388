"""The read side's requests and their answers: PULL_MESSAGE (11), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
SEARCH_OFFSET_BY_TIMESTAMP (29), QUERY_CONSUMER_OFFSET (14) and UPDATE_CONSUMER_OFFSET (15), with the
header fields of rocketmq-all-4.9.8's PullMessageRequestHeader, GetMaxOffsetRequestHeader,
GetMinOffsetRequestHeader, SearchOffsetRequestHeader, QueryConsumerOffsetRequestHeader and
UpdateConsumerOffsetRequestHeader (MQClientAPIImpl builds them). No I/O.

Every request names its broker in ``bname`` (RpcRequestHeader.brokerName, in 4.9.8 and 5.x alike): a
5.x Proxy serves every brokerName on one address and routes each request by it; a broker ignores it.
Topics and groups here are the wire names (namespace already wrapped).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

from .codes import RequestCode, ResponseCode
from .command import RemotingCommand
from .javamap import hashmap_ordered


class PullSysFlag:
    """PullSysFlag: the bits of PULL_MESSAGE's sysFlag."""

    #: The broker stores ``commitOffset`` as the group's offset (a master only, and only a held pull).
    COMMIT_OFFSET = 0x1
    #: The broker may hold the pull up to suspendTimeoutMillis when it has nothing new (long polling).
    SUSPEND = 0x2
    #: The broker filters by the request's subscription and expressionType, not by the subscription
    #: the group registered with its heartbeat: a pull needs no registered consumer.
    SUBSCRIPTION = 0x4
    #: Filter servers (removed in 5.x); never set here.
    CLASS_FILTER = 0x8
    #: DefaultLitePullConsumer's pulls.
    LITE_PULL = 0x10


class ExpressionType:
    """ExpressionType: how a subscription expression is read."""

    TAG = "TAG"
    SQL92 = "SQL92"


#: FilterAPI's subscription of every message (SubscriptionData.SUB_ALL).
SUB_ALL = "*"


class PullStatus(Enum):
    """PullStatus: what a pull answered (MQClientAPIImpl.processPullResponse's mapping of answer codes)."""

    #: SUCCESS: the body holds messages.
    FOUND = "FOUND"
    #: PULL_NOT_FOUND: nothing at the offset yet (the queue's end, or an empty queue asked at 0).
    NO_NEW_MSG = "NO_NEW_MSG"
    #: PULL_RETRY_IMMEDIATELY: messages there, none the expression matched (nextBeginOffset moved on), or
    #: a slave without slaveReadEnable that sends the client to the master.
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    #: PULL_OFFSET_MOVED: the offset is below the queue's min offset or beyond its max (nextBeginOffset: where
    #: to go on).
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS_OF_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def pull_status(code: int) -> PullStatus | None:
    """The PullStatus of a PULL_MESSAGE answer code; None for an error answer."""
    return _STATUS_OF_CODE.get(code)


@dataclass(frozen=True)
class PullAnswer:
    """PullMessageResponseHeader's fields of a non-error answer."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int


def read_pull_answer(answer: RemotingCommand) -> PullAnswer | None:
    """The PullAnswer of a PULL_MESSAGE answer; None for an error answer (whose code and remark tell why).
    Raises ProtocolError when an answer of a pull status lacks one of its header fields."""
    status = pull_status(answer.code)
    if status is None:
        return None
    suggest = answer.field("suggestWhichBrokerId")
    return PullAnswer(
        status=status,
        next_begin_offset=answer.int_field("nextBeginOffset"),
        min_offset=answer.int_field("minOffset"),
        max_offset=answer.int_field("maxOffset"),
        suggest_which_broker_id=int(suggest) if suggest and suggest.lstrip("-").isdigit() else 0,
    )


def pull_request(
    *,
    group: str,
    topic: str,
    broker_name: str,
    queue_id: int,
    offset: int,
    max_nums: int,
    expression: str = SUB_ALL,
    expression_type: str = ExpressionType.TAG,
    sub_version: int = 0,
    suspend_ms: int = 0,
    max_msg_bytes: int | None = None,
) -> RemotingCommand:
    """PULL_MESSAGE as DefaultMQPullConsumerImpl.pullSyncImpl sends it (PullAPIWrapper.pullKernelImpl): the
    SUBSCRIPTION flag with the expression, no commit of an offset (COMMIT_OFFSET off, commitOffset 0), and
    the SUSPEND flag with suspendTimeoutMillis only when ``suspend_ms`` > 0 (a broker without the flag does
    not hold the pull whatever suspendTimeoutMillis says; 0 is sent then).

    ``sub_version``: SubscriptionData.subVersion, 0 for TAG (as Java sends it), a timestamp for SQL92 (the
    broker keeps it as its ConsumerFilterData's clientVersion). ``max_msg_bytes``: 5.x's maxMsgBytes, a
    cap on the answer's bytes (4.9.8 does not read it); left out when None (the broker's own caps apply).
    """
    sys_flag = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_ms > 0 else 0)
    fields = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(sys_flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(max(0, suspend_ms)),
        "subscription": expression,
        "subVersion": str(sub_version),
        "expressionType": expression_type,
        "bname": broker_name,
    }
    if max_msg_bytes is not None:
        fields["maxMsgBytes"] = str(max_msg_bytes)
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=hashmap_ordered(fields))


def _queue_request(code: int, topic: str, broker_name: str, queue_id: int, **extra: str) -> RemotingCommand:
    fields = {"topic": topic, "queueId": str(queue_id), **extra, "bname": broker_name}
    return RemotingCommand(code=code, ext_fields=hashmap_ordered(fields))


def max_offset_request(topic: str, broker_name: str, queue_id: int) -> RemotingCommand:
    """GET_MAX_OFFSET (GetMaxOffsetRequestHeader): the queue's next offset to be written. A 5.x broker
    answers its committed max offset (5.x's ``committed``, default true)."""
    return _queue_request(RequestCode.GET_MAX_OFFSET, topic, broker_name, queue_id)


def min_offset_request(topic: str, broker_name: str, queue_id: int) -> RemotingCommand:
    """GET_MIN_OFFSET (GetMinOffsetRequestHeader): the queue's first offset still stored."""
    return _queue_request(RequestCode.GET_MIN_OFFSET, topic, broker_name, queue_id)


def search_offset_request(topic: str, broker_name: str, queue_id: int, timestamp_ms: int) -> RemotingCommand:
    """SEARCH_OFFSET_BY_TIMESTAMP (SearchOffsetRequestHeader): the offset of the queue's first message stored
    at or after ``timestamp_ms`` (5.x's boundaryType left out: its default, LOWER)."""
    return _queue_request(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic, broker_name, queue_id, timestamp=str(timestamp_ms)
    )


def query_consumer_offset_request(group: str, topic: str, broker_name: str, queue_id: int) -> RemotingCommand:
    """QUERY_CONSUMER_OFFSET (QueryConsumerOffsetRequestHeader): the group's committed offset of the queue.

    Sent with 5.x's setZeroIfNotFound=false, so that a 5.x broker answers QUERY_NOT_FOUND (22) for a group
    without an offset of the queue. 4.9.8 does not read that field: it answers SUCCESS with offset 0
    instead when the queue's min offset is 0 and its first message is still in memory
    (ConsumerManageProcessor.queryConsumerOffset), QUERY_NOT_FOUND otherwise.
    """
    return _queue_request(
        RequestCode.QUERY_CONSUMER_OFFSET,
        topic,
        broker_name,
        queue_id,
        consumerGroup=group,
        setZeroIfNotFound="false",
    )


def update_consumer_offset_request(
    group: str, topic: str, broker_name: str, queue_id: int, offset: int
) -> RemotingCommand:
    """UPDATE_CONSUMER_OFFSET (UpdateConsumerOffsetRequestHeader): set the group's offset of the queue. Sent
    as a request with an answer (MQClientAPIImpl.updateConsumerOffset), not oneway, so a refusal is seen."""
    return _queue_request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        topic,
        broker_name,
        queue_id,
        consumerGroup=group,
        commitOffset=str(offset),
    )


def consumer_heartbeat_request(client_id: str, group: str, topics: list[str]) -> RemotingCommand:
    """HEART_BEAT of a pull consumer of ``group`` subscribed to ``topics`` (HeartbeatData with one
    ConsumerData: CONSUME_PASSIVELY, CLUSTERING, "*" of each topic). A broker creates the group's
    %RETRY%group topic at a consumer's heartbeat and registers it with the NameServers: mqadmin
    consumerProgress -g GROUP and the dashboard find the group's brokers through that topic's route."""
    subscriptions = [
        {
            "classFilterMode": False,
            "codeSet": [],
            "expressionType": ExpressionType.TAG,
            "subString": SUB_ALL,
            "subVersion": 0,
            "tagsSet": [],
            "topic": topic,
        }
        for topic in topics
    ]
    consumer = {
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY",
        "groupName": group,
        "messageModel": "CLUSTERING",
        "subscriptionDataSet": subscriptions,
        "unitMode": False,
    }
    body = {"clientID": client_id, "consumerDataSet": [consumer], "producerDataSet": []}
    return RemotingCommand(
        code=RequestCode.HEART_BEAT, body=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    )


def unregister_consumer_request(client_id: str, group: str) -> RemotingCommand:
    """UNREGISTER_CLIENT of a consumer of ``group`` (UnregisterClientRequestHeader)."""
    fields = {"consumerGroup": group, "clientID": client_id}
    return RemotingCommand(code=RequestCode.UNREGISTER_CLIENT, ext_fields=hashmap_ordered(fields))


def read_offset(answer: RemotingCommand) -> int:
    """The ``offset`` header field of a SUCCESS answer to GET_MAX_OFFSET, GET_MIN_OFFSET,
    SEARCH_OFFSET_BY_TIMESTAMP or QUERY_CONSUMER_OFFSET (ProtocolError when it lacks one)."""
    return answer.int_field("offset")
