"""Dead letters: the rows a sink refused (``on_invalid_row="dead_letter"``), kept as Parquet files.

Each refused row is written with every column the sink was given, plus why and where it was refused
(``DEAD_LETTER_COLUMNS``), under ``dead_letter_path`` (a local path or a URI pyarrow.fs opens)::

    <dead_letter_path>/<id namespace>/batch-<batch id>/part-<partition>.parquet

A df.write (``format("rocketmq")``) and a ``sink(df)`` with no batch id are one run each:
``write-<run>`` in place of ``batch-<batch id>``. The id namespace and the batch id are those of the
message ids (spark/message_ids.py): a replay is a batch whose ids repeat.

Once per batch, whatever is replayed:

- a task writes its partition's rows to a hidden ``_tmp-...`` file (readers skip names starting with
  ``_``) and, when the task ends well, moves it to its partition's name: a retried (or speculative)
  task of the same partition replaces that file with the same rows;
- after the batch's tasks all ended, the driver removes the files of the batch's folder that this
  run did not write (an earlier run, partitioned otherwise, or a task killed before its move): a
  replayed batch leaves the files of its last run only.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import SchemaError
from .directories import folder_name, open_directory
from .invalid import InvalidRow
from .report import PartitionSummary

__all__ = [
    "DEAD_LETTER_COLUMNS",
    "DeadLetterWriter",
    "absolute_location",
    "batch_folder",
    "check_columns",
    "keep_run_files",
]

#: Columns added to each refused row: why (the column and the reason) and where (batch, partition, row).
DEAD_LETTER_COLUMNS = (
    "dead_letter_reason",
    "dead_letter_column",
    "dead_letter_batch_id",
    "dead_letter_partition",
    "dead_letter_row",
)
_TMP_PREFIX = "_tmp-"


def absolute_location(path: str) -> str:
    """A local path made absolute (the executors' working directories are not the driver's); a URI as given."""
    return path if "://" in path else os.path.abspath(path)


def batch_folder(id_namespace: str, batch_id: int, run: str | None) -> str:
    """The batch's folder under dead_letter_path: ``<namespace>/batch-<id>``, or ``<namespace>/write-<run>``."""
    leaf = f"write-{folder_name(run)}" if run else f"batch-{batch_id}"
    return f"{folder_name(id_namespace)}/{leaf}"


def check_columns(names: Iterable[str]) -> None:
    """SchemaError when the DataFrame has a column a dead letter adds."""
    taken = sorted({n.lower() for n in names} & set(DEAD_LETTER_COLUMNS))
    if taken:
        raise SchemaError(
            f"columns {taken} are added to each dead letter (on_invalid_row='dead_letter'); rename them in the "
            "DataFrame"
        )


class DeadLetterWriter:
    """One task's refused rows: ``add`` them as they come, then ``commit()`` (the file moved into place)
    or ``discard()``. Opens nothing until the first refused row."""

    def __init__(self, location: str, folder: str, *, batch_id: int, partition: int) -> None:
        self.location = location.rstrip("/")
        self.folder = folder
        self.batch_id, self.partition = batch_id, partition
        self.rows = 0
        #: Rows given to add(), and why they could not be written (they are then undelivered).
        self.refused = 0
        self.error: Exception | None = None
        self._fs: pafs.FileSystem | None = None
        self._dir = ""
        self._tmp = ""
        self._out: pq.ParquetWriter | None = None
        self._stream: pa.NativeFile | None = None

    @property
    def file_name(self) -> str:
        return f"part-{self.partition:05d}.parquet"

    def add(self, batch: pa.RecordBatch, refused: list[InvalidRow], row_start: int) -> None:
        """Write ``refused`` (rows of ``batch``, numbered from ``row_start`` in the partition) with their
        reasons. Never raises: a failure is kept in ``error`` and reported by ``finish``."""
        self.refused += len(refused)
        if not refused or self.error is not None:
            return
        try:
            self._write(batch, refused, row_start)
        except Exception as exc:
            self.error = exc

    def _write(self, batch: pa.RecordBatch, refused: list[InvalidRow], row_start: int) -> None:
        picked = batch.take(pa.array(np.array([r.row - row_start for r in refused], dtype=np.int64)))
        n = len(refused)
        extra = [
            pa.array([r.reason for r in refused], pa.string()),
            pa.array([r.column for r in refused], pa.string()),
            pa.array(np.full(n, self.batch_id, dtype=np.int64)),
            pa.array(np.full(n, self.partition, dtype=np.int32)),
            pa.array([r.row for r in refused], pa.int64()),
        ]
        table = pa.Table.from_arrays([*picked.columns, *extra], names=[*batch.schema.names, *DEAD_LETTER_COLUMNS])
        if self._out is None:
            self._fs, root = open_directory(self.location, "dead_letter_path")
            self._dir = f"{root}/{self.folder}"
            self._fs.create_dir(self._dir, recursive=True)
            self._tmp = f"{self._dir}/{_TMP_PREFIX}{uuid.uuid4().hex}-{self.file_name}"
            self._stream = self._fs.open_output_stream(self._tmp)
            self._out = pq.ParquetWriter(self._stream, table.schema)
        self._out.write_table(table)
        self.rows += n

    def commit(self) -> str | None:
        """Close and move the file into place; its location (None: no row was refused)."""
        if self._out is None:
            return None
        assert self._fs is not None and self._stream is not None
        self._out.close()
        self._stream.close()
        self._out = None
        self._fs.move(self._tmp, f"{self._dir}/{self.file_name}")
        return f"{self.location}/{self.folder}/{self.file_name}"

    def finish(self, summary: PartitionSummary, *, keep: bool) -> None:
        """The task's end: with ``keep`` (it ends well) the file moved into place and named in ``summary``,
        else dropped. Refused rows that could not be written count as undelivered and fail the batch,
        naming the cause."""
        if not keep or self.error is not None:
            self.discard()
        else:
            try:
                written = self.commit()
            except Exception as exc:
                self.error = exc
                self.discard()
            else:
                if written is not None:
                    summary.dead_letter_files.append(written)
                summary.dead_letter_rows += self.rows
        if keep and self.error is not None:
            summary.failed_rows += self.refused
            summary.errors.append(
                f"partition {self.partition}: {self.refused} invalid rows not written to "
                f"dead_letter_path={self.location!r}: {type(self.error).__name__}: {self.error}"
            )

    def discard(self) -> None:
        """Drop what was written (the task failed or was aborted): nothing is moved into place."""
        if self._out is None:
            return
        assert self._fs is not None and self._stream is not None
        try:
            self._out.close()
            self._stream.close()
            self._fs.delete_file(self._tmp)
        except Exception:  # a hidden _tmp- file left behind is removed when the batch completes
            pass
        self._out = None


def keep_run_files(location: str, folders: Iterable[str], files: Iterable[str]) -> list[str]:
    """Driver, after the batch's tasks ended: remove from the batch's folders every file this run did not
    write (``files``, as the tasks reported them); the files removed."""
    fs, root = open_directory(location.rstrip("/"), "dead_letter_path")
    keep = {f.rsplit("/", 1)[-1] for f in files}
    removed: list[str] = []
    for folder in sorted(set(folders)):
        listing = fs.get_file_info(pafs.FileSelector(f"{root}/{folder}", allow_not_found=True))
        for info in listing:
            if info.type == pafs.FileType.File and info.base_name not in keep:
                fs.delete_file(info.path)
                removed.append(info.path)
    return removed
