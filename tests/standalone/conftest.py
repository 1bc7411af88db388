"""Fixtures of the standalone tier (make test-standalone): the built dist, the executors' Python, the cluster."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from standalone_cluster import StandaloneCluster, executor_python

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from build_dist import Dist, build_dist


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """What `make dist` writes (sdist, wheel, --py-files zip, site-packages tar.gz), built into a tmp folder."""
    return build_dist(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with pyspark, pyarrow and pandas but neither spark_rocketmq nor tenacity."""
    return executor_python(tmp_path_factory.mktemp("executor-python") / "venv")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two 1-core workers, shared by the tests of one module, stopped after them."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    yield cluster
    cluster.stop()
