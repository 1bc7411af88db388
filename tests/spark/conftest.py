"""One local[2] SparkSession for the whole test run (the local-cluster tests make their own)."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")


def spark_builder(master: str, app: str):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from spark_rocketmq.spark.compat import supports_datasource

    session = spark_builder("local[2]", "spark-rocketmq-tests").getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if supports_datasource():  # format("rocketmq"): PySpark 4.1+
        from spark_rocketmq import RocketMQDataSource

        session.dataSource.register(RocketMQDataSource)
    yield session
    session.stop()


def _cluster_fixture(request: pytest.FixtureRequest, name: str) -> object:
    try:
        return request.getfixturevalue(name)
    except pytest.FixtureLookupError:
        pytest.skip(f"fixture {name!r} of the local cluster (tests/conftest.py) is not available")


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> object:
    """The shared local cluster (2 brokers, 1 NameServer); tests use topics of their own."""
    return _cluster_fixture(request, "local_cluster")


@pytest.fixture
def new_cluster(request: pytest.FixtureRequest):
    """make_cluster(**kw): a cluster of the test's own (for tests that stop or break brokers)."""
    return _cluster_fixture(request, "make_cluster")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a PySpark without the Python Data Source API (3.5, 4.0), skip the tests of format("rocketmq")."""
    from spark_rocketmq.spark.compat import DATASOURCE_MIN_PYSPARK, pyspark_version, supports_datasource

    if supports_datasource():
        return
    need = ".".join(map(str, DATASOURCE_MIN_PYSPARK))
    skip = pytest.mark.skip(reason=f'format("rocketmq") needs PySpark {need}+; this is PySpark {pyspark_version()}')
    for item in items:
        function = getattr(item, "function", None)
        if function is None or "tests/spark/" not in item.nodeid.replace("\\", "/"):
            continue
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            continue
        if 'format("rocketmq")' in source:
            item.add_marker(skip)
