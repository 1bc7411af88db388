"""The ready jobs (jobs/publish_batch.py, jobs/publish_stream.py), run as a user runs them: `python jobs/...`.

Each run is a process of its own (its own Spark application, its own application id), as two runs
of a job are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

JOBS = Path(__file__).resolve().parents[2] / "jobs"
sys.path.insert(0, str(JOBS))

import publish_batch  # noqa: E402


def _write_input(folder: Path, files: int = 3, rows_per_file: int = 200) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for f in range(files):
        part = [{"order_id": f * rows_per_file + i, "status": "new" if i % 2 else "paid"} for i in range(rows_per_file)]
        (folder / f"part-{f}.json").write_text("".join(json.dumps(r) + "\n" for r in part))
        rows += part
    return rows


def _job(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    proc = subprocess.run(
        [sys.executable, str(JOBS / script), "--master", "local[2]", *args],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _ids_by_body(messages) -> dict[bytes, set[str]]:
    out: dict[bytes, set[str]] = {}
    for m in messages:
        out.setdefault(m.body, set()).add(m.uniq_key)
    return out


def test_two_runs_of_publish_batch_publish_identical_message_ids(cluster, tmp_path) -> None:
    topic = "JobBatchRerun"
    cluster.create_topic(topic, queues=4)
    rows = _write_input(tmp_path / "orders")
    args = ("--namesrv-addr", cluster.namesrv_addr, "--topic", topic, "--input", str(tmp_path / "orders"))

    _job("publish_batch.py", *args)
    first = _ids_by_body(cluster.messages(topic))
    _job("publish_batch.py", *args)
    second = _ids_by_body(cluster.messages(topic))

    assert len(first) == len(rows)
    assert set(second) == set(first)
    # Each row stored twice (at least once), both times with one and the same UNIQ_KEY ...
    assert all(len(ids) == 1 for ids in second.values())
    assert sum(1 for m in cluster.messages(topic)) == 2 * len(rows)
    # ... and every row's id its own.
    assert len({next(iter(ids)) for ids in second.values()}) == len(rows)


def test_run_identity_follows_the_input_files_and_settings() -> None:
    job = {"input": "/data/orders", "format": "json"}
    files = [("file:/data/orders/a.json", 10, 1_700_000_000_000)]
    base = publish_batch.run_identity(job, {"topic": "T"}, files, 4)
    assert base == publish_batch.run_identity(dict(job), {"topic": "T"}, list(files), 4)
    assert base != publish_batch.run_identity(job, {"topic": "T"}, [("file:/data/orders/a.json", 11, files[0][2])], 4)
    assert base != publish_batch.run_identity(job, {"topic": "T"}, [(files[0][0], 10, files[0][2] + 1)], 4)
    assert base != publish_batch.run_identity(job, {"topic": "U"}, files, 4)
    assert base != publish_batch.run_identity(job, {"topic": "T"}, files, 8)
    assert base != publish_batch.run_identity({**job, "format": "csv"}, {"topic": "T"}, files, 4)


def test_id_time_is_the_newest_file_and_never_in_the_future() -> None:
    files = [("a", 1, 1_000), ("b", 1, 5_000)]
    assert publish_batch.id_time_ms(files, now_ms=9_000) == 5_000
    assert publish_batch.id_time_ms(files, now_ms=3_000) == 3_000
    assert publish_batch.id_time_ms([], now_ms=3_000) == 3_000


def test_publish_batch_sizes_its_tasks_by_input_bytes() -> None:
    two_mb = [("file:/in/a.json", 1_500_000, 1), ("file:/in/b.json", 500_000, 2)]
    assert publish_batch.publishing_tasks({}, two_mb) == 1  # not spark.sql.shuffle.partitions (200) tiny tasks
    assert publish_batch.publishing_tasks({}, [("file:/in/big", 10 * 1024**3, 1)]) == 160  # 64m each
    assert publish_batch.publishing_tasks({"bytes_per_task": "512k"}, two_mb) == 4
    assert publish_batch.publishing_tasks({"bytes_per_task": 1_000_000}, two_mb) == 2
    assert publish_batch.publishing_tasks({"partitions": 7}, two_mb) == 7  # --partitions wins
    assert publish_batch.publishing_tasks({}, []) == 1


def test_bytes_per_task_takes_spark_style_sizes_and_names_a_bad_one() -> None:
    from jobconf import parse_size

    assert [parse_size(t) for t in ("64m", "64MiB", "512k", "1g", "100")] == [
        64 << 20,
        64 << 20,
        512 << 10,
        1 << 30,
        100,
    ]
    for bad in ("0", "-5m", "64 gigs", ""):
        with pytest.raises(SystemExit, match=r"--bytes-per-task .*expected a positive size such as 64m"):
            parse_size(bad)


def test_publish_stream_job_publishes_every_file_row_once(cluster, tmp_path) -> None:
    topic = "JobStream"
    cluster.create_topic(topic, queues=4)
    rows = _write_input(tmp_path / "in", files=2, rows_per_file=150)
    proc = _job(
        "publish_stream.py",
        "--namesrv-addr", cluster.namesrv_addr, "--topic", topic, "--input", str(tmp_path / "in"),
        "--checkpoint", str(tmp_path / "ck"), "--available-now",
    )  # fmt: skip
    assert "300 rows, 300 messages published" in proc.stdout
    bodies = sorted(json.loads(m.body)["order_id"] for m in cluster.messages(topic))
    assert bodies == sorted(r["order_id"] for r in rows)


def test_publish_stream_job_exactly_once_flag(new_cluster, tmp_path) -> None:
    cluster = new_cluster(transaction_check_interval_ms=500, transaction_timeout_ms=500)
    topic = "JobStreamOnce"
    cluster.create_topic(topic, queues=4)
    rows = _write_input(tmp_path / "in", files=2, rows_per_file=100)
    log_dir = tmp_path / "txlog"
    proc = _job(
        "publish_stream.py",
        "--namesrv-addr", cluster.namesrv_addr, "--topic", topic, "--input", str(tmp_path / "in"),
        "--checkpoint", str(tmp_path / "ck"), "--available-now", "--rows-per-batch", "1",
        "--exactly-once", "--transaction-log-dir", str(log_dir),
    )  # fmt: skip
    assert "200 rows, 200 messages published" in proc.stdout
    bodies = sorted(json.loads(m.body)["order_id"] for m in cluster.messages(topic))
    assert bodies == sorted(r["order_id"] for r in rows)
    (query_folder,) = [p for p in log_dir.iterdir() if p.is_dir()]
    assert sorted(p.name for p in query_folder.glob("batch-*.committed.json")) == [
        "batch-0.committed.json",
        "batch-1.committed.json",
    ]
    assert sum(len(b.transactions.unresolved()) for b in cluster.brokers.values()) == 0


def test_relay_republishes_a_topic_exactly_once_across_two_runs(cluster, tmp_path) -> None:
    """jobs/relay.py: readStream.format("rocketmq") -> SQL -> RocketMQSink(exactly_once), twice on one checkpoint."""
    from spark_rocketmq import Message, Producer

    source, dest = "JobRelaySource", "JobRelayDest"
    cluster.create_topic(source, queues=4)
    cluster.create_topic(dest, queues=4)

    def publish(first: int, n: int) -> None:
        with Producer(namesrv_addr=cluster.namesrv_addr, group="relay-input") as producer:
            for i in range(first, first + n):
                producer.send(Message(source, f"order-{i}".encode(), tags="paid" if i % 2 else "new", keys=f"k{i}"))

    conf = tmp_path / "relay.toml"
    conf.write_text(
        f'[source]\ntopic = "{source}"\nstartingOffsets = "earliest"\n\n'
        f'[rocketmq]\nnamesrv_addr = "{cluster.namesrv_addr}"\ntopic = "{dest}"\n'
        f'delivery_guarantee = "exactly_once"\ntransaction_log_dir = "{tmp_path / "txlog"}"\n\n'
        f'[job]\ncheckpoint = "{tmp_path / "checkpoint"}"\navailable_now = true\n'
        "sql = \"SELECT body, keys, tags FROM messages WHERE tags = 'paid'\"\n"
    )
    publish(0, 40)
    first = _job("relay.py", "--conf", str(conf))
    publish(40, 20)
    second = _job("relay.py", "--conf", str(conf))
    assert "relay:" in first.stdout and "relay:" in second.stdout
    stored = cluster.messages(dest)
    bodies = sorted(m.body.decode() for m in stored)
    assert bodies == sorted(f"order-{i}" for i in range(60) if i % 2)  # the paid ones, each once
    assert {m.tags for m in stored} == {"paid"}
    assert {tuple(m.keys) for m in stored} == {(f"k{i}",) for i in range(60) if i % 2}
