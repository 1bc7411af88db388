"""One local[2] SparkSession for the whole test run (the local-cluster tests make their own)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")

from spark_session import local_session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = local_session("spark-rocketmq-tests")
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
