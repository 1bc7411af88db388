"""ProducerConfig: every producer option with its default, in one place.

Names mirror DefaultMQProducer's setters in snake_case (``sendMsgTimeout`` -> ``send_msg_timeout_ms``).
``ProducerConfig.from_mapping`` also takes the camelCase spellings, in any letter case, with string
values (Spark lower-cases data source option names and passes every value as a string).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, get_type_hints

from ..errors import ConfigError, InvalidMessageError
from ..protocol.message import validate_topic

#: Environment variable read when namesrv_addr is not given (as the Java client does).
NAMESRV_ADDR_ENV = "NAMESRV_ADDR"


def normalize_key(key: str) -> str:
    """``sendMsgTimeoutMs``, ``send_msg_timeout_ms`` and ``SENDMSGTIMEOUTMS`` all name one option."""
    return key.replace("_", "").replace("-", "").replace(".", "").lower()


@dataclass(frozen=True)
class ProducerConfig:
    """Options of a Producer (DefaultMQProducer's, plus max_in_flight)."""

    #: NameServers, "host:port;host:port"; default: the NAMESRV_ADDR environment variable.
    namesrv_addr: str | None = None
    #: Producer group (sent in every send header, heartbeat and unregister).
    group: str = "DEFAULT_PRODUCER"
    #: Bound on a whole send, retries included (DefaultMQProducer.sendMsgTimeout).
    send_msg_timeout_ms: int = 3000
    #: Extra attempts of a sync or batch send, on another broker when there is one.
    retry_times_when_send_failed: int = 2
    #: Extra attempts of an async send.
    retry_times_when_send_async_failed: int = 2
    #: Retry on another broker when the broker stored the message but answered FLUSH_*_TIMEOUT /
    #: SLAVE_NOT_AVAILABLE.
    retry_another_broker_when_not_store_ok: bool = False
    #: Largest message body, and largest batch request body, in bytes.
    max_message_size: int = 4 * 1024 * 1024
    #: A single message body larger than this is zlib-compressed (never a batch).
    compress_msg_body_over: int = 4096
    #: Queues of a topic auto-created through create_topic_key.
    default_topic_queue_nums: int = 4
    #: The topic whose route stands in for a topic the NameServer does not know (auto-creation).
    create_topic_key: str = "TBW102"
    #: Refresh of cached topic routes.
    poll_name_server_interval_ms: int = 30_000
    #: Heartbeats to every broker in the routes.
    heartbeat_broker_interval_ms: int = 30_000
    #: MQFaultStrategy: avoid brokers that were slow or failed.
    send_latency_fault_enable: bool = True
    #: Prefix of topics and group on the wire ("namespace%topic").
    namespace: str | None = None
    #: ACL 1.0 access key of an account in the brokers' plain_acl.yml; with secret_key, or neither.
    access_key: str | None = None
    #: The secret of access_key (ACL 1.0 signing); never shown in a repr.
    secret_key: str | None = field(default=None, repr=False)
    #: TLS to NameServers and brokers (stdlib ssl).
    use_tls: bool = False
    #: Verify the peers' TLS certificates (off by default, as the Java client's default trust).
    tls_verify: bool = False
    #: Sends pending per producer at most (send_async blocks when this many are), as the Java client's
    #: semaphoreAsyncSendNum. What goes on the wire to one broker is bounded apart from this, by its
    #: adaptive window (at most 1,024 single messages or 16 MiB of request).
    max_in_flight: int = 256
    #: Instance name in the client id (ip@instance); default: the process id.
    instance_name: str | None = None
    #: Unit name appended to the client id, as DefaultMQProducer.unitName.
    unit_name: str | None = None
    #: Timeout of NameServer requests and heartbeats.
    remoting_timeout_ms: int = 3000
    #: Connect timeout of a TCP connection.
    connect_timeout_ms: int = 3000
    #: A connection with nothing in flight for this long is closed (clientChannelMaxIdleTimeSeconds).
    client_channel_max_idle_ms: int = 120_000
    #: send and send_async gather messages into MessageBatch requests (DefaultMQProducer.autoBatch).
    auto_batch: bool = False
    #: An auto batch is sent at most this long after its first message (batchMaxDelayMs, 1 ms to 30 s).
    batch_max_delay_ms: int = 10
    #: An auto batch is sent once its bodies pass this many bytes (batchMaxBytes, at most 2 MiB).
    batch_max_bytes: int = 32 * 1024
    #: Body bytes held in auto batches at most; past it messages are sent alone (totalBatchMaxBytes).
    total_batch_max_bytes: int = 32 * 1024 * 1024
    #: Message trace (DefaultMQProducer's enableMsgTrace): a Pub record for every send a broker answered
    #: and an EndTransaction record for every END_TRANSACTION, written to the trace topic (trace.py).
    enable_msg_trace: bool = False
    #: The trace topic (customizedTraceTopic); default RMQ_SYS_TRACE_TOPIC (brokers with traceTopicEnable=true).
    customized_trace_topic: str | None = None
    #: Percent of send requests traced, 1-100 (not Java's): each request (a message, or a batch body of the
    #: sink) is traced or not as a whole, at random; every END_TRANSACTION is.
    msg_trace_sample_percent: int = 100
    #: Record rocketmq_send_cost_time and the message counts through OpenTelemetry (metrics.py; needs the
    #: otel extra).
    enable_metrics: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "namesrv_addr", namesrv_addr_or_env(self.namesrv_addr))
        check_str("group", self.group)
        if "%" in self.group and self.namespace:
            raise ConfigError(f"option group={self.group!r}: must not contain '%' when a namespace is set")
        positive = (
            "send_msg_timeout_ms",
            "max_message_size",
            "default_topic_queue_nums",
            "poll_name_server_interval_ms",
            "heartbeat_broker_interval_ms",
            "max_in_flight",
            "remoting_timeout_ms",
            "connect_timeout_ms",
            "client_channel_max_idle_ms",
            "batch_max_delay_ms",
            "batch_max_bytes",
            "total_batch_max_bytes",
        )
        for name in positive:
            check_int(name, getattr(self, name), 1)
        for name in ("retry_times_when_send_failed", "retry_times_when_send_async_failed", "compress_msg_body_over"):
            check_int(name, getattr(self, name), 0)
        if self.batch_max_delay_ms > 30_000:
            raise ConfigError(f"option batch_max_delay_ms={self.batch_max_delay_ms}: at most 30000 (30 s)")
        if self.batch_max_bytes > 2 * 1024 * 1024:
            raise ConfigError(f"option batch_max_bytes={self.batch_max_bytes}: at most 2097152 (2 MiB)")
        if self.default_topic_queue_nums > 1024:
            raise ConfigError(f"option default_topic_queue_nums={self.default_topic_queue_nums}: at most 1024")
        for name in (
            "retry_another_broker_when_not_store_ok",
            "send_latency_fault_enable",
            "use_tls",
            "tls_verify",
            "auto_batch",
            "enable_msg_trace",
            "enable_metrics",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"option {name}={getattr(self, name)!r}: expected true or false")
        check_str("create_topic_key", self.create_topic_key)
        for name in ("namespace", "access_key", "secret_key", "instance_name", "unit_name", "customized_trace_topic"):
            value = getattr(self, name)
            if value is not None:
                check_str(name, value)
        if self.namespace is not None and "%" in self.namespace:
            raise ConfigError(f"option namespace={self.namespace!r}: must not contain '%'")
        if not isinstance(self.msg_trace_sample_percent, int) or not 1 <= self.msg_trace_sample_percent <= 100:
            raise ConfigError(
                f"option msg_trace_sample_percent={self.msg_trace_sample_percent!r}: expected an integer from 1 to 100"
            )
        if self.customized_trace_topic is not None:
            try:
                validate_topic(self.customized_trace_topic)
            except InvalidMessageError as exc:
                raise ConfigError(f"option customized_trace_topic: {exc}") from None
        if (self.access_key is None) != (self.secret_key is None):
            raise ConfigError("options access_key and secret_key go together: give both (ACL 1.0) or neither")

    # -- derived values ----------------------------------------------------------------------------
    @property
    def namesrv_addrs(self) -> list[str]:
        """The NameServer addresses, in the order given; ConfigError when there are none."""
        return required_namesrv_addrs(self.namesrv_addr)

    def fingerprint(self) -> str:
        """A stable hash of every field: equal configs share one cached Producer per process."""
        return fingerprint_of(self)

    def replace(self, **changes: object) -> ProducerConfig:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(changes)
        return ProducerConfig(**data)

    # -- from Spark / TOML options -----------------------------------------------------------------
    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(
        cls,
        options: Mapping[str, object],
        *,
        ignore: Collection[str] = (),
        ignore_unknown: bool = False,
    ) -> ProducerConfig:
        """Build a config from options in snake_case or camelCase (any letter case), values as strings or typed.

        Keys in ``ignore`` (any spelling) are skipped; any other unknown key is a ConfigError listing
        the valid names, unless ``ignore_unknown``.
        """
        known, unknown = cls.split_mapping(options, ignore=ignore)
        if unknown and not ignore_unknown:
            raise ConfigError(
                f"unknown producer option(s) {sorted(unknown)}; valid options: {', '.join(cls.option_names())} "
                "(camelCase spellings such as namesrvAddr, producerGroup, sendMsgTimeout are accepted too)"
            )
        return cls(**known)

    @classmethod
    def split_mapping(
        cls, options: Mapping[str, object], *, ignore: Collection[str] = ()
    ) -> tuple[dict[str, Any], dict[str, object]]:
        """(typed keyword arguments of ProducerConfig, options that are not producer options)."""
        return split_options(options, _ALIASES, _TYPES, ignore=ignore)


def split_options(
    options: Mapping[str, object],
    aliases: Mapping[str, str],
    types: Mapping[str, Any],
    *,
    ignore: Collection[str] = (),
) -> tuple[dict[str, Any], dict[str, object]]:
    """(typed keyword arguments of a config dataclass, the options it does not know) from options in any
    spelling: ``aliases`` maps normalize_key spellings to field names, ``types`` the fields' types."""
    ignored = {normalize_key(k) for k in ignore}
    known: dict[str, Any] = {}  # keyword arguments of the config: a type per key
    unknown: dict[str, object] = {}
    for key, value in options.items():
        norm = normalize_key(str(key))
        if norm in ignored:
            continue
        name = aliases.get(norm)
        if name is None:
            unknown[str(key)] = value
            continue
        if name in known:
            raise ConfigError(f"option {name} is given twice (as {key!r} too); keep one spelling")
        known[name] = coerce_option(types, name, value)
    return known, unknown


def namesrv_addr_or_env(namesrv_addr: str | None) -> str | None:
    """The namesrv_addr option, else the NAMESRV_ADDR environment variable (as the Java client reads it),
    checked; None when neither is set."""
    if namesrv_addr is None:
        namesrv_addr = (os.environ.get(NAMESRV_ADDR_ENV) or "").strip() or None
    if namesrv_addr is not None:
        parse_namesrv_addr(namesrv_addr)
    return namesrv_addr


def required_namesrv_addrs(namesrv_addr: str | None) -> list[str]:
    """The NameServer addresses of an option, in the order given; ConfigError when there are none."""
    if not namesrv_addr:
        raise ConfigError(
            "option namesrv_addr is not set: give namesrv_addr='host:9876' (several separated by ';') "
            f"or set the {NAMESRV_ADDR_ENV} environment variable"
        )
    return parse_namesrv_addr(namesrv_addr)


def fingerprint_of(config: Any) -> str:
    """A stable hash of every field of a config dataclass (the key of a process's pooled clients)."""
    data = json.dumps(asdict(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:32]


def parse_namesrv_addr(value: str) -> list[str]:
    """ "host:port;host:port" -> ["host:port", ...]; ConfigError naming the bad part."""
    if not isinstance(value, str):
        raise ConfigError(f"option namesrv_addr={value!r}: expected a string 'host:port;host:port'")
    addrs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise ConfigError(f"option namesrv_addr={value!r}: no address; expected 'host:port;host:port'")
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"option namesrv_addr: {addr!r} is not host:port (e.g. 127.0.0.1:9876)")
    return addrs


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"option {name}={value!r}: expected an integer")
    if value < minimum:
        raise ConfigError(f"option {name}={value}: must be >= {minimum}")


def check_str(name: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"option {name}={value!r}: expected a non-empty string")


_TYPES = get_type_hints(ProducerConfig)
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def coerce_option(types: Mapping[str, Any], name: str, value: object) -> str | int | bool | None:
    """An option's value (often a string, as Spark passes every value) as its field's type in ``types``."""
    kind = types[name]
    if value is None:
        return None
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigError(f"option {name}={value!r}: expected true or false")
    if kind is int:
        if isinstance(value, bool):
            raise ConfigError(f"option {name}={value!r}: expected an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value.strip())
        raise ConfigError(f"option {name}={value!r}: expected an integer")
    if not isinstance(value, str):
        raise ConfigError(f"option {name}={value!r}: expected a string")
    return value.strip()


# Every field by its own name, plus the DefaultMQProducer (camelCase) names that differ from it.
_ALIASES: dict[str, str] = {normalize_key(f.name): f.name for f in fields(ProducerConfig)}
_ALIASES.update(
    {
        "producergroup": "group",
        "sendmsgtimeout": "send_msg_timeout_ms",
        "sendtimeout": "send_msg_timeout_ms",
        "sendtimeoutms": "send_msg_timeout_ms",
        "compressmsgbodyoverhowmuch": "compress_msg_body_over",
        "compressmsgbodyovermuch": "compress_msg_body_over",
        "defaulttopicqueuenums": "default_topic_queue_nums",
        "pollnameserverinterval": "poll_name_server_interval_ms",
        "pollnameserverintervalms": "poll_name_server_interval_ms",
        "heartbeatbrokerinterval": "heartbeat_broker_interval_ms",
        "namesrvaddress": "namesrv_addr",
        "nameserveraddr": "namesrv_addr",
        "nameserver": "namesrv_addr",
        "accesskeyid": "access_key",
        "tls": "use_tls",
    }
)
