"""A half message's SPARK_TXN value (which query, batch, run, partition, task attempt and send it is of) and
the JSON row of a stored half's handle with it, as a task's summary and the transaction log carry them."""

from __future__ import annotations

from ..client.transaction import TransactionHandle

#: The half message property naming its transaction and send:
#: "<id namespace>/<batch>/<run>/<partition>/<task attempt>/<send>": <run> tells apart the runs of one
#: batch (a replay after an abort), <send> the sends of one row (a resent row is another half).
PROPERTY_SPARK_TXN = "SPARK_TXN"


def transaction_id(id_namespace: str, batch_id: int, run: str, partition: int, attempt: int) -> str:
    """Which query, batch, run of the batch, partition and task attempt (SPARK_TXN without the send)."""
    return f"{id_namespace}/{batch_id}/{run}/{partition}/{attempt}"


def parse_transaction_id(text: str) -> tuple[str, int] | None:
    """(id namespace, batch) of a SPARK_TXN value, or None when ``text`` is not one."""
    try:
        namespace, batch, _run, partition, attempt, send = text.rsplit("/", 5)
        int(partition), int(attempt), int(send)
        return namespace, int(batch)
    except ValueError:
        return None


def handle_row(handle: TransactionHandle, txn: str) -> list[object]:
    """A half's handle and SPARK_TXN as one JSON-able row (a task's summary, the record)."""
    return [*handle.to_row(), txn]


def parse_handle_row(row: list[object]) -> tuple[TransactionHandle, str]:
    """``handle_row`` read back."""
    return TransactionHandle.from_row(row[:-1]), str(row[-1])
