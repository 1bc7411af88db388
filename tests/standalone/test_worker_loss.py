"""A worker lost mid-job (SIGKILL of the Worker, its executor and their Python): Spark reschedules on the
other worker and publish_batch.py still stores every row, exactly once with --exactly-once."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from standalone_cluster import JOBS, shipped_submit, write_orders

from .test_submit import stored_order_ids

pytestmark = [pytest.mark.standalone, pytest.mark.spark, pytest.mark.timeout(900)]


def unresolved_halves(cluster) -> int:
    return sum(len(b.transactions.unresolved()) for b in cluster.brokers.values())


def test_worker_killed_while_its_executor_publishes(
    standalone, dist, bare_python, make_cluster, tmp_path: Path
) -> None:
    cluster = make_cluster(transaction_check_interval_ms=500, transaction_timeout_ms=500)
    topic = "StandaloneWorkerLoss"
    cluster.create_topic(topic, queues=4)
    ids = write_orders(tmp_path / "orders", files=4, rows_per_file=5000)
    args = [
        "--namesrv-addr", cluster.namesrv_addr, "--topic", topic, "--input", str(tmp_path / "orders"),
        "--partitions", "4", "--exactly-once", "--transaction-log-dir", str(tmp_path / "txlog"),
    ]  # fmt: skip
    cmd, env = shipped_submit(standalone, dist, bare_python, "py-files", JOBS / "publish_batch.py", args)
    out, err = (tmp_path / "submit.out").open("w+"), (tmp_path / "submit.err").open("w+")
    job = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=out, stderr=err, text=True)
    try:
        # Worker 1's executor runs Python only for the sink's tasks: once it does and halves are being
        # stored, the worker is lost with everything it started.
        deadline = time.monotonic() + 600
        while not (standalone.python_workers(1) and unresolved_halves(cluster) > 0):
            assert job.poll() is None, "the job ended before worker 1 published anything"
            assert time.monotonic() < deadline, "worker 1 never ran a publishing task"
            time.sleep(0.02)  # watching /proc and the brokers for the moment to kill
        assert standalone.executor_pids(1), "worker 1 has no executor"
        standalone.kill_worker(1)
        assert job.poll() is None, "the job ended before the worker was lost"
        assert job.wait(timeout=600) == 0, (tmp_path / "submit.err").read_text()[-6000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    log = (tmp_path / "submit.err").read_text() + (tmp_path / "submit.out").read_text()
    assert "ExecutorLostFailure" in log or "Lost executor" in log, log[-4000:]
    # Exactly once: each row visible once (the killed attempt's halves are never committed).
    assert stored_order_ids(cluster, topic) == ids
    print(f"worker loss: {len(ids)} rows stored once, {unresolved_halves(cluster)} halves of lost attempts unresolved")
