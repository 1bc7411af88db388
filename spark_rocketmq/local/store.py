"""A broker's message store: one append-only commit log in RocketMQ's stored-message layout, and a
consume-queue index per (topic, queue) rebuilt from it at start, so a restarted broker keeps every
message and continues the queue offsets."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from ..protocol.stored import StoredMessage, decode_stored_message, encode_stored_records, index_stored_records
from .consume_queue import ConsumeQueue

COMMIT_LOG = "commitlog"
TOPICS_FILE = "topics.json"
#: Each queue's min offset once older messages were deleted ({"topic@queueId": offset}).
RETENTION_FILE = "retention.json"

#: Makes the records to append from (first queue offset, commit-log offset of the first record):
#: (the records back to back, the size of each).
BuildRecords = Callable[[int, int], tuple[bytes, list[int]]]


@dataclass(frozen=True)
class LocalMessage(StoredMessage):
    """A stored message as read back from a local broker."""

    broker_name: str = ""


class MessageStore:
    """Commit log + consume queues of one broker. Thread-safe; appends are serialised."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path = self.directory / COMMIT_LOG
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.new_message = threading.Condition(self._lock)
        self.commit_log_offset = self._recover()

    def _recover(self) -> int:
        """Rebuild the consume queues; cut a torn last record (a crash mid-write)."""
        with open(self._path, "rb") as fh:
            data = fh.read()
        records, end = index_stored_records(data)
        view = memoryview(data)
        for pos, size, queue_id, topic in records:
            self.queues.setdefault((topic, queue_id), ConsumeQueue()).add(pos, view[pos : pos + size])
        for (topic, queue_id), min_offset in load_retention(self.directory).items():
            cq = self.queues.get((topic, queue_id))
            if cq is not None:
                cq.min_offset = min(min_offset, len(cq))
        if end != len(data):
            os.ftruncate(self._fd, end)
        return end

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return len(cq) if cq is not None else 0

    def append(self, topic: str, queue_id: int, build: BuildRecords) -> tuple[int, list[int]]:
        """Append the records `build(first_queue_offset, first_commit_log_offset)` makes; nothing
        is appended when build raises.

        Returns (first queue offset, commit-log offsets of the records)."""
        with self._lock:
            key = (topic, queue_id)
            cq = self.queues.get(key)
            first = len(cq) if cq is not None else 0
            base = self.commit_log_offset
            data, sizes = build(first, base)
            positions = list(accumulate(sizes, initial=base))
            end = positions.pop()
            _write_all(self._fd, data)
            if cq is None:
                cq = self.queues[key] = ConsumeQueue()
            view = memoryview(data)
            for position, size in zip(positions, sizes, strict=True):
                at = position - base
                cq.add(position, view[at : at + size])
            self.commit_log_offset = end
            self.new_message.notify_all()
        return first, positions

    def append_messages(
        self,
        topic: str,
        queue_id: int,
        items: list[tuple[int, bytes, bytes]],
        *,
        sys_flag: int,
        born_timestamp: int,
        born_host: tuple[str, int],
        store_host: tuple[str, int],
        reconsume_times: int,
        store_timestamp: int | None = None,
        extra_properties: bytes = b"",
    ) -> tuple[int, list[int]]:
        """Append one record per (flag, body, encoded properties) in the stored-message layout
        (protocol.stored.encode_stored_records); the store time is taken under the store's lock
        unless given. Returns (first queue offset, commit-log offsets of the records)."""

        def build(first_offset: int, position: int) -> tuple[bytes, list[int]]:
            return encode_stored_records(
                items,
                topic=topic,
                queue_id=queue_id,
                first_queue_offset=first_offset,
                commit_log_offset=position,
                sys_flag=sys_flag,
                born_timestamp=born_timestamp,
                born_host=born_host,
                store_timestamp=int(time.time() * 1000) if store_timestamp is None else store_timestamp,
                store_host=store_host,
                reconsume_times=reconsume_times,
                extra_properties=extra_properties,
            )

        return self.append(topic, queue_id, build)

    def read(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[bytes]:
        """The records from queue offset `offset` (not below the min offset) on, at most max_count."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return []
        with self._lock:
            end = min(len(cq), offset + max_count)
            spans = [(cq.positions[i], cq.sizes[i]) for i in range(max(offset, cq.min_offset), end)]
        return [os.pread(self._fd, size, pos) for pos, size in spans]

    def units(self, topic: str, queue_id: int, offset: int, count: int) -> list[tuple[int, int, int]]:
        """(commit-log position, size, tags hash code) of at most `count` units from queue offset `offset`."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return []
        with self._lock:
            end = min(len(cq), offset + count)
            return list(zip(cq.positions[offset:end], cq.sizes[offset:end], cq.tags_codes[offset:end], strict=True))

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int, version: str, upper: bool = False) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP's answer for one queue (ConsumeQueue.offset_by_time); 0 for no queue."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return 0
        with self._lock:
            return cq.offset_by_time(timestamp, version, upper)

    def read_units(self, units: list[tuple[int, int]]) -> list[bytes]:
        """The records at these (commit-log position, size) units."""
        return [os.pread(self._fd, size, pos) for pos, size in units]

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.next_queue_offset(topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def delete_before(self, topic: str, queue_id: int, offset: int) -> int:
        """Delete the queue's messages below queue offset `offset` (at most all of them), as a broker's
        retention deletes expired commit-log files: its min offset moves there, for good. Returns the min offset."""
        with self._lock:
            cq = self.queues.get((topic, queue_id))
            if cq is None:
                return 0
            cq.min_offset = max(cq.min_offset, min(offset, len(cq)))
            retention = {key: q.min_offset for key, q in self.queues.items() if q.min_offset}
            save_retention(self.directory, retention)
            return cq.min_offset

    def messages(self, topic: str) -> Iterator[StoredMessage]:
        for (t, qid), cq in sorted(self.queues.items()):
            if t == topic:
                for rec in self.read(t, qid, 0, len(cq)):
                    yield decode_stored_message(rec)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    # -- topic configs -----------------------------------------------------------------------------
    def load_topics(self) -> dict[str, dict[str, object]]:
        path = self.directory / TOPICS_FILE
        if not path.exists():
            return {}
        topics: dict[str, dict[str, object]] = json.loads(path.read_text())  # as save_topics wrote it
        return topics

    def save_topics(self, topics: dict[str, dict[str, object]]) -> None:
        path = self.directory / TOPICS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(topics, sort_keys=True))
        tmp.replace(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def load_retention(directory: Path) -> dict[tuple[str, int], int]:
    """The min offsets delete_before left in a store directory."""
    path = directory / RETENTION_FILE
    if not path.exists():
        return {}
    saved: dict[str, int] = json.loads(path.read_text())
    return {(key.rpartition("@")[0], int(key.rpartition("@")[2])): offset for key, offset in saved.items()}


def save_retention(directory: Path, min_offsets: dict[tuple[str, int], int]) -> None:
    path = directory / RETENTION_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({f"{t}@{q}": o for (t, q), o in sorted(min_offsets.items())}))
    tmp.replace(path)


def read_store(store_dir: str | os.PathLike[str], topic: str) -> list[LocalMessage]:
    """Messages of `topic` in every broker store under store_dir (<store_dir>/<broker name>/commitlog),
    ordered by (broker, queue, queue offset), without those retention deleted. Works while the cluster
    runs, from any process."""
    out: list[LocalMessage] = []
    for log_path in sorted(Path(store_dir).glob(f"*/{COMMIT_LOG}")):
        broker = log_path.parent.name
        min_offsets = load_retention(log_path.parent)
        out.extend(
            m
            for m in _decode_topic(log_path.read_bytes(), topic, broker)
            if m.queue_offset >= min_offsets.get((topic, m.queue_id), 0)
        )
    out.sort(key=lambda m: (m.broker_name, m.queue_id, m.queue_offset))
    return out


def _decode_topic(data: bytes, topic: str, broker: str) -> Iterable[LocalMessage]:
    records, _end = index_stored_records(data)
    for pos, size, _queue_id, record_topic in records:
        if record_topic == topic:
            yield as_local(decode_stored_message(data[pos : pos + size]), broker)


def as_local(msg: StoredMessage, broker_name: str) -> LocalMessage:
    return LocalMessage(**{**msg.__dict__, "broker_name": broker_name})
