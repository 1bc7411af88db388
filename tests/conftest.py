"""Shared fixtures: local RocketMQ clusters on free loopback ports, stopped by the test that started them."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from spark_rocketmq.local import LocalCluster
from spark_rocketmq.local.namesrv_link import NamesrvLink
from spark_rocketmq.local.proxy import LocalProxy
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.registry import TopicConfig, register_broker_request

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
def make_proxy() -> Iterator[Callable[[LocalCluster], LocalProxy]]:
    """make_proxy(cluster) -> a started LocalProxy (a 5.x Proxy's remoting port) in front of it, stopped at teardown."""
    started: list[LocalProxy] = []

    def make(cluster: LocalCluster) -> LocalProxy:
        proxy = LocalProxy(cluster.namesrv_addr).start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()


@pytest.fixture
def local_cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    """A started LocalCluster with brokers broker-a and broker-b and one NameServer."""
    return make_cluster()


def closed_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def advertise_dead_broker(
    make_cluster: Callable[..., LocalCluster],
) -> Iterator[Callable[..., tuple[LocalCluster, str]]]:
    """advertise_dead_broker(topic, brokers=0) -> (cluster, address): a local cluster whose NameServer
    routes ``topic`` to broker-x at an address nothing listens on (a broker whose brokerIP1 the
    client cannot reach). broker-x stays registered (its connection open) until teardown."""
    links: list[NamesrvLink] = []

    def make(topic: str, brokers: int = 0) -> tuple[LocalCluster, str]:
        cluster = make_cluster(brokers=brokers, broker_expiry_s=120.0)
        addr = f"127.0.0.1:{closed_port()}"
        link = NamesrvLink(cluster.namesrvs[0].addr)
        links.append(link)
        req = register_broker_request(
            cluster_name=cluster.cluster_name,
            broker_name="broker-x",
            broker_addr=addr,
            broker_id=0,
            ha_server_addr=addr,
            topics=[TopicConfig(topic, 4, 4)],
            counter=1,
            timestamp=int(time.time() * 1000),
        )
        assert link.request(req).code == ResponseCode.SUCCESS
        return cluster, addr

    yield make
    for link in links:
        link.close()
