"""Consumer groups and their committed offsets, kept in the broker's store directory as a real broker keeps
config/subscriptionGroup.json and config/consumerOffset.json, so that a restarted broker still has them."""

from __future__ import annotations

import json
import threading
from pathlib import Path

OFFSETS_FILE = "consumerOffset.json"
GROUPS_FILE = "subscriptionGroup.json"


class ConsumerOffsets:
    """The subscription groups a broker knows (created by a pull or a heartbeat, as autoCreateSubscriptionGroup
    does) and each group's committed offset per (topic, queue). Thread-safe; every change is written at once."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._groups: set[str] = set()
        self._offsets: dict[tuple[str, str, int], int] = {}
        groups_path, offsets_path = directory / GROUPS_FILE, directory / OFFSETS_FILE
        if groups_path.exists():
            self._groups = set(json.loads(groups_path.read_text())["subscriptionGroupTable"])
        if offsets_path.exists():
            table: dict[str, dict[str, int]] = json.loads(offsets_path.read_text())["offsetTable"]
            for key, queues in table.items():
                topic, _, group = key.rpartition("@")
                self._offsets.update({(group, topic, int(q)): offset for q, offset in queues.items()})

    def has_group(self, group: str) -> bool:
        with self._lock:
            return group in self._groups

    def add_group(self, group: str) -> None:
        with self._lock:
            if group in self._groups:
                return
            self._groups.add(group)
            _write(self._directory / GROUPS_FILE, {"subscriptionGroupTable": sorted(self._groups)})

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of the queue, None when it has none."""
        with self._lock:
            return self._offsets.get((group, topic, queue_id))

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self._offsets[(group, topic, queue_id)] = offset
            table: dict[str, dict[str, int]] = {}
            for (g, t, q), committed in sorted(self._offsets.items()):
                table.setdefault(f"{t}@{g}", {})[str(q)] = committed
            _write(self._directory / OFFSETS_FILE, {"offsetTable": table})


def _write(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)
