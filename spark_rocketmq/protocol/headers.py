"""Custom headers (extFields) of the requests a producer sends and the answers it reads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from ..errors import ProtocolError
from .codes import RequestCode
from .command import RemotingCommand, java_bool
from .ext_fields import ExtFieldsTemplate
from .javamap import hashmap_order, hashmap_ordered

DEFAULT_TOPIC = "TBW102"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"


def _bool(v: bool) -> str:
    return "true" if v else "false"


@lru_cache(maxsize=4)
def _v2_order(with_l: bool, with_n: bool) -> tuple[str, ...]:
    """The HashMap order of the V2 letters present (l and n are optional); computed once per shape."""
    return tuple(hashmap_order(list("abcdefghijk") + (["l"] if with_l else []) + ["m"] + (["n"] if with_n else [])))


@dataclass(frozen=True)
class SendMessageRequestHeader:
    """SendMessageRequestHeader; on the wire as SendMessageRequestHeaderV2's one-letter fields."""

    producer_group: str
    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    default_topic: str = DEFAULT_TOPIC
    default_topic_queue_nums: int = 4
    reconsume_times: int = 0
    unit_mode: bool = False
    batch: bool = False
    broker_name: str | None = None
    max_reconsume_times: int | None = None

    def to_v2_fields(self) -> dict[str, str]:
        """SendMessageRequestHeaderV2's one-letter fields, in the Java client's HashMap order."""
        values = {
            "a": self.producer_group,
            "b": self.topic,
            "c": self.default_topic,
            "d": str(self.default_topic_queue_nums),
            "e": str(self.queue_id),
            "f": str(self.sys_flag),
            "g": str(self.born_timestamp),
            "h": str(self.flag),
            "i": self.properties,
            "j": str(self.reconsume_times),
            "k": _bool(self.unit_mode),
            "l": str(self.max_reconsume_times),
            "m": _bool(self.batch),
            "n": self.broker_name or "",
        }
        return {k: values[k] for k in _v2_order(self.max_reconsume_times is not None, self.broker_name is not None)}

    def to_v1_fields(self) -> dict[str, str]:
        fields = {
            "producerGroup": self.producer_group,
            "topic": self.topic,
            "defaultTopic": self.default_topic,
            "defaultTopicQueueNums": str(self.default_topic_queue_nums),
            "queueId": str(self.queue_id),
            "sysFlag": str(self.sys_flag),
            "bornTimestamp": str(self.born_timestamp),
            "flag": str(self.flag),
            "properties": self.properties,
            "reconsumeTimes": str(self.reconsume_times),
            "unitMode": _bool(self.unit_mode),
            "batch": _bool(self.batch),
        }
        if self.broker_name is not None:
            fields["bname"] = self.broker_name
        return hashmap_ordered(fields)

    @classmethod
    def from_command(cls, cmd: RemotingCommand) -> SendMessageRequestHeader:
        """Read the header of SEND_MESSAGE (long names) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (letters)."""
        v2 = cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
        names = _V2_NAMES if v2 else _V1_NAMES

        def get(name: str, required: bool = True) -> str | None:
            value = cmd.field(names[name])
            if value is None and required:
                raise ProtocolError(f"send request lacks header field {names[name]!r} ({name})")
            return value

        def num(name: str, default: int | None = None) -> int:
            value = get(name, required=default is None)
            if value is None:
                if default is None:  # get() raised: a field without a default is required
                    raise AssertionError(name)
                return default
            try:
                return int(value)
            except ValueError:
                raise ProtocolError(f"send header field {names[name]!r} is not a number: {value[:20]!r}") from None

        max_rt = get("max_reconsume_times", required=False)
        try:
            max_reconsume_times = int(max_rt) if max_rt else None
        except ValueError:
            max_reconsume_times = None  # optional and only informative: ignore garbage, as before
        return cls(
            producer_group=get("producer_group") or "",
            topic=get("topic") or "",
            default_topic=get("default_topic", required=False) or DEFAULT_TOPIC,
            default_topic_queue_nums=num("default_topic_queue_nums", 4),
            queue_id=num("queue_id"),
            sys_flag=num("sys_flag", 0),
            born_timestamp=num("born_timestamp", 0),
            flag=num("flag", 0),
            properties=get("properties", required=False) or "",
            reconsume_times=num("reconsume_times", 0),
            unit_mode=java_bool(get("unit_mode", required=False)),
            # A broker goes by this flag alone (SendMessageProcessor: requestHeader.isBatch()): a
            # SEND_BATCH_MESSAGE without it is one message whose body is the whole payload.
            batch=java_bool(get("batch", required=False)),
            broker_name=get("broker_name", required=False),
            max_reconsume_times=max_reconsume_times,
        )


#: The V2 letters a send's template fills per attempt, in render's order: queueId, sysFlag,
#: bornTimestamp, flag, properties.
_SEND_SLOTS = ("e", "f", "g", "h", "i")


@lru_cache(maxsize=1024)
def send_header_template(
    producer_group: str, topic: str, default_topic: str, default_topic_queue_nums: int, batch: bool, broker_name: str
) -> ExtFieldsTemplate:
    """The extFields of a SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE to one broker and topic from one group, in
    the ROCKETMQ serialization (to_v2_fields' entries, one template per group, topic, broker and kind,
    kept): ``render(queue_id, sys_flag, born_timestamp, flag, properties)`` puts in what changes per
    attempt."""
    fixed = SendMessageRequestHeader(
        producer_group=producer_group,
        topic=topic,
        properties="",
        default_topic=default_topic,
        default_topic_queue_nums=default_topic_queue_nums,
        batch=batch,
        broker_name=broker_name,
        queue_id=0,
        sys_flag=0,
        born_timestamp=0,
        flag=0,
    )
    return ExtFieldsTemplate(fixed.to_v2_fields(), _SEND_SLOTS)


_V2_NAMES = {
    "producer_group": "a", "topic": "b", "default_topic": "c", "default_topic_queue_nums": "d",
    "queue_id": "e", "sys_flag": "f", "born_timestamp": "g", "flag": "h", "properties": "i",
    "reconsume_times": "j", "unit_mode": "k", "max_reconsume_times": "l", "batch": "m",
    "broker_name": "n",
}  # fmt: skip
_V1_NAMES = {
    "producer_group": "producerGroup", "topic": "topic", "default_topic": "defaultTopic",
    "default_topic_queue_nums": "defaultTopicQueueNums", "queue_id": "queueId", "sys_flag": "sysFlag",
    "born_timestamp": "bornTimestamp", "flag": "flag", "properties": "properties",
    "reconsume_times": "reconsumeTimes", "unit_mode": "unitMode",
    "max_reconsume_times": "maxReconsumeTimes", "batch": "batch", "broker_name": "bname",
}  # fmt: skip


@dataclass(frozen=True)
class SendMessageResponseHeader:
    """msgId (offset id, comma-joined for a batch), queueId, queueOffset, transactionId, and a 5.3.2+
    broker's recallHandle for a timer message it holds."""

    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    recall_handle: str | None = None

    @classmethod
    def from_command(cls, cmd: RemotingCommand) -> SendMessageResponseHeader:
        return cls(*send_answer_fields(cmd))

    def to_fields(self) -> dict[str, str]:
        fields = {"msgId": self.msg_id, "queueId": str(self.queue_id), "queueOffset": str(self.queue_offset)}
        if self.transaction_id is not None:
            fields["transactionId"] = self.transaction_id
        if self.recall_handle is not None:
            fields["recallHandle"] = self.recall_handle
        return fields


def send_answer_fields(cmd: RemotingCommand) -> tuple[str, int, int, str | None, str | None]:
    """A send answer's (msgId, queueId, queueOffset, transactionId, recallHandle): SendMessageResponseHeader's
    fields, without the object (the send path reads one per answer)."""
    ext = cmd.fields()
    if ext is not None:
        try:  # the usual answer: read at once, the checks below only for one that lacks or garbles a field
            queue_id, queue_offset = ext["queueId"], ext["queueOffset"]
            if queue_id.isdigit() and queue_offset.isdigit():
                return ext["msgId"], int(queue_id), int(queue_offset), ext.get("transactionId"), ext.get("recallHandle")
        except (KeyError, ValueError):  # ValueError: a digit int() does not take ("²")
            pass
    return (
        cmd.require("msgId"),
        cmd.int_field("queueId"),
        cmd.int_field("queueOffset"),
        cmd.field("transactionId"),
        cmd.field("recallHandle"),
    )


def route_request(topic: str, opaque: int = 0, accept_standard_json_only: bool = False) -> RemotingCommand:
    fields = {"topic": topic}
    if accept_standard_json_only:
        fields["acceptStandardJsonOnly"] = "true"
    return RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=opaque, ext_fields=hashmap_ordered(fields))


def heartbeat_body(client_id: str, producer_groups: list[str]) -> bytes:
    """HeartbeatData JSON for a producer: fields sorted by name; the inner producer group included."""
    groups = sorted(set(producer_groups) | {CLIENT_INNER_PRODUCER_GROUP})
    data = {
        "clientID": client_id,
        "consumerDataSet": [],
        "producerDataSet": [{"groupName": g} for g in groups],
    }
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class HeartbeatData:
    """What a HEART_BEAT's body says of its client (any client's, ``heartbeat_body`` too)."""

    client_id: str | None
    #: Consumer group -> topic -> (subscription expression, expression type).
    consumers: dict[str, dict[str, tuple[str, str]]]
    producer_groups: list[str]

    @classmethod
    def decode(cls, body: bytes | memoryview | None) -> HeartbeatData:
        """ProtocolError when the body is not HeartbeatData JSON."""
        try:
            data = json.loads(str(bytes(body), "utf-8")) if body else {}
            client_id = data.get("clientID")
            consumers = {
                str(c["groupName"]): {
                    str(d["topic"]): (str(d.get("subString") or "*"), str(d.get("expressionType") or "TAG"))
                    for d in c.get("subscriptionDataSet") or []
                }
                for c in data.get("consumerDataSet") or []
            }
            producer_groups = [str(p["groupName"]) for p in data.get("producerDataSet") or []]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProtocolError(f"HEART_BEAT body is not HeartbeatData: {exc}") from None
        return cls(None if client_id is None else str(client_id), consumers, producer_groups)


def heartbeat_request(client_id: str, producer_groups: list[str], opaque: int = 0) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.HEART_BEAT, opaque=opaque, body=heartbeat_body(client_id, producer_groups))


def unregister_client_request(client_id: str, producer_group: str, opaque: int = 0) -> RemotingCommand:
    fields = {"producerGroup": producer_group, "clientID": client_id}
    return RemotingCommand(code=RequestCode.UNREGISTER_CLIENT, opaque=opaque, ext_fields=hashmap_ordered(fields))
