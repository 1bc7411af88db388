"""The sink on master local-cluster[2,1,1024]: two executor JVMs, each with its own Python workers.

Each scenario runs in a subprocess (cluster_job.py): a process holds one SparkContext.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

JOB = Path(__file__).with_name("cluster_job.py")


def _run(cluster, topic: str, scenario: str, workdir: Path) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, str(JOB), "--namesrv", cluster.namesrv_addr, "--topic", topic, "--scenario", scenario,
         "--workdir", str(workdir)],
        capture_output=True, text=True, timeout=280, env=env,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 3:
        pytest.skip(json.loads(lines[-1])["error"] if lines else "local-cluster could not start")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(lines[-1])


def test_one_producer_per_executor_python_worker(cluster, tmp_path) -> None:
    cluster.create_topic("ClusterProducers", queues=4)
    out = _run(cluster, "ClusterProducers", "producers", tmp_path)
    assert out["messages"] == 12000
    pids = set()
    for per_batch in out["producers"]:
        # Every Python worker that ran a task made exactly one producer for this configuration,
        # and kept it across tasks and micro-batches.
        assert per_batch and set(per_batch.values()) == {1}
        pids |= set(per_batch)
    assert len(pids) <= 2  # two executors with one core each: one reused worker each
    assert len(cluster.messages("ClusterProducers")) == 12000


def test_killed_executor_tasks_are_retried_and_every_row_arrives(cluster, tmp_path) -> None:
    cluster.create_topic("ClusterKill", queues=4)
    out = _run(cluster, "ClusterKill", "kill", tmp_path)
    assert out["killed"], "the executor was not killed: the scenario did not run"
    assert out["messages"] == 6000  # the report counts the winning attempt of each partition
    stored = cluster.messages("ClusterKill")
    ids_by_body: dict[bytes, set[str]] = {}
    for m in stored:
        ids_by_body.setdefault(m.body, set()).add(m.uniq_key)
    assert set(ids_by_body) == {str(i).encode() for i in range(6000)}
    # Rows sent by the killed attempt and again by the retry carry the same UNIQ_KEY.
    assert all(len(ids) == 1 for ids in ids_by_body.values())
