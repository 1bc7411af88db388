"""Wrong schemas and options fail on the driver, before any Spark job runs or any message is sent."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink
from spark_rocketmq.errors import ConfigError, SchemaError

pytestmark = pytest.mark.spark

# Nothing listens there: a send attempt would fail with a connection error, not a SchemaError.
NOWHERE = "127.0.0.1:1"


def _no_jobs_ran(spark, group: str) -> bool:
    return not spark.sparkContext.statusTracker().getJobIdsForGroup(group)


@pytest.mark.parametrize(
    ("select", "needles"),
    [
        ("id AS value", ["no 'body' column", "to_json(struct(*))"]),
        ("id AS body", ["column 'body'", "bigint", "binary or string", "cast"]),
        ("'x' AS body|1 AS topic", ["column 'topic'", "int", "string"]),
        ("'x' AS body|'T' AS topic|5 AS tags", ["column 'tags'", "int"]),
        ("'x' AS body|'T' AS topic|array(1) AS keys", ["column 'keys'", "array<int>", "string or array<string>"]),
        ("'x' AS body|'T' AS topic|map('a', 1) AS properties", ["column 'properties'", "map<string,int>"]),
        ("'x' AS body|'T' AS topic|'x' AS delay_level", ["column 'delay_level'", "string", "int"]),
        ("'x' AS body|'T' AS topic|1.5 AS sharding_key", ["column 'sharding_key'", "decimal"]),
        ("'x' AS body", ["no topic", "topic option"]),
    ],
)
def test_wrong_schema_fails_before_any_job(spark, select: str, needles: list[str]) -> None:
    df = spark.range(3).selectExpr(*[s.strip() for s in select.split("|")])
    sink = RocketMQSink(namesrv_addr=NOWHERE)
    group = f"schema-{abs(hash(select))}"
    spark.sparkContext.setJobGroup(group, "schema check")
    try:
        with pytest.raises(SchemaError) as info:
            sink(df, 0)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    for needle in needles:
        assert needle in str(info.value)
    assert _no_jobs_ran(spark, group)


def test_topic_option_overrides_a_topic_column_of_any_type(spark) -> None:
    from spark_rocketmq.spark.schema import resolve_columns

    df = spark.range(1).select(F.lit("x").alias("body"), F.lit(1).alias("topic"), F.lit(2).alias("extra"))
    cols = resolve_columns(df.schema, "Orders")
    assert cols.topic is None and cols.selected() == ["body"]


def test_bad_options_name_the_option() -> None:
    with pytest.raises(ConfigError, match="on_invalid_row"):
        RocketMQSink(namesrv_addr=NOWHERE, on_invalid_row="drop")
    with pytest.raises(ConfigError, match="topic"):
        RocketMQSink(namesrv_addr=NOWHERE, topic="no spaces allowed")
    with pytest.raises(ConfigError, match=r"sendMsgTimeoutMs|send_msg_timeout_ms"):
        RocketMQSink({"namesrvAddr": NOWHERE, "sendMsgTimeoutMs": "soon"})
    with pytest.raises(ConfigError, match="unknown producer option"):
        RocketMQSink(namesrv_addr=NOWHERE, topik="Orders")


def test_options_from_toml_with_keyword_overrides(tmp_path) -> None:
    conf = tmp_path / "sink.toml"
    conf.write_text(
        '[rocketmq]\nnamesrvAddr = "127.0.0.1:9876"\ntopic = "Orders"\nonInvalidRow = "skip"\n'
        "send_msg_timeout_ms = 5000\n"
    )
    sink = RocketMQSink(str(conf), topic="Payments")
    assert sink.options.topic == "Payments"
    assert sink.options.on_invalid_row == "skip"
    assert sink.producer_config.send_msg_timeout_ms == 5000
    assert sink.producer_config.namesrv_addr == "127.0.0.1:9876"


def test_data_source_reports_a_wrong_schema(spark) -> None:
    df = spark.range(3).selectExpr("id AS value")
    with pytest.raises(Exception, match="no 'body' column") as info:
        df.write.format("rocketmq").option("namesrvAddr", NOWHERE).option("topic", "T").mode("append").save()
    assert "to_json(struct(*))" in str(info.value)


def test_data_source_refuses_overwrite(spark) -> None:
    df = spark.range(1).selectExpr("'x' AS body")
    with pytest.raises(Exception, match="append"):
        df.write.format("rocketmq").option("namesrvAddr", NOWHERE).option("topic", "T").mode("overwrite").save()
