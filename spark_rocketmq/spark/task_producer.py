"""A task's producer: its lease of the process's pooled producer (spark/pool.py), for one PartitionWriter.

The lease is taken when the writer starts and given back when it finishes. A producer that is closed
meanwhile (broken, or closed under us) is swapped for a fresh one; the client's retries of every producer
the task used go into the summary. Each topic's publish queues are asked once per task (the keyed rows
and the queue_id column are placed on them).

Message trace: before the lease is given back, the trace records of the producer's sends are written and
their trace messages answered (``MessageTracer.flush(settled=True)``), for at most the job's
send_msg_timeout_ms. The tracer's thread would otherwise write them up to 500 ms later, and a Python
worker does not live that long when its application stops right after the write: Spark ends forked
workers with ``os._exit`` and its daemon's SIGHUP, which run no exit handler. Without trace, or with
nothing pending, nothing is waited for.
"""

from __future__ import annotations

import logging

from ..client.producer import Producer
from ..protocol.route import MessageQueue
from .contract import SinkProducer
from .job import WriteJob
from .pool import Lease, ProducerPool
from .report import PartitionSummary

__all__ = ["TaskProducer"]

log = logging.getLogger("spark_rocketmq.spark")


class TaskProducer:
    """The leased producer of one task; ``acquire()`` first, ``release()`` at the end."""

    def __init__(self, pool: ProducerPool, job: WriteJob, summary: PartitionSummary) -> None:
        self._pool = pool
        self.job = job
        self.summary = summary
        self._lease: Lease | None = None
        self._retries_seen = 0  # client retries of producers this writer let go (none unless one broke)
        self._retries_base = 0
        self._queues: dict[str, list[MessageQueue]] = {}
        self._queue_errors: dict[str, Exception] = {}

    def acquire(self) -> None:
        """Lease the pool's producer for the job's configuration (raises what creating it raised)."""
        self._lease = self._acquire()

    def get(self) -> SinkProducer:
        """The leased producer; a closed one (broken, or closed under us) is swapped for a fresh one."""
        if self._lease is not None and self._lease.client.closed:
            self._retries_seen += self._retries_of(self._lease.client)
            self._pool.release(self._lease)
            self._lease = None
        if self._lease is None:
            self._lease = self._acquire()
        return self._lease.client

    def release(self) -> None:
        """Give the lease back; the summary gets the client's retries of the task's sends."""
        if self._lease is not None:
            self._flush_trace(self._lease.client)
            self.summary.retries = self._retries_seen + self._retries_of(self._lease.client)
            self._pool.release(self._lease)
            self._lease = None

    def _acquire(self) -> Lease:
        lease = self._pool.acquire(
            self.job.send_config, idle_timeout_s=self.job.options.producer_idle_timeout_ms / 1000.0
        )
        self.summary.config_fingerprint = lease.fingerprint
        self.summary.producers_created = lease.created
        self._retries_base = lease.client.stats().retries
        return lease

    def _flush_trace(self, producer: SinkProducer) -> None:
        """The trace records of the producer's sends reach the trace topic before the task ends (at most
        send_msg_timeout_ms); nothing to do without trace or with nothing pending."""
        tracer = producer.tracer if isinstance(producer, Producer) else None
        if tracer is None or producer.closed or not tracer.pending():
            return
        timeout_ms = self.job.send_config.send_msg_timeout_ms
        if not tracer.flush(timeout_ms / 1000.0, settled=True):
            log.warning(
                "RocketMQ sink: batch %s: the message trace of the task's sends was not all written to %s "
                "within send_msg_timeout_ms (%d ms); its trace thread goes on writing it while the process lives",
                self.job.ctx.batch_id, tracer.trace_topic, timeout_ms,
            )  # fmt: skip

    def _retries_of(self, producer: SinkProducer) -> int:
        try:
            return max(0, producer.stats().retries - self._retries_base)
        except Exception:  # a broken producer's counters are lost with it
            return 0

    # -- publish queues ----------------------------------------------------------------------------
    def queue_list(self, topic: str) -> list[MessageQueue]:
        """The topic's publish queues ([] when there is no route: those keyed rows fail with the cause)."""
        if topic not in self._queues:
            try:
                self._queues[topic] = list(self.get().fetch_publish_queues(topic))
            except Exception as exc:
                self._queues[topic] = []
                self._queue_errors[topic] = exc
        return self._queues[topic]

    def queue_error(self, topic: str) -> Exception | None:
        """Why the topic's publish queues are unknown (None: they are known, or were never asked)."""
        return self._queue_errors.get(topic)
