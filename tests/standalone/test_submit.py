"""spark-submit to a standalone cluster whose executors' Python has neither spark_rocketmq nor tenacity.

The package reaches the executors as `make dist` ships it: (a) the zip on --py-files (the driver, too,
runs that bare Python and imports the package from the zip), (b) the site-packages tar.gz on --archives
unpacked as `env`, with spark.executorEnv.PYTHONPATH=env (the driver runs a Python that has it
installed, as an edge node does). Every row is read back from the local RocketMQ cluster.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from standalone_cluster import JOBS, SHIPPING, shipped_submit, write_orders

# Each spark-submit starts a driver and two executor JVMs: minutes on a busy 2-core machine.
pytestmark = [pytest.mark.standalone, pytest.mark.spark, pytest.mark.timeout(900)]

APP = Path(__file__).with_name("foreach_batch_app.py")


def submit(standalone, dist, bare_python, shipping, app, args, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd, env = shipped_submit(standalone, dist, bare_python, shipping, app, args)
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    return proc


def stored_order_ids(cluster, topic: str) -> list[int]:
    return sorted(json.loads(m.body)["order_id"] for m in cluster.messages(topic))


@pytest.mark.parametrize("shipping", SHIPPING)
def test_publish_batch_job(standalone, dist, bare_python, local_cluster, shipping: str, tmp_path: Path) -> None:
    topic = f"StandaloneBatch_{shipping.replace('-', '_')}"
    cluster = local_cluster
    cluster.create_topic(topic, queues=4)
    ids = write_orders(tmp_path / "orders", files=4, rows_per_file=5000)  # the 20,000 rows
    args = ["--namesrv-addr", cluster.namesrv_addr, "--topic", topic, "--input", str(tmp_path / "orders")]
    started = time.monotonic()
    proc = submit(standalone, dist, bare_python, shipping, JOBS / "publish_batch.py", args, tmp_path)
    seconds = time.monotonic() - started
    assert stored_order_ids(cluster, topic) == ids  # every row once
    # sized for its input: 20,000 rows (about 1 MB of JSON) are one task, not spark.sql.shuffle.partitions (200)
    partitions = re.search(r"over (\d+) partitions", proc.stdout + proc.stderr)
    assert partitions and int(partitions.group(1)) == 1, proc.stdout[-2000:]
    print(f"publish_batch.py, {len(ids)} rows, shipped by {shipping}: {seconds:.1f} s spark-submit to exit")


@pytest.mark.parametrize("shipping", SHIPPING)
def test_publish_stream_job(standalone, dist, bare_python, local_cluster, shipping: str, tmp_path: Path) -> None:
    topic = f"StandaloneStream_{shipping.replace('-', '_')}"
    cluster = local_cluster
    cluster.create_topic(topic, queues=4)
    ids = write_orders(tmp_path / "in", files=3, rows_per_file=1000)
    args = [
        "--namesrv-addr", cluster.namesrv_addr, "--topic", topic, "--input", str(tmp_path / "in"),
        "--checkpoint", str(tmp_path / "ck"), "--available-now", "--rows-per-batch", "1",
    ]  # fmt: skip
    proc = submit(standalone, dist, bare_python, shipping, JOBS / "publish_stream.py", args, tmp_path)
    assert "3 micro-batches, 3000 rows, 3000 messages published" in proc.stdout
    assert stored_order_ids(cluster, topic) == ids


@pytest.mark.parametrize("shipping", SHIPPING)
def test_foreach_batch_app(standalone, dist, bare_python, local_cluster, shipping: str, tmp_path: Path) -> None:
    topic = f"StandaloneApp_{shipping.replace('-', '_')}"
    cluster = local_cluster
    cluster.create_topic(topic, queues=4)
    ids = write_orders(tmp_path / "in", files=2, rows_per_file=2000)
    args = [cluster.namesrv_addr, topic, str(tmp_path / "in"), str(tmp_path / "ck")]
    proc = submit(standalone, dist, bare_python, shipping, APP, args, tmp_path)
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert json.loads(line)["rows"] == len(ids)
    stored = cluster.messages(topic)
    assert stored_order_ids(cluster, topic) == ids
    assert [m.keys for m in stored if json.loads(m.body)["order_id"] == 7] == [["order-7"]]
