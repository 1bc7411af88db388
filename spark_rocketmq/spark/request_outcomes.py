"""What a PartitionWriter's settled requests add to its PartitionSummary (spark/report.py).

A delivered request adds its messages, bytes and topic counts, and what the driver needs of its rows
later: the transaction handle of a half message (exactly_once) and the recall handle of a timer row. An
undelivered one adds its failed rows, a ClusterConfigError's text once, and, while there is room for
``max_invalid_samples`` of them, an error line naming the topic, the rows or the row, the queue and why.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import cast

from ..client import SendResult
from ..client.send_failures import is_final
from ..client.transaction import TransactionHandle
from ..errors import ClusterConfigError
from .job import WriteJob
from .pending import PendingRequest, queue_name
from .report import PartitionSummary
from .transaction_ids import handle_row

__all__ = ["count_delivered", "count_undelivered"]


def count_delivered(s: PartitionSummary, req: PendingRequest, future: Future[SendResult]) -> None:
    """Count a request its broker stored (``future``: its completed send)."""
    if req.txn is not None:
        handle = cast(TransactionHandle, future.result())
        s.handles.append(handle_row(handle, req.txn))
    if req.message is not None and req.message.is_timer:
        s.timer_rows += 1
        recall_handle = future.result().recall_handle
        if recall_handle is not None:
            s.recall_handles[req.message.uniq_key or ""] = recall_handle
    s.messages += req.count
    s.bytes += req.size
    s.requests += 1
    s.topics[req.topic] = s.topics.get(req.topic, 0) + req.count
    s.topic_bytes[req.topic] = s.topic_bytes.get(req.topic, 0) + req.size


def count_undelivered(
    s: PartitionSummary,
    req: PendingRequest,
    exc: BaseException | None,
    reason: str | None,
    *,
    job: WriteJob,
    partition: int,
) -> None:
    """Count a request that failed for good (``exc``: its last error; ``reason``: why it was not sent or
    resent, None when it failed after its sends)."""
    if isinstance(exc, ClusterConfigError) and str(exc) not in s.config_errors:
        s.config_errors.append(str(exc))
    s.failed_rows += req.count
    s.failed_topics[req.topic] = s.failed_topics.get(req.topic, 0) + req.count
    if len(s.errors) < job.options.max_invalid_samples:
        what = f"topic {req.topic}: {req.count} rows"
        if req.row is not None:
            what = f"topic {req.topic}: partition {partition} row {req.row}"
            if req.message is not None and req.message.is_timer:
                what += f" (a delivery time, column {job.columns.deliver_time or job.columns.delay_ms})"
        if req.queue is not None:
            what += f" of {queue_name(req.queue)}"
        cause = f"{type(exc).__name__}: {exc}" if exc is not None else ""
        if reason is not None:
            s.errors.append(f"{what} not delivered: {reason}" + (f" ({cause})" if cause else ""))
        elif is_final(exc):
            s.errors.append(f"{what} not delivered ({cause}); not resent: no resend can cure this")
        else:
            s.errors.append(
                f"{what} not delivered within delivery_timeout_ms={job.options.delivery_timeout_ms} "
                f"after {req.sends} sends: {cause}"
            )
