"""Shared fixtures: local RocketMQ clusters on free loopback ports, stopped by the test that started them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_rocketmq.local import LocalCluster

#: The real-cluster tier (tests/real) runs against a real RocketMQ: `make test-real`, or ROCKETMQ_NAMESRV_ADDR set.
collect_ignore = [] if os.environ.get("ROCKETMQ_NAMESRV_ADDR") else ["real"]

#: Liveness settings fast enough for tests (brokers re-register every second, silent ones expire in 3 s).
FAST = {"register_interval_s": 1.0, "broker_expiry_s": 3.0, "scan_interval_s": 0.5}


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., LocalCluster]]:
    """make_cluster(brokers=2, namesrvs=1, **kw) -> a started LocalCluster, stopped at teardown."""
    started: list[LocalCluster] = []

    def make(**kw: Any) -> LocalCluster:
        opts = {"brokers": 2, "namesrvs": 1, **FAST, **kw}
        cluster = LocalCluster(**opts).start()
        started.append(cluster)
        return cluster

    yield make
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture
def local_cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    """A started LocalCluster with brokers broker-a and broker-b and one NameServer."""
    return make_cluster()
