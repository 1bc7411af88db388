"""The golden frames captured from a real RocketMQ 4.9.8 (tests/protocol/data/wire-samples, with the
capture's README files). A frame too large to keep as it is (the 4 MiB oversize send) is stored gzipped
as <name>.bin.gz and read back as <name>.bin. ROCKETMQ_WIRE_SAMPLES points at another capture."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

WIRE_SAMPLES_ENV = "ROCKETMQ_WIRE_SAMPLES"
VENDORED = Path(__file__).resolve().parent / "protocol" / "data" / "wire-samples"
DIRECTORY = Path(os.environ.get(WIRE_SAMPLES_ENV) or VENDORED)


def sample_names() -> list[str]:
    """Every frame's name (``*.bin``; a gzipped one by its plain name); [] when the folder is missing."""
    if not DIRECTORY.is_dir():
        return []
    names = {p.name for p in DIRECTORY.glob("*.bin")} | {p.name[: -len(".gz")] for p in DIRECTORY.glob("*.bin.gz")}
    return sorted(names)


def read_sample(name: str) -> bytes | None:
    """The frame's bytes, or None when it is missing."""
    path = DIRECTORY / name
    if path.is_file():
        return path.read_bytes()
    packed = DIRECTORY / f"{name}.gz"
    if packed.is_file():
        return gzip.decompress(packed.read_bytes())
    return None
