"""Sink options: the producer's (ProducerConfig) plus the sink's own, from kwargs, a dict or a TOML file.

Every option takes its snake_case name (``on_invalid_row``) or the camelCase spelling Spark users
write (``onInvalidRow``), in any letter case. Producer options are handed to
``ProducerConfig.from_mapping``; the sink's own are below, with their defaults.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..client.config import normalize_key
from ..errors import ConfigError

ON_INVALID_ROW_CHOICES = ("fail", "skip", "dead_letter")
AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"
DELIVERY_GUARANTEE_CHOICES = (AT_LEAST_ONCE, EXACTLY_ONCE)
#: Default of max_request_bytes: 1 MiB.
DEFAULT_REQUEST_BYTES = 1024 * 1024
#: Default of max_in_flight_requests_per_task (lowered to the producer's max_in_flight when that is less).
DEFAULT_MAX_IN_FLIGHT_REQUESTS = 16


@dataclass(frozen=True)
class SinkOptions:
    """What the sink itself does with rows (the producer's options live in ProducerConfig)."""

    #: Every row goes to this topic; overrides a ``topic`` column (as Spark's Kafka sink does).
    topic: str | None = None
    #: A row that cannot become a message: "fail" fails the batch naming the row, "skip" reports it,
    #: "dead_letter" reports it and writes it to dead_letter_path.
    on_invalid_row: str = "fail"
    #: on_invalid_row="dead_letter": where refused rows are written as Parquet (a local path, made
    #: absolute on the driver, or a URI pyarrow.fs opens: hdfs://, s3://, ...); see observability.md.
    dead_letter_path: str | None = None
    #: Names the stream in deterministic message ids; default: the streaming query id (foreachBatch,
    #: format("rocketmq") streaming) or the application id (batch writes).
    id_namespace: str | None = None
    #: Largest request body in bytes; the producer's max_message_size is the upper bound whatever is
    #: given. 1 MiB: against a real 4.9.8 broker, 1 MiB requests x 16 in flight stored fastest with no
    #: busy answers, where 4 MiB x 64 made its send thread answer SYSTEM_BUSY.
    max_request_bytes: int = DEFAULT_REQUEST_BYTES
    #: Requests one task (one partition writer) keeps unsettled at most, resends included; default:
    #: 16, or the producer's max_in_flight if lower. Not the producer's max_in_flight, which bounds
    #: the requests of every task sharing that producer. Also accepted as ``max_in_flight_requests``.
    max_in_flight_requests_per_task: int | None = None
    #: A request that still fails after the client's retries is sent again until this many ms after
    #: the writer took its rows; rows undelivered then fail the batch (Kafka's delivery.timeout.ms).
    delivery_timeout_ms: int = 120_000
    #: An executor's pooled producer nobody has used for this long is closed (0: after each task).
    producer_idle_timeout_ms: int = 600_000
    #: Executors log a progress line every this many rows of a partition (0: never).
    progress_every_rows: int = 1_000_000
    #: Invalid rows described (with their reason) in a report at most; all are counted.
    max_invalid_samples: int = 20
    #: format("rocketmq") only: commit appends each batch's report as a JSON line to <dir>/reports.jsonl.
    report_dir: str | None = None
    #: "at_least_once" (batched requests; a replay publishes again, same UNIQ_KEY) or "exactly_once"
    #: (every row a half message, made visible by the driver's two-phase commit; see transaction_log.py).
    delivery_guarantee: str = AT_LEAST_ONCE
    #: exactly_once: where the transaction log lives (a local path or a pyarrow.fs URI: hdfs://, s3://),
    #: read and written by the driver alone (a restarted driver must reach it again). Required in that mode.
    transaction_log_dir: str | None = None
    #: exactly_once: the driver sends END_TRANSACTION COMMIT for at most this long after recording a
    #: batch; what it has not committed by then is committed by the brokers' check-backs, which are
    #: answered (from the log) only once this window and 30 s more have passed. Each half asks its broker for no
    #: check-back within the window (CHECK_IMMUNITY_TIME_IN_SECONDS, rounded up to seconds).
    transaction_commit_window_ms: int = 60_000

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE

    def __post_init__(self) -> None:
        if self.on_invalid_row not in ON_INVALID_ROW_CHOICES:
            raise ConfigError(
                f"option on_invalid_row={self.on_invalid_row!r}: choose 'fail' (default: the batch fails "
                "naming the row), 'skip' (the row is counted and reported, not sent) or 'dead_letter' (as skip, "
                "and the row is written to dead_letter_path)"
            )
        self._check_dead_letters()
        if self.topic is not None and not self.topic.strip():
            raise ConfigError("option topic is blank: give a topic name or leave it out to use the topic column")
        for name in ("max_request_bytes", "max_in_flight_requests_per_task", "delivery_timeout_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"option {name}={value!r}: must be a positive integer")
        if self.producer_idle_timeout_ms < 0:
            raise ConfigError(
                f"option producer_idle_timeout_ms={self.producer_idle_timeout_ms!r}: must be >= 0 "
                "(0 closes an executor's producer after each task)"
            )
        if self.progress_every_rows < 0 or self.max_invalid_samples < 0:
            raise ConfigError("options progress_every_rows and max_invalid_samples must be >= 0")
        if self.delivery_guarantee not in DELIVERY_GUARANTEE_CHOICES:
            raise ConfigError(
                f"option delivery_guarantee={self.delivery_guarantee!r}: choose 'at_least_once' (default) or "
                "'exactly_once' (each row visible once, through RocketMQ transactional messages)"
            )
        if self.exactly_once and not (self.transaction_log_dir or "").strip():
            raise ConfigError(
                "option transaction_log_dir is required with delivery_guarantee=exactly_once: give a directory "
                "(a local path, or a URI pyarrow.fs opens such as hdfs://... or s3://...) that the driver, and a "
                "restarted driver, can reach; it records which batches committed"
            )
        if self.transaction_commit_window_ms <= 0:
            raise ConfigError(f"option transaction_commit_window_ms={self.transaction_commit_window_ms!r}: must be > 0")

    def _check_dead_letters(self) -> None:
        path = (self.dead_letter_path or "").strip()
        if self.on_invalid_row == "dead_letter" and not path:
            raise ConfigError(
                "option on_invalid_row='dead_letter' needs option dead_letter_path (deadLetterPath): a directory "
                "(a local path, or a URI pyarrow.fs opens such as hdfs://... or s3://...) every executor can write"
            )
        if path and self.on_invalid_row != "dead_letter":
            raise ConfigError(
                f"option dead_letter_path is set but on_invalid_row={self.on_invalid_row!r}: set "
                "on_invalid_row='dead_letter' to write refused rows there, or leave dead_letter_path out"
            )
        if path:
            from .dead_letters import absolute_location

            object.__setattr__(self, "dead_letter_path", absolute_location(path))


_SINK_FIELDS = {normalize_key(f.name): f for f in fields(SinkOptions)}
#: Older names still accepted.
_ALIASES = {"max_in_flight_requests": "max_in_flight_requests_per_task"}
_SINK_FIELDS.update({normalize_key(old): _SINK_FIELDS[normalize_key(new)] for old, new in _ALIASES.items()})
_INT_FIELDS = {
    "max_request_bytes",
    "max_in_flight_requests_per_task",
    "delivery_timeout_ms",
    "producer_idle_timeout_ms",
    "progress_every_rows",
    "max_invalid_samples",
    "transaction_commit_window_ms",
}


def _coerce(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _INT_FIELDS:
        if isinstance(value, bool):
            raise ConfigError(f"option {name}={value!r}: expected an integer")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"option {name}={value!r}: expected an integer") from None
    if not isinstance(value, str):
        raise ConfigError(f"option {name}={value!r}: expected a string")
    if name == "delivery_guarantee":
        return value.strip().lower().replace("-", "_")
    if name == "on_invalid_row":
        return value.strip().lower().replace("-", "_")
    return value


def split_options(options: Mapping[str, Any]) -> tuple[SinkOptions, dict[str, Any]]:
    """Separate the sink's options from the producer's (returned untouched for ProducerConfig)."""
    sink: dict[str, Any] = {}
    producer: dict[str, Any] = {}
    for key, value in options.items():
        f = _SINK_FIELDS.get(normalize_key(str(key)))
        if f is None:
            producer[str(key)] = value
        elif value is None:
            continue  # None: the option's default
        elif f.name in sink:
            raise ConfigError(f"option {f.name} is given twice (as {key!r} too); keep one spelling")
        else:
            sink[f.name] = _coerce(f.name, value)
    return SinkOptions(**sink), producer


def load_options(source: Mapping[str, Any] | str | os.PathLike[str] | None, overrides: Mapping[str, Any]) -> dict:
    """Options from a dict or a TOML file (its [rocketmq] table, or the top level), then keyword overrides.

    Keyword arguments win over the file or dict, as command-line flags win over conf files.
    """
    base: dict[str, Any] = {}
    if source is None:
        pass
    elif isinstance(source, Mapping):
        base = dict(source)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"configuration file {str(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"configuration file {str(path)!r} is not valid TOML: {exc}") from None
        section = data.get("rocketmq", data)
        if not isinstance(section, Mapping):
            raise ConfigError(f"configuration file {str(path)!r}: [rocketmq] must be a table of options")
        base = {k: v for k, v in section.items() if not isinstance(v, Mapping)}
    else:
        raise ConfigError(
            f"RocketMQSink takes a dict of options or the path of a TOML file, not {type(source).__name__}"
        )
    # Overrides replace an option whatever spelling the base used for it.
    overridden = {normalize_key(k) for k in overrides}
    merged = {k: v for k, v in base.items() if normalize_key(k) not in overridden}
    merged.update(overrides)
    return merged
