"""Shared fixtures of the protocol tests: where the golden wire samples live, hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "protocol",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "protocol-ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
#: A long fuzzing run, not for CI: PROTOCOL_HYPOTHESIS_PROFILE=protocol-deep pytest tests/protocol
settings.register_profile(
    "protocol-deep",
    max_examples=20_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("PROTOCOL_HYPOTHESIS_PROFILE") or ("protocol-ci" if os.environ.get("CI") else "protocol")
)

WIRE_SAMPLES_ENV = "ROCKETMQ_WIRE_SAMPLES"


def find_wire_samples() -> Path | None:
    """The golden frames: $ROCKETMQ_WIRE_SAMPLES, else shared/wire-samples beside the repository."""
    explicit = os.environ.get(WIRE_SAMPLES_ENV)
    if explicit:
        path = Path(explicit)
        return path if path.is_dir() else None
    repo = Path(__file__).resolve().parents[2]
    for candidate in (repo.parent / "shared" / "wire-samples", repo / "shared" / "wire-samples"):
        if candidate.is_dir():
            return candidate
    return None


WIRE_SAMPLES = find_wire_samples()
SAMPLE_FILES = sorted(p.name for p in WIRE_SAMPLES.glob("*.bin")) if WIRE_SAMPLES else []
MISSING_REASON = (
    f"golden wire samples not found: set {WIRE_SAMPLES_ENV} to the wire-samples directory "
    "or clone shared/ beside the repository"
)


@pytest.fixture(scope="session")
def wire_samples() -> Path:
    if WIRE_SAMPLES is None:
        pytest.skip(MISSING_REASON)
    return WIRE_SAMPLES


@pytest.fixture(scope="session")
def sample_bytes(wire_samples: Path):
    """sample_bytes("03-send-v2-request.bin") -> the frame's bytes (skips if that file is missing)."""
    cache: dict[str, bytes] = {}

    def read(name: str) -> bytes:
        if name not in cache:
            path = wire_samples / name
            if not path.is_file():
                pytest.skip(f"wire sample {name} is missing from {wire_samples}")
            cache[name] = path.read_bytes()
        return cache[name]

    return read


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking `sample_name` run once per golden .bin file."""
    if "sample_name" in metafunc.fixturenames:
        if SAMPLE_FILES:
            metafunc.parametrize("sample_name", SAMPLE_FILES)
        else:
            metafunc.parametrize("sample_name", [pytest.param("<none>", marks=pytest.mark.skip(reason=MISSING_REASON))])
