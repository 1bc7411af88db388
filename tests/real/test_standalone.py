"""jobs/publish_batch.py spark-submitted to a Spark standalone cluster against a real RocketMQ.

The executors' Python has neither spark_rocketmq nor tenacity: the package reaches them (and the
driver) as the --py-files zip of `make dist`. Read back by the kit's Java consumer. The fixtures
(dist, bare_python, standalone) are tests/standalone_cluster.py's, imported by tests/real/conftest.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from standalone_cluster import JOBS, shipped_submit, write_orders

from .conftest import ONCE
from .kit import Kit

# Building the dist and starting a master, two workers and the job's JVMs: minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)


@getattr(pytest.mark, ONCE)(4)  # against the 4.9.8 kit: the 5.x one runs more of the heavy cases
def test_publish_batch_job_shipped_as_py_files_zip(
    standalone, dist, bare_python, kit: Kit, real_addr: str, real_topic: str, tmp_path: Path
) -> None:
    ids = write_orders(tmp_path / "orders", files=4, rows_per_file=1000)
    args = ["--namesrv-addr", real_addr, "--topic", real_topic, "--input", str(tmp_path / "orders")]
    cmd, env = shipped_submit(standalone, dist, bare_python, "py-files", JOBS / "publish_batch.py", args)
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    stored = kit.dump(real_topic, at_least=len(ids))
    # each row once: as many stored messages as rows, every body and every UNIQ_KEY distinct
    assert len(stored) == len(ids) == len({m["bodySha256"] for m in stored}) == len({m["uniq"] for m in stored})
