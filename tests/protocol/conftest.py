"""Fixtures of the protocol tests: the golden wire samples (tests/protocol/data/wire-samples), hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from wire_samples import DIRECTORY, WIRE_SAMPLES_ENV, read_sample, sample_names

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

WIRE_SAMPLES = DIRECTORY
SAMPLE_FILES = sample_names()
MISSING = (
    f"golden wire samples missing: no .bin frames in {WIRE_SAMPLES} "
    f"(they ship in tests/protocol/data/wire-samples; {WIRE_SAMPLES_ENV} overrides the location)"
)


@pytest.fixture(scope="session")
def wire_samples() -> Path:
    if not SAMPLE_FILES:
        pytest.fail(MISSING, pytrace=False)
    return WIRE_SAMPLES


@pytest.fixture(scope="session")
def sample_bytes(wire_samples: Path):
    """sample_bytes("03-send-v2-request.bin") -> the frame's bytes (the test fails if that file is missing)."""
    cache: dict[str, bytes] = {}

    def read(name: str) -> bytes:
        if name not in cache:
            raw = read_sample(name)
            if raw is None:
                pytest.fail(f"wire sample {name} is missing from {wire_samples}", pytrace=False)
            cache[name] = raw
        return cache[name]

    return read


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking `sample_name` run once per golden .bin file (and fail when there is none)."""
    if "sample_name" in metafunc.fixturenames:
        metafunc.parametrize("sample_name", SAMPLE_FILES or ["<no wire samples>"])
