"""The golden frames ship with the repository, and a clone without them fails instead of skipping."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

VENDORED_WIRE_SAMPLES = Path(__file__).resolve().parent / "data" / "wire-samples"
WIRE_SAMPLES_ENV = "ROCKETMQ_WIRE_SAMPLES"


def test_the_golden_frames_and_their_readmes_are_in_the_repository() -> None:
    frames = sorted(p.name for p in VENDORED_WIRE_SAMPLES.glob("*.bin"))
    assert len(frames) == 44
    assert {n.rsplit("-", 1)[-1] for n in frames} == {"request.bin", "response.bin"}
    for readme in ("README.md", "README-set2.md"):
        assert (VENDORED_WIRE_SAMPLES / readme).is_file()
    listed = (VENDORED_WIRE_SAMPLES / "README.md").read_text() + (VENDORED_WIRE_SAMPLES / "README-set2.md").read_text()
    assert [n for n in frames if n not in listed] == []


def test_golden_tests_fail_when_the_frames_are_missing(tmp_path: Path) -> None:
    env = dict(os.environ, **{WIRE_SAMPLES_ENV: str(tmp_path)})
    test_file = Path(__file__).with_name("test_golden_frames.py")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file), "-k", "layout"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "golden wire samples missing" in out
    assert "skipped" not in out
