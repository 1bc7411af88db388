"""Queue offsets of a read: their JSON form, and turning a starting or ending position into numbers.

One form everywhere, in options, in Spark's checkpoint and in logs: ``{"T": {"broker-a": {"0": 23}}}``,
topic, then brokerName, then queue id, to the next offset to read (an end is exclusive). In options,
-2 means a queue's earliest offset and -1 its latest (rocketmq-spark's form).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..errors import ConfigError, RocketMQError
from ..protocol.route import MessageQueue

log = logging.getLogger("spark_rocketmq.spark.reader")

EARLIEST = -2
LATEST = -1

#: Next offset to read of each queue.
QueueOffsets = dict[MessageQueue, int]


class OffsetSource(Protocol):
    """What resolving offsets asks of the cluster (client/pull_consumer.py PullConsumer is one)."""

    def min_offset(self, mq: MessageQueue) -> int: ...

    def max_offset(self, mq: MessageQueue) -> int: ...

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...

    def query_consumer_offset(self, group: str, mq: MessageQueue) -> int | None: ...


def to_json_dict(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, dict[str, int]]]:
    """The checkpoint form, sorted by topic, brokerName and queue id."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for mq in sorted(offsets, key=lambda q: (q.topic, q.broker_name, q.queue_id)):
        out.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = int(offsets[mq])
    return out


def from_json_dict(data: Mapping[str, object], what: str) -> QueueOffsets:
    """Offsets from the checkpoint form (or an option's JSON, already parsed); ConfigError naming ``what``."""
    out: QueueOffsets = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what}: expected a JSON object {{topic: {{brokerName: {{queueId: offset}}}}}}")
    for topic, brokers in data.items():
        if not isinstance(brokers, Mapping):
            raise ConfigError(f"{what}: topic {topic!r} must map brokerNames to {{queueId: offset}} objects")
        for broker, queues in brokers.items():
            if not isinstance(queues, Mapping):
                raise ConfigError(f"{what}: {topic!r} / {broker!r} must map queue ids to offsets")
            for qid, offset in queues.items():
                try:
                    queue_id = int(qid)
                except (TypeError, ValueError):
                    raise ConfigError(f"{what}: {topic!r} / {broker!r}: queue id {qid!r} is not an integer") from None
                if isinstance(offset, bool) or not isinstance(offset, int):
                    raise ConfigError(f"{what}: {topic!r} / {broker!r} / queue {qid}: offset {offset!r} is no integer")
                if offset < EARLIEST:
                    raise ConfigError(
                        f"{what}: {topic!r} / {broker!r} / queue {qid}: offset {offset} (-2: earliest, -1: latest, "
                        "else an offset >= 0)"
                    )
                out[MessageQueue(str(topic), str(broker), queue_id)] = offset
    return out


def parse_spec(text: str, option: str) -> str | QueueOffsets:
    """An offsets option: "earliest", "latest", "group", or its JSON as offsets (-2 / -1 kept)."""
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"option {option}: not valid JSON ({exc}): {text[:200]}") from None
        return from_json_dict(data, f"option {option}")
    if text in ("earliest", "latest", "group"):
        return text
    raise ConfigError(
        f"option {option}={text!r}: give earliest, latest, group (startingOffsets only) or JSON such as "
        '{"Orders": {"broker-a": {"0": 23, "1": -2}}}'
    )


def check_named_queues(spec: QueueOffsets, queues: Iterable[MessageQueue], option: str, topics: list[str]) -> None:
    """JSON offsets name only the read topics' queues: ConfigError naming what does not exist."""
    known = set(queues)
    brokers: dict[str, set[str]] = {}
    for mq in known:
        brokers.setdefault(mq.topic, set()).add(mq.broker_name)
    for mq in spec:
        if mq.topic not in topics:
            raise ConfigError(f"option {option} names topic {mq.topic!r}, which is not read (topic={','.join(topics)})")
        if mq.broker_name not in brokers.get(mq.topic, set()):
            raise ConfigError(
                f"option {option}: topic {mq.topic!r} has no queue on broker {mq.broker_name!r}; its brokers are "
                f"{sorted(brokers.get(mq.topic, set()))}"
            )
        if mq not in known:
            count = sum(1 for q in known if q.topic == mq.topic and q.broker_name == mq.broker_name)
            raise ConfigError(
                f"option {option}: topic {mq.topic!r} on {mq.broker_name!r} has no queue {mq.queue_id} "
                f"(its queues are 0-{count - 1})"
            )


@dataclass(frozen=True)
class Position:
    """Where a read starts or ends: a named end, a timestamp, a group's offsets, or JSON offsets."""

    kind: str  # "earliest", "latest", "timestamp", "group", "offsets"
    timestamp_ms: int | None = None
    offsets: QueueOffsets | None = None
    option: str = ""

    @classmethod
    def of(cls, spec: str | None, timestamp: int | None, default: str, option: str) -> Position:
        if timestamp is not None:
            return cls("timestamp", timestamp_ms=timestamp, option=option.replace("Offsets", "Timestamp"))
        if spec is None:
            return cls(default, option=option)
        parsed = parse_spec(spec, option)
        if isinstance(parsed, str):
            return cls(parsed, option=option)
        return cls("offsets", offsets=parsed, option=option)


def resolve(
    position: Position,
    queues: Iterable[MessageQueue],
    source: OffsetSource,
    *,
    fallback: str,
    group: str | None = None,
) -> QueueOffsets:
    """The offset of each queue for ``position``; JSON offsets are checked against the queues' ranges.

    ``fallback`` ("earliest" / "latest") is used for a queue JSON leaves out, and for one the group has no
    offset of. Raises ConfigError naming the queue for a JSON offset beyond its max; a group's offset beyond
    it (a queue reset since) is logged and brought down to it.
    """
    out: QueueOffsets = {}
    for mq in queues:
        kind = position.kind
        offset: int | None = None
        if kind == "offsets":
            assert position.offsets is not None
            offset = position.offsets.get(mq)
            if offset is None:
                kind = fallback
            elif offset == EARLIEST:
                kind, offset = "earliest", None
            elif offset == LATEST:
                kind, offset = "latest", None
        elif kind == "group":
            assert group is not None
            offset = source.query_consumer_offset(group, mq)
            if offset is None:
                kind = fallback
        if offset is None:
            if kind == "earliest":
                offset = source.min_offset(mq)
            elif kind == "latest":
                offset = source.max_offset(mq)
            elif kind == "timestamp":
                assert position.timestamp_ms is not None
                offset = source.search_offset(mq, position.timestamp_ms)
            else:
                raise RocketMQError(f"no offset rule {kind!r}")
        elif position.kind == "offsets":
            high = source.max_offset(mq)
            if offset > high:
                raise ConfigError(
                    f"option {position.option}: offset {offset} of topic {mq.topic!r} / {mq.broker_name!r} / queue "
                    f"{mq.queue_id} is beyond the queue's max offset {high}"
                )
        elif position.kind == "group":
            high = source.max_offset(mq)
            if offset > high:  # a queue reset, or a failover that lost messages: read on from its end
                log.warning(
                    "%s: group %s's offset %d is beyond the queue's max offset %d; starting at %d",
                    describe(mq), group, offset, high, high,
                )  # fmt: skip
                offset = high
        out[mq] = offset
    return out


def describe(mq: MessageQueue) -> str:
    return f"topic {mq.topic!r}, broker {mq.broker_name!r}, queue {mq.queue_id}"
