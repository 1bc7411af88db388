"""What works on which PySpark: the sink everywhere (3.5, 4.x), format("rocketmq") from 4.1 on."""

from __future__ import annotations

import pyspark
import pytest

from spark_rocketmq.spark.compat import datasource_unavailable, supports_datasource, version_tuple


def test_the_sink_imports_on_this_pyspark() -> None:
    from spark_rocketmq import DeliveryReport, RocketMQSink, SinkOptions

    assert callable(RocketMQSink) and DeliveryReport and SinkOptions


def test_data_source_on_this_pyspark() -> None:
    if version_tuple(pyspark.__version__) >= (4, 1):
        assert supports_datasource()
    if supports_datasource():
        from spark_rocketmq import RocketMQDataSource

        assert RocketMQDataSource.name() == "rocketmq"
        return
    with pytest.raises(ImportError) as info:
        from spark_rocketmq import RocketMQDataSource
    text = str(info.value)
    assert "PySpark 4.1 or later" in text
    assert f"this is PySpark {pyspark.__version__}" in text
    assert "foreachBatch(RocketMQSink(" in text


def test_the_unavailable_message_names_the_version_needed_and_the_alternative() -> None:
    text = datasource_unavailable()
    assert "PySpark 4.1 or later" in text and "foreachBatch" in text and pyspark.__version__ in text
    assert 'spark.read / spark.readStream .format("rocketmq")) needs PySpark 4.1' in text


@pytest.mark.parametrize(("text", "want"), [("3.5.9", (3, 5)), ("4.1.0.dev1", (4, 1)), ("4.3.0", (4, 3))])
def test_version_tuple(text: str, want: tuple[int, int]) -> None:
    assert version_tuple(text) == want


def test_star_imports_work_on_every_supported_pyspark() -> None:
    names: dict[str, object] = {}
    exec("from spark_rocketmq import *\nfrom spark_rocketmq.spark import *", names)
    assert "RocketMQSink" in names and "Producer" in names
    assert ("RocketMQDataSource" in names) == supports_datasource()
