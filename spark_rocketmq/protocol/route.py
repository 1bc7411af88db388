"""Topic routes: the NameServer's TopicRouteData JSON, both dialects, and the producer's queue list."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import InvalidMessageError, ProtocolError
from .codes import MASTER_ID, Perm


@dataclass(frozen=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int


def check_one_target(sharding_key: str | None, queue: MessageQueue | None) -> None:
    """A send names a sharding key or a queue, not both."""
    if sharding_key is not None and queue is not None:
        raise InvalidMessageError("give sharding_key or queue, not both")


def check_queue(topic: str, queue: MessageQueue | None) -> MessageQueue | None:
    """``queue`` when it is a MessageQueue of ``topic`` (plain or namespaced), else InvalidMessageError."""
    if queue is None:
        return None
    if not isinstance(queue, MessageQueue):
        raise InvalidMessageError(f"queue must be a MessageQueue, got {type(queue).__name__}")
    if queue.topic != topic and queue.topic.split("%", 1)[-1] != topic:  # plain or namespaced name
        raise InvalidMessageError(f"queue {queue} belongs to topic {queue.topic!r}, not {topic!r}")
    return queue


def check_sharding_key(key: str | None) -> str | None:
    """``key`` when it is a string (or None), else InvalidMessageError."""
    if key is not None and not isinstance(key, str):
        raise InvalidMessageError(f"sharding_key must be a string, got {type(key).__name__}")
    return key


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True)
class BrokerData:
    cluster: str
    broker_name: str
    #: brokerId -> "host:port"; 0 is the master.
    broker_addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(frozen=True)
class TopicRouteData:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def broker_addr(self, broker_name: str) -> str | None:
        for bd in self.broker_datas:
            if bd.broker_name == broker_name:
                return bd.master_addr
        return None

    def proxy_addr(self, namesrv_addrs: list[str]) -> str | None:
        """The RocketMQ 5.x Proxy this route was answered by, or None for brokers reached directly.

        A Proxy answers route requests itself and names its own address for every broker: one address
        for the whole route, which is the address asked (a NameServer address of the client) or serves
        several brokerNames (no two brokers of a cluster share an ip:port)."""
        addrs = {addr for bd in self.broker_datas for addr in bd.broker_addrs.values()}
        if len(addrs) != 1:
            return None
        (addr,) = addrs
        return addr if addr in namesrv_addrs or len(self.broker_datas) > 1 else None

    def to_json(self, standard: bool = True) -> bytes:
        """Serialize as the NameServer does: fastjson, keys sorted; integer map keys quoted only
        in the standard dialect (request version >= V4_9_4 or acceptStandardJsonOnly)."""
        obj: dict[str, object] = {
            "brokerDatas": [
                {
                    "brokerAddrs": {str(k): v for k, v in sorted(bd.broker_addrs.items())},
                    "brokerName": bd.broker_name,
                    "cluster": bd.cluster,
                }
                for bd in self.broker_datas
            ],
            "filterServerTable": self.filter_server_table,
        }
        if self.order_topic_conf is not None:
            obj["orderTopicConf"] = self.order_topic_conf
        obj["queueDatas"] = [
            {
                "brokerName": qd.broker_name,
                "perm": qd.perm,
                "readQueueNums": qd.read_queue_nums,
                "topicSysFlag": qd.topic_sys_flag,
                "writeQueueNums": qd.write_queue_nums,
            }
            for qd in self.queue_datas
        ]
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        if not standard:
            text = _unquote_integer_keys(text)
        return text.encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes | str) -> TopicRouteData:
        """Parse either dialect: standard JSON, or fastjson's unquoted integer keys."""
        try:
            text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
            obj = json.loads(quote_integer_keys(text))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, huge integers
            raise ProtocolError(f"route data is not JSON: {str(exc)[:200]}") from None
        try:
            queue_datas = [
                QueueData(
                    broker_name=str(q["brokerName"]),
                    read_queue_nums=int(q.get("readQueueNums", 0)),
                    write_queue_nums=int(q.get("writeQueueNums", 0)),
                    perm=int(q.get("perm", 0)),
                    topic_sys_flag=int(q.get("topicSysFlag", 0)),
                )
                for q in obj.get("queueDatas") or []
            ]
            broker_datas = [
                BrokerData(
                    cluster=str(b.get("cluster", "")),
                    broker_name=str(b["brokerName"]),
                    broker_addrs={int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()},
                )
                for b in obj.get("brokerDatas") or []
            ]
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ProtocolError(f"route data has an unexpected shape: {exc!r}") from None
        order = obj.get("orderTopicConf")
        return cls(
            queue_datas=queue_datas,
            broker_datas=broker_datas,
            order_topic_conf=order if isinstance(order, str) else None,
            filter_server_table=obj.get("filterServerTable") or {},
        )


def _scan_keys(text: str, quote: bool) -> str:
    """Add (quote=True) or remove quotes around integer object keys, outside string literals."""
    out: list[str] = []
    stack: list[str] = []
    i = 0
    n = len(text)
    expect_key = False
    while i < n:
        c = text[i]
        if c.isspace():
            out.append(c)
            i += 1
            continue
        if expect_key:
            expect_key = False
            start = i + 1 if c == '"' else i
            end = start + 1 if text[start : start + 1] == "-" else start
            while end < n and text[end].isdigit():
                end += 1
            digits = text[start:end]
            if digits and digits != "-":
                if quote and c != '"' and text[end : end + 1] == ":":
                    out.append(f'"{digits}"')
                    i = end
                    continue
                if not quote and c == '"' and text[end : end + 2] == '":':
                    out.append(digits)
                    i = end + 1
                    continue
        if c == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            i = end + 1
            continue
        if c in "{[":
            stack.append(c)
            expect_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
        elif c == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        out.append(c)
        i += 1
    return "".join(out)


def quote_integer_keys(text: str) -> str:
    """fastjson's default dialect writes Map<Long, String> keys bare ({0:"..."}); make it JSON."""
    return _scan_keys(text, quote=True)


def _unquote_integer_keys(text: str) -> str:
    return _scan_keys(text, quote=False)


@dataclass
class TopicPublishInfo:
    """The writable queues of a topic, as MQClientInstance.topicRouteData2TopicPublishInfo builds them."""

    topic: str
    route: TopicRouteData
    message_queues: list[MessageQueue]
    order_topic: bool = False

    @property
    def ok(self) -> bool:
        return bool(self.message_queues)

    def write_queue_nums(self, broker_name: str) -> int:
        """TopicPublishInfo.getQueueIdByBroker: write queues of a writable broker, else -1."""
        for qd in self.route.queue_datas:
            if qd.broker_name == broker_name and Perm.is_writeable(qd.perm):
                return qd.write_queue_nums
        return -1

    @property
    def broker_names(self) -> list[str]:
        return list(dict.fromkeys(mq.broker_name for mq in self.message_queues))


def publish_info(topic: str, route: TopicRouteData) -> TopicPublishInfo:
    if route.order_topic_conf:
        queues: list[MessageQueue] = []
        for item in route.order_topic_conf.split(";"):
            name, _, nums = item.partition(":")
            try:
                count = int(nums)
            except ValueError:
                raise ProtocolError(f"orderTopicConf entry {item!r} is not brokerName:queueNums") from None
            queues.extend(MessageQueue(topic, name, i) for i in range(count))
        return TopicPublishInfo(topic, route, queues, order_topic=True)
    masters = {bd.broker_name for bd in route.broker_datas if bd.master_addr}
    queues = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if Perm.is_writeable(qd.perm) and qd.broker_name in masters:
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return TopicPublishInfo(topic, route, queues, order_topic=False)
