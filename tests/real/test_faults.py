"""A streaming query through faults of real processes: a broker frozen and thawed, a broker killed and
restarted, the NameServer killed and restarted. Every row is stored (a request a frozen broker
stores after its answer was given up may be stored twice, under the same UNIQ_KEY), the query stays
alive, and no batch fails.

The faults are injected by the foreachBatch function itself, at the start of chosen micro-batches, so
they land while the query runs, whatever the machine's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spark_rocketmq import RocketMQSink

from .conftest import DISRUPTIVE
from .kit import Kit
from .readback import assert_each_row_delivered
from .test_sink import stream_through, write_json_files

pytestmark = getattr(pytest.mark, DISRUPTIVE)

FILES, ROWS_PER_FILE = 6, 1000
FAULT_FROM, FAULT_UNTIL = 1, 3  # the fault starts with micro-batch 1 and is mended before micro-batch 3
OUTAGE_S = 15.0  # the NameServer's outage


@pytest.fixture
def healthy(kit: Kit) -> Iterator[Kit]:
    """The shared cluster, whole again after the test whatever happened (thawed, every process running)."""
    yield kit
    for name in ("a", "b"):
        if kit.pid(name):
            kit.thaw(name)
    if not kit.whole("a", "b"):
        kit.start("a", "b")  # starts what is not running, and waits until both brokers are registered


def run_through(spark, kit: Kit, real_addr: str, topic: str, tmp_path: Path, start: Callable[[], None],
                mend: Callable[[], None]) -> None:  # fmt: skip
    kit.topic(topic)  # on both brokers, so that the fault takes half the queues away
    names = write_json_files(tmp_path / "in", files=FILES, rows_per_file=ROWS_PER_FILE)
    sink = RocketMQSink(namesrv_addr=real_addr, topic=topic, group="spark_rocketmq_real_faults")
    seen: list[int] = []

    def publish(df, batch_id: int) -> None:
        if batch_id == FAULT_FROM:
            start()
        elif batch_id == FAULT_UNTIL:
            mend()
        seen.append(batch_id)
        sink(df, batch_id)

    stream_through(spark, tmp_path, publish, sink)
    assert seen == list(range(FILES))  # no batch failed and was replayed
    assert sink.totals["failed_rows"] == 0 and sink.totals["rows"] == len(names)
    assert_each_row_delivered(kit.dump(topic, at_least=len(names)), names)


def test_broker_frozen_then_thawed(spark, healthy: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    run_through(spark, healthy, real_addr, real_topic, tmp_path, lambda: healthy.freeze("b"), lambda: healthy.thaw("b"))


def test_broker_killed_then_restarted(spark, healthy: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    run_through(
        spark, healthy, real_addr, real_topic, tmp_path, lambda: healthy.kill("b"), lambda: healthy.start("a", "b")
    )


def test_namesrv_killed_then_restarted(spark, healthy: Kit, real_addr: str, real_topic: str, tmp_path: Path) -> None:
    """The NameServer is down for OUTAGE_S from the start of micro-batch 1, whatever the query does: a
    Python worker whose producer has no route yet must ride over the outage within the delivery deadline
    (the restart cannot wait for a later micro-batch, which waits for this one)."""
    restart = threading.Timer(OUTAGE_S, healthy.start, args=("a", "b"))

    def kill() -> None:
        healthy.kill("namesrv")
        restart.start()

    try:
        run_through(spark, healthy, real_addr, real_topic, tmp_path, kill, restart.join)
    finally:
        if restart.is_alive():
            restart.join()
