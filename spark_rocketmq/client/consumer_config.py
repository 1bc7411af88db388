"""Options of a PullConsumer (the connection and identity options of DefaultMQPullConsumer /
DefaultLitePullConsumer that a reader needs), in snake_case, with ``from_mapping`` taking the camelCase
spellings in any letter case and string values, as ProducerConfig does (its normalize_key and
parse_namesrv_addr)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

from ..errors import ConfigError
from .config import (
    check_int,
    check_str,
    fingerprint_of,
    namesrv_addr_or_env,
    normalize_key,
    required_namesrv_addrs,
    split_options,
)

#: The consumer group a reader names in its pull headers unless told another.
DEFAULT_READER_GROUP = "spark_rocketmq_reader"


@dataclass(frozen=True)
class ConsumerConfig:
    """Options of a PullConsumer."""

    #: NameServers (or a 5.x Proxy), "host:port;host:port"; default: the NAMESRV_ADDR environment variable.
    namesrv_addr: str | None = None
    #: The consumer group of pull headers (DefaultMQPullConsumer's consumerGroup); a broker with
    #: autoCreateSubscriptionGroup=true (the default) creates it on its first pull.
    group: str = DEFAULT_READER_GROUP
    #: Prefix of topics and group on the wire ("namespace%topic").
    namespace: str | None = None
    #: ACL access key (ACL 1.0 account or ACL 2.0 user); with secret_key, or neither.
    access_key: str | None = None
    #: The secret of access_key; never shown in a repr.
    secret_key: str | None = field(default=None, repr=False)
    #: TLS to NameServers and brokers (stdlib ssl).
    use_tls: bool = False
    #: Verify the peers' TLS certificates.
    tls_verify: bool = False
    #: Timeout of every request but pulls: routes, offsets, consumer offsets.
    remoting_timeout_ms: int = 3000
    #: Connect timeout of a TCP connection.
    connect_timeout_ms: int = 3000
    #: A connection with nothing in flight for this long is closed (clientChannelMaxIdleTimeSeconds).
    client_channel_max_idle_ms: int = 120_000
    #: Timeout of a pull's answer (DefaultMQPullConsumer's consumerPullTimeoutMillis); a held pull
    #: (suspend_ms) waits that much longer.
    pull_timeout_ms: int = 10_000
    #: A topic's route is asked for again when older than this (pollNameServerInterval).
    poll_name_server_interval_ms: int = 30_000
    #: Instance name (the client id's ip@instance), for parity with the producer; default: the process id.
    instance_name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "namesrv_addr", namesrv_addr_or_env(self.namesrv_addr))
        for name in ("remoting_timeout_ms", "connect_timeout_ms", "client_channel_max_idle_ms", "pull_timeout_ms"):
            check_int(name, getattr(self, name), 1)
        check_int("poll_name_server_interval_ms", self.poll_name_server_interval_ms, 1)
        for name in ("use_tls", "tls_verify"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"option {name}={getattr(self, name)!r}: expected true or false")
        check_str("group", self.group)
        for name in ("namespace", "access_key", "secret_key", "instance_name"):
            if getattr(self, name) is not None:
                check_str(name, getattr(self, name))
        for name in ("namespace", "group"):
            if self.namespace and "%" in getattr(self, name):
                raise ConfigError(f"option {name}={getattr(self, name)!r}: must not contain '%' with a namespace")
        if (self.access_key is None) != (self.secret_key is None):
            raise ConfigError("options access_key and secret_key go together: give both or neither")

    @property
    def namesrv_addrs(self) -> list[str]:
        """The NameServer addresses, in the order given; ConfigError when there are none."""
        return required_namesrv_addrs(self.namesrv_addr)

    def fingerprint(self) -> str:
        """A stable hash of every field: equal configs share one pooled PullConsumer per process."""
        return fingerprint_of(self)

    def replace(self, **changes: object) -> ConsumerConfig:
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(changes)
        return ConsumerConfig(**data)

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(
        cls, options: Mapping[str, object], *, ignore: Collection[str] = (), ignore_unknown: bool = False
    ) -> ConsumerConfig:
        """A config from options in snake_case or camelCase (any letter case), values as strings or typed.
        Keys in ``ignore`` (any spelling) are skipped; any other unknown key is a ConfigError listing the
        valid names, unless ``ignore_unknown``."""
        known, unknown = split_options(options, _ALIASES, _TYPES, ignore=ignore)
        if unknown and not ignore_unknown:
            raise ConfigError(
                f"unknown consumer option(s) {sorted(unknown)}; valid options: {', '.join(cls.option_names())} "
                "(camelCase spellings such as namesrvAddr, consumerGroup, consumerPullTimeoutMillis are accepted too)"
            )
        return cls(**known)


_TYPES = get_type_hints(ConsumerConfig)


# Every field by its own name, plus the Java consumers' (camelCase) names that differ from it (consumerGroup is
# the reader's option: the group of the pulls and of the committed offsets, spark/read_options.py).
_ALIASES: dict[str, str] = {normalize_key(f.name): f.name for f in fields(ConsumerConfig)}
_ALIASES.update(
    {
        "namesrvaddress": "namesrv_addr",
        "nameserveraddr": "namesrv_addr",
        "nameserver": "namesrv_addr",
        "accesskeyid": "access_key",
        "tls": "use_tls",
        "consumerpulltimeoutmillis": "pull_timeout_ms",
        "pulltimeout": "pull_timeout_ms",
        "pollnameserverinterval": "poll_name_server_interval_ms",
    }
)
