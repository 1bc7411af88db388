"""Every ```python block of the README and of docs/*.md, run as a user would paste it.

A page's blocks run in order in one namespace (as in a notebook), in a directory of their own, with
``spark`` the test session's (as in a ``pyspark`` shell) and the page's ``127.0.0.1:9876`` (the
NameServer of ``make local-cluster``) pointing at a local cluster the test starts for the page, and its
relative ``checkpoints/`` under that directory. Then
the test checks what a user would: the messages the page's examples published are in their topics.
Blocks fenced ```py are not run; tests/docs checks that their first line says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from doc_pages import PAGES, RUNNABLE, code_blocks

from spark_rocketmq.local import LocalCluster
from spark_rocketmq.local.timer import TimerConfig
from spark_rocketmq.spark.compat import supports_datasource

pytestmark = pytest.mark.spark

#: The NameServer address the pages' examples use (make local-cluster's).
DOCS_NAMESRV = "127.0.0.1:9876"
#: Pages whose examples need brokers other than make local-cluster's 4.9.8 ones.
CLUSTERS: dict[str, dict[str, Any]] = {
    "timer-messages.md": {"rocketmq_version": "5.3.3", "timer": TimerConfig(recall_message_enable=True)},
}
_DATASOURCE_ROWS = 2 if supports_datasource() else 0
#: What each page's examples leave in each topic, as a user would count it with a consumer.
STORED: dict[str, dict[str, int]] = {
    "README.md": {"Orders": 2},
    "index.md": {"Orders": 1},
    "getting-started.md": {"Orders": 100 + _DATASOURCE_ROWS},
    "exactly-once.md": {"Payments": 1000, "Orders": 1},
    "timer-messages.md": {"Reminders": 0},  # held by the timer wheel for an hour, then recalled
    "producer.md": {"Orders": 1 + 100 + 3 + 100},
    "options.md": {},
    "reading.md": {"Orders": 100},
    "local-cluster.md": {},  # its example starts a cluster of its own
    # sent through a selector, sync and async; one past the hooks; two traced, each with its Pub record
    "extensions.md": {"Orders": 4 + 4 + 1 + 2, "RMQ_SYS_TRACE_TOPIC": 1, "OrdersTrace": 1},
}

RUNNABLE_PAGES = [page for page in PAGES if any(b.language == RUNNABLE for b in code_blocks(page))]


def _wait_for_counts(cluster: LocalCluster, expected: dict[str, int], within_s: float = 15.0) -> dict[str, int]:
    """The topics' stored counts once they equal ``expected``, or as they are at the deadline."""
    deadline = time.monotonic() + within_s
    while True:
        counts = {topic: len(cluster.messages(topic)) for topic in expected}
        if counts == expected or time.monotonic() > deadline:
            return counts
        time.sleep(0.1)  # polling the store until a condition holds, bounded by the deadline


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda p: p.name)
def test_the_pages_examples_run_and_publish(
    page: Path,
    spark: Any,
    make_cluster: Callable[..., LocalCluster],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert page.name in STORED, f"say in STORED what the examples of {page.name} leave in which topic"
    cluster = make_cluster(**CLUSTERS.get(page.name, {}))
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__docs__", "spark": spark}
    try:
        for block in code_blocks(page):
            if block.language != RUNNABLE:
                continue
            if 'format("rocketmq")' in block.code and not supports_datasource():
                continue  # format("rocketmq") needs PySpark 4.1+, as the page says
            code = block.code.replace(DOCS_NAMESRV, cluster.namesrv_addr)
            # Spark resolves a relative checkpoint against its JVM's working directory, not this one
            code = code.replace('"checkpoints/', f'"{tmp_path}/checkpoints/')
            try:
                exec(compile(code, block.where, "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"the example at {block.where} failed: {type(exc).__name__}: {exc}") from exc
        expected = STORED[page.name]
        assert _wait_for_counts(cluster, expected) == expected
    finally:
        for value in list(namespace.values()):
            close = getattr(value, "close", None)
            if type(value).__name__ in ("RocketMQSink", "Producer") and callable(close):
                close()
