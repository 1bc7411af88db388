"""Which Spark this is, and what of the sink it can run.

foreachBatch (RocketMQSink) needs only ``mapInArrow``, ``foreachBatch`` and broadcast variables:
PySpark 3.5 and 4.x. ``format("rocketmq")`` (RocketMQDataSource) is a Python data source with
Arrow writers for batch and streaming writes (``DataSourceArrowWriter``,
``DataSourceStreamArrowWriter``) and readers for batch and streaming reads: PySpark 4.1 or later.
"""

from __future__ import annotations

import re

#: The first PySpark whose Python Data Source API has both Arrow writers RocketMQDataSource uses.
DATASOURCE_MIN_PYSPARK = (4, 1)


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a version string: "3.5.9" -> (3, 5), "4.1.0.dev1" -> (4, 1)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not a version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def supports_datasource() -> bool:
    """True when this PySpark can run RocketMQDataSource (``format("rocketmq")``)."""
    try:
        from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter  # noqa: F401
    except ImportError:
        return False
    return True


def datasource_unavailable() -> str:
    """What to tell a user who asks for RocketMQDataSource on a PySpark without the API it needs."""
    need = ".".join(map(str, DATASOURCE_MIN_PYSPARK))
    return (
        f'RocketMQDataSource (format("rocketmq")) needs PySpark {need} or later (the Python Data Source API '
        f"with Arrow writers); this is PySpark {pyspark_version()}. On this Spark publish with foreachBatch, "
        "which works on PySpark 3.5 and 4.x: df.writeStream.foreachBatch(RocketMQSink(...)) for a stream, "
        "or RocketMQSink(...)(df) for a batch DataFrame. Reading topics (spark.read / spark.readStream "
        f'.format("rocketmq")) needs PySpark {need} too: there is no reader on this Spark.'
    )
