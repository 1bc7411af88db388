"""Reader options: ``spark.read`` / ``spark.readStream`` ``.format("rocketmq")``.

Every option takes its camelCase spelling (``startingOffsets``) or its snake_case name
(``starting_offsets``), in any letter case, as the sink's do. The reader's own options are the
fields of ``ReadOptions``; the connection options (``namesrvAddr``, ACL keys, TLS, ``namespace``,
timeouts) are the consumer's (``client/consumer_config.py``). An option of the sink alone, or one
nobody knows, is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..client.config import ProducerConfig, normalize_key
from ..client.consumer_config import ConsumerConfig
from ..errors import ConfigError
from ..protocol.message import is_legal_topic_name
from .options import SinkOptions

#: Options Spark itself puts into a data source's options.
SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}
#: Filter expression types (Java's ExpressionType).
EXPRESSION_TYPES = ("TAG", "SQL92")


@dataclass(frozen=True)
class ReadOptions:
    """What the reader does; the connection is the consumer's (ConsumerConfig)."""

    #: The topic to read, or several, comma-separated (required).
    topic: str | None = None
    #: Where reading starts: "earliest" (batch default), "latest" (streaming default), "group" (the
    #: consumer_group's committed offsets), or JSON {"T": {"broker-a": {"0": 23, "1": -2}}} where -2 means
    #: earliest and -1 latest; queues the JSON leaves out start at the default. A restarted query resumes
    #: from its checkpoint whatever this says.
    starting_offsets: str | None = None
    #: Where reading starts, as a store time in ms: per queue, the first message stored at or after it
    #: (SEARCH_OFFSET_BY_TIMESTAMP). Not with starting_offsets.
    starting_timestamp: int | None = None
    #: startingOffsets=group: where a queue the group has no offset for starts ("earliest" or "latest";
    #: default: earliest for batch reads, latest for streaming).
    starting_offsets_fallback: str | None = None
    #: Batch reads: where reading ends (exclusive), "latest" (default) or JSON as starting_offsets.
    ending_offsets: str | None = None
    #: Batch reads: where reading ends, as a store time in ms (the first message at or after it is not read).
    ending_timestamp: int | None = None
    #: A tag expression ("TagA || TagB"; "*": every message), or an SQL92 one with expression_type=SQL92.
    sub_expression: str = "*"
    #: "TAG" (default) or "SQL92" (brokers with enablePropertyFilter=true).
    expression_type: str = "TAG"
    #: At least this many Spark tasks: queues' offset ranges are split to make them (default: one task per
    #: queue with messages to read, small ranges packed together).
    min_partitions: int | None = None
    #: Streaming: at most this many offsets per micro-batch, spread over the queues by backlog.
    max_offsets_per_trigger: int | None = None
    #: Offsets the brokers no longer have (retention, PULL_OFFSET_MOVED) fail the query (true), or are
    #: skipped, each skipped range logged and, in a stream, counted in rocketmq_source_skipped_offsets_total
    #: (false).
    fail_on_data_loss: bool = True
    #: Streaming: each committed micro-batch writes its end offsets under this consumer group
    #: (UPDATE_CONSUMER_OFFSET), so mqadmin consumerProgress and the dashboard show the query's lag; also
    #: the group of startingOffsets=group. The checkpoint stays the truth.
    consumer_group: str | None = None
    #: Messages asked for per pull request (maxMsgNums; brokers answer at most 32 from memory by default).
    pull_batch_size: int = 32
    #: Pull requests one task keeps in flight per queue, at consecutive offsets.
    pulls_in_flight: int = 16
    #: A task yields its rows to Spark in Arrow batches of about this many bytes of messages.
    max_batch_bytes: int = 4 * 1024 * 1024
    #: A task that cannot read a queue (its broker down, no replica serving it) fails after this long,
    #: and Spark retries it.
    read_timeout_ms: int = 120_000

    def __post_init__(self) -> None:
        if not self.topics:
            raise ConfigError(
                "option topic is required: the topic to read, or several separated by commas (topic=Orders)"
            )
        for topic in self.topics:  # any legal name: system topics (the trace topic, %RETRY%, %DLQ%) may be read
            if not is_legal_topic_name(topic):
                raise ConfigError(
                    f"option topic: {topic[:80]!r} is not a topic name (at most 127 characters of [%|a-zA-Z0-9_-])"
                )
        if self.starting_offsets is not None and self.starting_timestamp is not None:
            raise ConfigError("options startingOffsets and startingTimestamp both given: keep one")
        if self.ending_offsets is not None and self.ending_timestamp is not None:
            raise ConfigError("options endingOffsets and endingTimestamp both given: keep one")
        if self.expression_type not in EXPRESSION_TYPES:
            raise ConfigError(
                f"option expressionType={self.expression_type!r}: choose TAG (tag expressions, the default) or "
                "SQL92 (brokers with enablePropertyFilter=true)"
            )
        if not self.sub_expression.strip():
            raise ConfigError("option subExpression is blank: give a tag expression such as 'TagA || TagB', or '*'")
        fallback = self.starting_offsets_fallback
        if fallback is not None and fallback not in ("earliest", "latest"):
            raise ConfigError(f"option startingOffsetsFallback={fallback!r}: choose earliest or latest")
        for name in ("min_partitions", "max_offsets_per_trigger", "pull_batch_size", "pulls_in_flight"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"option {name}={value!r}: must be a positive integer")
        if self.max_batch_bytes <= 0 or self.read_timeout_ms <= 0:
            raise ConfigError("options max_batch_bytes and read_timeout_ms must be positive integers")
        if self.pull_batch_size > 1024:
            raise ConfigError(f"option pullBatchSize={self.pull_batch_size}: at most 1024 messages per pull")
        if self.starting_offsets == "group" and not self.consumer_group:
            raise ConfigError(
                "option startingOffsets=group needs option consumerGroup: the group whose committed offsets to "
                "start from"
            )

    @property
    def topics(self) -> list[str]:
        """The topics, in the order given, each once."""
        seen: dict[str, None] = {}
        for part in (self.topic or "").split(","):
            if part.strip():
                seen[part.strip()] = None
        return list(seen)

    @property
    def tags(self) -> frozenset[str] | None:
        """The exact tags a TAG expression keeps (None: every message, or an SQL92 expression)."""
        if self.expression_type != "TAG":
            return None
        parts = [p.strip() for p in self.sub_expression.split("||")]
        if "*" in parts:
            return None
        return frozenset(p for p in parts if p)


_READ_FIELDS = {normalize_key(f.name): f for f in fields(ReadOptions)}
_INT_FIELDS = {
    "starting_timestamp",
    "ending_timestamp",
    "min_partitions",
    "max_offsets_per_trigger",
    "pull_batch_size",
    "pulls_in_flight",
    "max_batch_bytes",
    "read_timeout_ms",
}
_LOWER_FIELDS = {"starting_offsets_fallback"}


def _coerce(name: str, key: str, value: Any) -> Any:
    if name in _INT_FIELDS:
        if isinstance(value, bool):
            raise ConfigError(f"option {key}={value!r}: expected an integer")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"option {key}={value!r}: expected an integer") from None
    if name == "fail_on_data_loss":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            raise ConfigError(f"option {key}={value!r}: expected true or false")
        return text == "true"
    if not isinstance(value, str):
        raise ConfigError(f"option {key}={value!r}: expected a string")
    if name == "expression_type":
        return value.strip().upper()
    if name in _LOWER_FIELDS:
        return value.strip().lower()
    if name == "consumer_group":
        return value.strip() or None
    if name == "starting_offsets" or name == "ending_offsets":
        stripped = value.strip()
        return stripped if stripped.startswith("{") else stripped.lower()
    return value


def _sink_only_names() -> set[str]:
    consumer = {normalize_key(n) for n in ConsumerConfig.option_names()}
    sink = {normalize_key(f.name) for f in fields(SinkOptions)} | {
        normalize_key(n) for n in ProducerConfig.option_names()
    }
    return sink - consumer - set(_READ_FIELDS)


def parse_read_options(options: Mapping[str, Any]) -> tuple[ReadOptions, ConsumerConfig]:
    """(reader options, the consumer's configuration) from Spark's options; ConfigError naming the option."""
    read: dict[str, Any] = {}
    consumer: dict[str, Any] = {}
    consumer_names = {normalize_key(n) for n in ConsumerConfig.option_names()}
    sink_only = _sink_only_names()
    for key, value in options.items():
        norm = normalize_key(str(key))
        if str(key).lower() in SPARK_OPTIONS or value is None:
            continue
        f = _READ_FIELDS.get(norm)
        if f is not None:
            if f.name in read:
                raise ConfigError(f"option {f.name} is given twice (as {key!r} too); keep one spelling")
            read[f.name] = _coerce(f.name, str(key), value)
        elif norm in consumer_names:
            consumer[str(key)] = value
        elif norm in sink_only:
            raise ConfigError(
                f"option {key!r} is an option of writing (the sink), not of reading: leave it out of "
                "spark.read / spark.readStream .format('rocketmq')"
            )
        else:
            known = sorted({f.name for f in fields(ReadOptions)} | set(ConsumerConfig.option_names()))
            raise ConfigError(f"unknown option {key!r} for reading RocketMQ; the options are: {', '.join(known)}")
    parsed = ReadOptions(**read)
    config = ConsumerConfig.from_mapping(consumer)
    group = parsed.consumer_group
    if group:  # the group of the pulls is the group whose offsets are committed
        given = {normalize_key(k) for k in consumer}
        if "group" in given and config.group != group:
            raise ConfigError(
                f"options group={config.group!r} and consumerGroup={group!r} differ: give consumerGroup alone "
                "(the group of the reader's pulls and of its committed offsets)"
            )
        config = config.replace(group=group)
    return parsed, config
