"""The golden frames ship with the repository, and a clone without them fails instead of skipping."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wire_samples import VENDORED as VENDORED_WIRE_SAMPLES
from wire_samples import WIRE_SAMPLES_ENV, read_sample, sample_names


def test_the_golden_frames_and_their_readmes_are_in_the_repository() -> None:
    frames = sample_names()
    assert len(frames) == 44
    oversize = read_sample("09-send-oversize-request.bin")  # kept gzipped: a 4 MiB frame
    assert oversize is not None and len(oversize) == 4194668
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
