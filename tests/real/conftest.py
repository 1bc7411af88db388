"""Fixtures of the real-cluster tier: the cluster under test, the kit that runs it, private clusters, topics.

`make test-real` (tests/real/tier.py) starts each kit and runs this folder with ROCKETMQ_NAMESRV_ADDR,
ROCKETMQ_KIT and the kit's RMQ_* variables set. With ROCKETMQ_NAMESRV_ADDR alone (your own cluster),
the tests that read topics back with the kit's Java consumer, or freeze, kill or restart processes, skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from .kit import KIT_ENV, Kit

#: Tests that freeze, kill or restart the shared cluster's processes run after every other test.
DISRUPTIVE = "disruptive"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{DISRUPTIVE}: freezes, kills or restarts the tier's shared cluster")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker(DISRUPTIVE) is not None)
    for item in items:
        item.add_marker(pytest.mark.realcluster)


@pytest.fixture(scope="session")
def real_addr() -> str:
    addr = os.environ.get("ROCKETMQ_NAMESRV_ADDR")
    if not addr:
        pytest.skip("set ROCKETMQ_NAMESRV_ADDR=host:port (or run make test-real) to run the real-cluster tier")
    return addr


@pytest.fixture(scope="session")
def kit(real_addr: str) -> Kit:
    """The kit running the cluster under test (its Java consumer, admin tool and processes)."""
    found = Kit.from_env()
    if found is None:
        pytest.skip(f"needs the cluster run from a RocketMQ kit ({KIT_ENV}); make test-real starts one")
    assert found.namesrv_addr == real_addr, f"{KIT_ENV} runs {found.namesrv_addr}, the tier tests {real_addr}"
    return found


@pytest.fixture
def make_kit(kit: Kit) -> Iterator[Callable[..., Kit]]:
    """make_kit(brokers=("a", "b"), props="", opts="") -> a private cluster of the same kit, removed at teardown."""
    started: list[Kit] = []

    def make(brokers: Iterable[str] = ("a", "b"), **kw: Any) -> Kit:
        shift = int(os.environ.get("RMQ_PRIVATE_SHIFT", "2000"))  # tier.py gives each kit run a range of its own
        private = Kit.launch(kit.folder, brokers, first_shift=shift, heap="-Xms256m -Xmx512m", **kw)
        started.append(private)
        return private

    yield make
    for private in started:
        private.close()


def fresh_topic_name(label: str) -> str:
    return f"SparkRmq_{label}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def real_topic(request: pytest.FixtureRequest, real_addr: str) -> str:
    """A topic name of this test's own, created by the brokers on its first message (autoCreateTopicEnable).

    Tests that need it on both brokers from the start create it with `kit.topic(name)` (mqadmin, ~4 s).
    """
    return fresh_topic_name(request.node.name.split("[")[0].removeprefix("test_")[:40])


@pytest.fixture(scope="session")
def spark(real_addr: str) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from spark_session import local_session

    session = local_session("spark-rocketmq-real-tier")
    yield session
    session.stop()
