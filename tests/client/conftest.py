"""Fixtures of the client tests: a small fake NameServer + brokers (tests/client/fakes.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fakes import FakeCluster


@pytest.fixture
def fake_cluster() -> Iterator[FakeCluster]:
    cluster = FakeCluster.start(brokers=2, namesrvs=1)
    try:
        yield cluster
    finally:
        cluster.stop()
