"""Broker <-> NameServer messages: REGISTER_BROKER (header + RegisterBrokerBody with its CRC),
UNREGISTER_BROKER, topic configs, and the GET_BROKER_CLUSTER_INFO body."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import ProtocolError
from .codes import Perm, RequestCode
from .command import RemotingCommand, java_bool
from .route import quote_integer_keys
from .stored import body_crc


@dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = Perm.READ_WRITE
    topic_sys_flag: int = 0
    order: bool = False

    def to_json_obj(self) -> dict[str, object]:
        """As fastjson writes TopicConfig: keys sorted by name."""
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": "SINGLE_TAG",
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json_obj(cls, name: str, obj: dict[str, object]) -> TopicConfig:
        try:
            return cls(
                topic_name=str(obj.get("topicName", name)),
                read_queue_nums=_json_int(obj.get("readQueueNums", 0)),
                write_queue_nums=_json_int(obj.get("writeQueueNums", 0)),
                perm=_json_int(obj.get("perm", Perm.READ_WRITE)),
                topic_sys_flag=_json_int(obj.get("topicSysFlag", 0)),
                order=bool(obj.get("order", False)),
            )
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"topic config {name!r} has an unexpected shape: {exc}") from None


def _json_int(value: object) -> int:
    """int() of a JSON value (a number, or a number written as a string); TypeError for anything else."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"int() argument must be a string or a real number, not {type(value).__name__!r}")
    return int(value)


def body_crc32(body: bytes | memoryview) -> int:
    """UtilAll.crc32 as REGISTER_BROKER's bodyCrc32: CRC-32 masked to a non-negative int."""
    return body_crc(body)


def register_broker_body(topics: list[TopicConfig], counter: int, timestamp: int) -> bytes:
    body = {
        "filterServerList": [],
        "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": counter, "timestamp": timestamp},
            "topicConfigTable": {t.topic_name: t.to_json_obj() for t in topics},
        },
    }
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def register_broker_request(
    *,
    cluster_name: str,
    broker_name: str,
    broker_addr: str,
    broker_id: int,
    ha_server_addr: str,
    topics: list[TopicConfig],
    counter: int,
    timestamp: int,
    oneway: bool = False,
) -> RemotingCommand:
    body = register_broker_body(topics, counter, timestamp)
    fields = {
        "brokerId": str(broker_id),
        "bodyCrc32": str(body_crc32(body)),
        "clusterName": cluster_name,
        "brokerAddr": broker_addr,
        "haServerAddr": ha_server_addr,
        "compressed": "false",
        "brokerName": broker_name,
    }
    return RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields=fields, body=body, flag=2 if oneway else 0)


@dataclass(frozen=True)
class BrokerRegistration:
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    topics: list[TopicConfig]


def parse_register_broker(cmd: RemotingCommand) -> BrokerRegistration:
    """Header and body of a REGISTER_BROKER request; ProtocolError on a CRC mismatch or bad body."""
    crc = cmd.field("bodyCrc32")
    if crc is not None and crc != "0" and int(crc) != body_crc32(cmd.body):
        raise ProtocolError(f"REGISTER_BROKER body CRC {crc} does not match the body ({body_crc32(cmd.body)})")
    if java_bool(cmd.field("compressed")):
        raise ProtocolError("compressed REGISTER_BROKER bodies are not supported by this NameServer")
    topics: list[TopicConfig] = []
    if cmd.body:
        try:
            obj = json.loads(str(cmd.body, "utf-8"))
            table = obj["topicConfigSerializeWrapper"]["topicConfigTable"]
            if not isinstance(table, dict):
                raise TypeError("topicConfigTable is not an object")
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"REGISTER_BROKER body is not a RegisterBrokerBody: {exc}") from None
        topics = [TopicConfig.from_json_obj(name, conf) for name, conf in table.items() if isinstance(conf, dict)]
    return BrokerRegistration(
        cluster_name=cmd.require("clusterName"),
        broker_name=cmd.require("brokerName"),
        broker_addr=cmd.require("brokerAddr"),
        broker_id=cmd.int_field("brokerId"),
        topics=topics,
    )


def unregister_broker_request(cluster_name: str, broker_name: str, broker_addr: str, broker_id: int) -> RemotingCommand:
    fields = {
        "brokerName": broker_name,
        "brokerAddr": broker_addr,
        "clusterName": cluster_name,
        "brokerId": str(broker_id),
    }
    return RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext_fields=fields)


def cluster_info_request() -> RemotingCommand:
    return RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)


def cluster_info_body(brokers: dict[str, tuple[str, dict[int, str]]]) -> bytes:
    """ClusterInfo JSON: brokerAddrTable and clusterAddrTable, from {broker name: (cluster, addrs)}."""
    broker_table = {
        name: {"brokerAddrs": {str(k): v for k, v in sorted(addrs.items())}, "brokerName": name, "cluster": cluster}
        for name, (cluster, addrs) in sorted(brokers.items())
    }
    clusters: dict[str, list[str]] = {}
    for name, (cluster, _) in sorted(brokers.items()):
        clusters.setdefault(cluster, []).append(name)
    return json.dumps({"brokerAddrTable": broker_table, "clusterAddrTable": clusters}, separators=(",", ":")).encode()


def registered_broker_names(body: bytes) -> list[str]:
    """The broker names in a ClusterInfo body (GET_BROKER_CLUSTER_INFO's answer), either JSON dialect."""
    try:
        obj = json.loads(quote_integer_keys(body.decode("utf-8")))
        return sorted(str(name) for name in (obj.get("brokerAddrTable") or {}))
    except (UnicodeDecodeError, ValueError, RecursionError, AttributeError) as exc:
        raise ProtocolError(f"cluster info is not the expected JSON: {str(exc)[:200]}") from None
