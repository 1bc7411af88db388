"""The test suite's SparkSession: loopback only, no UI, Python workers on this interpreter."""

from __future__ import annotations

import os
import sys
from typing import Any


def spark_builder(master: str, app: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # a loaded machine (the real tier's two kits at once) took longer than PySpark's 15 s to open the local
    # socket of a collect(): both ends wait longer
    os.environ.setdefault("SPARK_AUTH_SOCKET_TIMEOUT", "120")
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
        .config("spark.python.authenticate.socketTimeout", "120s")
    )


def local_session(app: str) -> Any:
    """A local[2] session with format("rocketmq") registered where this PySpark has the Data Source API."""
    from spark_rocketmq.spark.compat import supports_datasource

    session = spark_builder("local[2]", app).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if supports_datasource():  # format("rocketmq"): PySpark 4.1+
        from spark_rocketmq import RocketMQDataSource

        session.dataSource.register(RocketMQDataSource)
    return session
