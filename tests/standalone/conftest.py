"""Fixtures of the standalone tier (make test-standalone): the built dist, the executors' Python, the cluster."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from standalone_cluster import bare_python, dist, standalone  # noqa: F401 (fixtures)
