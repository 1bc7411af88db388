"""What one write task needs, built and checked on the driver and shipped to the executors."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..client.config import ProducerConfig
from .message_ids import BatchContext
from .options import DEFAULT_MAX_IN_FLIGHT_REQUESTS, SinkOptions
from .schema import MessageColumns

__all__ = ["WriteJob"]


@dataclass(frozen=True)
class WriteJob:
    """Everything a task needs, built and checked on the driver (picklable)."""

    producer_config: ProducerConfig
    options: SinkOptions
    columns: MessageColumns
    ctx: BatchContext
    #: exactly_once: this run of the batch (the driver's; a replay after an abort is another run).
    txn_run: str = ""
    #: exactly_once: the transaction log's name for the stream, when it is not the id namespace
    #: (a df.write: each write is a transaction of its own).
    txn_namespace: str | None = None
    #: on_invalid_row="dead_letter": this write's run, for a write with no batch id (a df.write, a
    #: ``sink(df)``): its dead letters go to ``write-<run>``, not ``batch-<id>`` (spark/dead_letters.py).
    dead_letter_run: str | None = None

    @property
    def max_message_size(self) -> int:
        return self.producer_config.max_message_size

    @property
    def request_limit(self) -> int:
        """Largest request body: max_request_bytes, never over the producer's max_message_size."""
        return min(self.options.max_request_bytes, self.max_message_size)

    @property
    def max_unsettled(self) -> int:
        """Requests one writer keeps unsettled (in flight or waiting to be resent) at most."""
        if self.options.max_in_flight_requests_per_task:
            return self.options.max_in_flight_requests_per_task
        if self.transactional:  # one row a request: as many as the producer keeps in flight
            return self.producer_config.max_in_flight
        # Bounded memory: at most this many request bodies are held at once.
        return min(self.producer_config.max_in_flight, DEFAULT_MAX_IN_FLIGHT_REQUESTS)

    @property
    def delivery_timeout_s(self) -> float:
        return self.options.delivery_timeout_ms / 1000.0

    @property
    def transactional(self) -> bool:
        """exactly_once: each row is a half message, sent through the single-row path."""
        return self.options.exactly_once

    @property
    def send_config(self) -> ProducerConfig:
        """The configuration of the producers that send the rows. exactly_once: no retry inside the client
        (retry_times_when_send_async_failed 0). A send whose answer was lost may have stored its half; the
        client's retry would store another with the same UNIQ_KEY and SPARK_TXN, on another queue or the
        same one, which no check-back could tell from the recorded one (both would commit). The writer
        resends instead, as another send of the row (SPARK_TXN names it): the lost one is rolled back."""
        if self.transactional and self.producer_config.retry_times_when_send_async_failed:
            return dataclasses.replace(self.producer_config, retry_times_when_send_async_failed=0)
        return self.producer_config
