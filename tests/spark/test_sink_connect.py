"""The sink and the reader under Spark Connect: SparkSession.builder.remote("local[2]") (a local Connect server).

Databricks shared and serverless compute run PySpark this way. The scenarios run in one subprocess
(connect_job.py): a Connect server cannot start in a process that already holds the suite's
classic session. Select them with ``pytest -m connect`` (``make test-connect``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq.local import LocalCluster
from spark_rocketmq.spark.compat import pyspark_version, supports_datasource, version_tuple

pytestmark = [pytest.mark.spark, pytest.mark.connect]

JOB = Path(__file__).with_name("connect_job.py")
ROWS = {"Direct": 500, "Stream": 500, "Format": 600}


def _connect_missing() -> str | None:
    if version_tuple(pyspark_version()) < (4, 0):
        return f"PySpark {pyspark_version()} ships no Spark Connect server to start locally"
    try:
        import grpc  # noqa: F401
        import pyspark.sql.connect.session  # noqa: F401
    except ImportError as exc:
        return f"pyspark's connect extra is not installed: {exc}"
    if not supports_datasource():
        return f'format("rocketmq") needs PySpark 4.1+; this is PySpark {pyspark_version()}'
    return None


@pytest.fixture(scope="module")
def connect_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], str, LocalCluster]]:
    """One Connect session runs every scenario against a cluster of this module's own."""
    reason = _connect_missing()
    if reason:
        pytest.skip(reason)
    cluster = LocalCluster(brokers=2, namesrvs=1).start()
    try:
        for suffix in ROWS:
            cluster.create_topic("Conn" + suffix, queues=4)
        workdir = tmp_path_factory.mktemp("connect")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_TESTING="1")
        env.pop("SPARK_REMOTE", None)
        proc = subprocess.run(
            [
                sys.executable,
                str(JOB),
                "--namesrv",
                cluster.namesrv_addr,
                "--prefix",
                "Conn",
                "--workdir",
                str(workdir),
            ],
            capture_output=True,
            text=True,
            timeout=280,
            env=env,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        assert proc.returncode == 0 and lines, proc.stderr[-6000:]
        yield json.loads(lines[-1]), proc.stderr, cluster
    finally:
        cluster.stop()


def _delivered_once(cluster: LocalCluster, topic: str, rows: int) -> None:
    stored = cluster.messages(topic)
    assert sorted(int(m.body) for m in stored) == list(range(rows))
    assert len({m.uniq_key for m in stored}) == rows


def test_the_session_is_a_connect_session(connect_run) -> None:
    out, _stderr, _cluster = connect_run
    assert out["is_connect"]


def test_direct_sink_call_returns_and_keeps_the_report(connect_run) -> None:
    out, stderr, cluster = connect_run
    direct = out["direct"]
    assert direct["returned_messages"] == ROWS["Direct"]
    assert direct["last_report"]["messages"] == ROWS["Direct"]
    assert direct["last_report"]["failed_rows"] == 0
    assert direct["line"].startswith("RocketMQ batch 0: 500 rows -> 500 messages")
    assert direct["line"] in stderr  # the client's log (its logging handler writes to stderr)
    _delivered_once(cluster, "ConnDirect", ROWS["Direct"])


def test_foreach_batch_stream_delivers_every_row_once(connect_run) -> None:
    out, stderr, cluster = connect_run
    stream = out["stream"]
    assert stream["finished"] and stream["error"] is None
    _delivered_once(cluster, "ConnStream", ROWS["Stream"])
    # Connect runs the foreachBatch function in the server's Python worker: there the sink kept
    # each batch's report in last_report and logged it to the driver's log (this process's stderr).
    reports = stream["reports"]
    assert [(r["last_report"]["batch_id"], r["last_report"]["messages"]) for r in reports] == [(0, 250), (1, 250)]
    for r in reports:
        assert r["line"] in stderr
    # The client's copy of the sink is never called: Connect pickles the function to the server.
    assert stream["client_last_report"] is None


def test_format_rocketmq_batch_write_delivers_every_row_once(connect_run) -> None:
    out, stderr, cluster = connect_run
    (report,) = out["format"]["reports"]
    assert (report["messages"], report["partitions"], report["state"]) == (ROWS["Format"], 3, "committed")
    assert "RocketMQ batch -: 600 rows -> 600 messages" in stderr
    _delivered_once(cluster, "ConnFormat", ROWS["Format"])


def test_reads_from_a_connect_client_return_every_message_once(connect_run) -> None:
    out, _stderr, _cluster = connect_run
    read = out["read"]
    assert read["batch_bodies"] == list(range(ROWS["Format"]))
    assert read["stream_bodies"] == list(range(ROWS["Format"]))
    assert read["stream_batches"] >= 3  # maxOffsetsPerTrigger=250: at least three micro-batches for 600
