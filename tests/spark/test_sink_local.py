"""RocketMQSink and format("rocketmq") in local mode against the local cluster (2 brokers)."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from spark_rocketmq import RocketMQSink
from spark_rocketmq.errors import ClusterConfigError, DeliveryError, InvalidRowError
from spark_rocketmq.protocol.codes import ResponseCode

pytestmark = pytest.mark.spark

HEX32 = re.compile(r"^[0-9A-F]{32}$")


def _write_json_files(folder: Path, files: int, rows_per_file: int) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for f in range(files):
        part = [{"id": f * rows_per_file + i, "name": f"row-{f}-{i}"} for i in range(rows_per_file)]
        (folder / f"part-{f:03d}.json").write_text("\n".join(json.dumps(r) for r in part) + "\n")
        rows += part
    return rows


def _run_stream(spark, folder: Path, checkpoint: Path, publish) -> None:
    stream = (
        spark.readStream.schema("id long, name string")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .select(F.to_json(F.struct("id", "name")).alias("body"), F.col("id"))
    )
    query = (
        stream.writeStream.foreachBatch(publish)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(240), "stream did not finish in time"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()


def _bodies(messages) -> list[str]:
    return sorted(m.body.decode() for m in messages)


def test_stream_publishes_every_row_exactly_once(spark, cluster, tmp_path) -> None:
    topic = "StreamOnce"
    cluster.create_topic(topic, queues=4)
    rows = _write_json_files(tmp_path / "in", files=3, rows_per_file=400)
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic=topic, group="test-stream")
    reports = []

    def publish(df, batch_id):
        reports.append(sink(df, batch_id))

    _run_stream(spark, tmp_path / "in", tmp_path / "ck", publish)

    assert [r.batch_id for r in reports] == [0, 1, 2]
    assert sum(r.messages for r in reports) == len(rows)
    assert all(r.ok and r.failed_rows == 0 and r.invalid_rows == 0 for r in reports)
    assert sink.totals["messages"] == len(rows)
    stored = cluster.messages(topic)
    assert _bodies(stored) == sorted(json.dumps(r, separators=(",", ":")) for r in rows)
    ids = [m.uniq_key for m in stored]
    assert len(set(ids)) == len(rows)
    assert all(HEX32.match(i) for i in ids)


def _field_df(spark):
    return spark.createDataFrame(
        [
            ("b0", "FieldsA", "TagA", "k1 k2", {"p": "v"}, None, None),
            ("b1", "FieldsB", None, None, None, 2, None),
            ("b2", "FieldsA", "TagB", None, {"x": "1", "y": "2"}, None, "user-7"),
        ],
        "body string, topic string, tags string, keys string, properties map<string,string>, "
        "delay_level int, sharding_key string",
    ).coalesce(1)


def test_per_row_topics_and_message_fields_arrive(spark, cluster) -> None:
    for t in ("FieldsA", "FieldsB"):
        cluster.create_topic(t, queues=4)
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, group="test-fields")
    report = sink(_field_df(spark), 0)
    assert report.topics == {"FieldsA": 2, "FieldsB": 1}
    a = {m.body: m for m in cluster.messages("FieldsA")}
    assert set(a) == {b"b0", b"b2"}
    assert a[b"b0"].properties["TAGS"] == "TagA"
    assert a[b"b0"].properties["KEYS"] == "k1 k2"
    assert a[b"b0"].properties["p"] == "v"
    assert a[b"b2"].properties["TAGS"] == "TagB"
    assert (a[b"b2"].properties["x"], a[b"b2"].properties["y"]) == ("1", "2")
    assert a[b"b2"].properties["__SHARDINGKEY"] == "user-7"
    delayed = [m for m in _all_messages(cluster, "FieldsB") if m.body == b"b1"]
    assert len(delayed) == 1 and delayed[0].properties["DELAY"] == "2"


def _all_messages(cluster, topic: str):
    """A delayed message may be stored under SCHEDULE_TOPIC_XXXX (REAL_TOPIC names the topic)."""
    found = list(cluster.messages(topic))
    with contextlib.suppress(Exception):
        found += [m for m in cluster.messages("SCHEDULE_TOPIC_XXXX") if m.properties.get("REAL_TOPIC") == topic]
    return found


def test_keys_array_column(spark, cluster) -> None:
    cluster.create_topic("KeysArray", queues=2)
    df = spark.createDataFrame([("x", ["a", "b", "c"])], "body string, keys array<string>")
    RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic="KeysArray", group="test-keys")(df, 0)
    (m,) = cluster.messages("KeysArray")
    assert m.properties["KEYS"] == "a b c"


def test_one_sharding_key_goes_to_one_queue_in_row_order(spark, cluster) -> None:
    topic = "Sharded"
    cluster.create_topic(topic, queues=4)
    # Two partitions; each key's rows live in one partition, in id order.
    df = spark.range(0, 3000, numPartitions=2).select(
        F.col("id").cast("string").alias("body"),
        F.concat(F.lit("p"), F.spark_partition_id(), F.lit("-k"), (F.col("id") % 5).cast("string")).alias(
            "sharding_key"
        ),
    )
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic=topic, group="test-shard", max_request_bytes=2000)
    report = sink(df, 0)
    assert report.messages == 3000 and report.requests > 10
    by_key: dict[str, list] = {}
    for m in cluster.messages(topic):
        by_key.setdefault(m.properties["__SHARDINGKEY"], []).append(m)
    assert len(by_key) == 10
    for key, msgs in by_key.items():
        assert len({(m.broker_name, m.queue_id) for m in msgs}) == 1, key
        in_queue_order = [int(m.body) for m in sorted(msgs, key=lambda m: m.queue_offset)]
        assert in_queue_order == sorted(in_queue_order), key
        assert len(in_queue_order) == 300


def _bad_rows_df(spark):
    return spark.createDataFrame(
        [("ok-1", 0), ("x" * 5000, 0), ("ok-2", 0), ("ok-3", 25)],
        "body string, delay_level int",
    ).coalesce(1)


def test_invalid_rows_skipped_and_reported(spark, cluster) -> None:
    cluster.create_topic("Invalid", queues=2)
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic="Invalid",
        group="test-invalid",
        max_message_size=4096,
        on_invalid_row="skip",
    )
    report = sink(_bad_rows_df(spark), 0)
    assert (report.rows, report.messages, report.invalid_rows) == (4, 2, 2)
    assert any("row 1: column body" in s and "max_message_size" in s for s in report.invalid_samples)
    assert any("row 3: column delay_level" in s and "1..18" in s for s in report.invalid_samples)
    assert _bodies(cluster.messages("Invalid")) == ["ok-1", "ok-2"]


def test_invalid_rows_fail_the_batch_with_the_row_named(spark, cluster) -> None:
    cluster.create_topic("InvalidFail", queues=2)
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr, topic="InvalidFail", group="test-invalid", max_message_size=4096
    )
    with pytest.raises(InvalidRowError) as info:
        sink(_bad_rows_df(spark), 0)
    text = str(info.value)
    assert "partition 0 row 1: column body" in text
    assert "on_invalid_row='skip'" in text
    assert info.value.report.invalid_rows == 2


def test_rows_undelivered_at_the_delivery_deadline_fail_the_batch(spark, new_cluster) -> None:
    # Brokers frozen (as by SIGSTOP): connects succeed, no answer comes; resent until the deadline.
    cluster = new_cluster(brokers=2, broker_expiry_s=120.0)
    cluster.create_topic("Nowhere", queues=2)
    for broker in cluster.brokers.values():
        broker.hang()
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic="Nowhere",
        group="test-fail",
        send_msg_timeout_ms=300,
        delivery_timeout_ms=1500,
    )
    df = spark.range(5).select(F.col("id").cast("string").alias("body"))
    with pytest.raises(DeliveryError) as info:
        sink(df, 3)
    assert not isinstance(info.value, ClusterConfigError)
    assert "batch 3: 5 of 5 rows were not delivered (topic Nowhere: 5 rows)" in str(info.value)
    assert "delivery_timeout_ms=1500" in str(info.value)
    report = info.value.report
    assert (report.failed_rows, report.failed_topics, report.messages) == (5, {"Nowhere": 5}, 0)
    assert report.resends > 0


def test_format_rocketmq_batch_write(spark, cluster, tmp_path) -> None:
    cluster.create_topic("FormatBatch", queues=4)
    df = spark.range(0, 1000, numPartitions=3).select(
        F.col("id").cast("string").alias("body"), F.lit("T").alias("tags")
    )
    (
        df.write.format("rocketmq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", "FormatBatch")
        .option("producerGroup", "test-format")
        .option("reportDir", str(tmp_path))
        .mode("append")
        .save()
    )
    stored = cluster.messages("FormatBatch")
    assert _bodies(stored) == sorted(str(i) for i in range(1000))
    assert len({m.uniq_key for m in stored}) == 1000
    (entry,) = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert (entry["messages"], entry["partitions"], entry["state"]) == (1000, 3, "committed")


def test_format_rocketmq_streaming(spark, cluster, tmp_path) -> None:
    topic = "FormatStream"
    cluster.create_topic(topic, queues=4)
    rows = _write_json_files(tmp_path / "in", files=2, rows_per_file=300)
    stream = (
        spark.readStream.schema("id long, name string")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
        .select(F.col("name").alias("body"), F.col("name").alias("keys"))
    )
    query = (
        stream.writeStream.format("rocketmq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", topic)
        .option("reportDir", str(tmp_path / "reports"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(240)
    finally:
        query.stop()
    assert query.exception() is None
    stored = cluster.messages(topic)
    assert _bodies(stored) == sorted(r["name"] for r in rows)
    assert all(m.properties["KEYS"] == m.body.decode() for m in stored)
    reports = [json.loads(x) for x in (tmp_path / "reports" / "reports.jsonl").read_text().splitlines()]
    assert [(r["batch_id"], r["messages"]) for r in reports] == [(0, 300), (1, 300)]


@pytest.mark.parametrize("fault", ["stop", "busy"])
def test_stream_survives_a_broker_stopped_or_busy(spark, new_cluster, tmp_path, fault: str) -> None:
    cluster = new_cluster(brokers=2)
    topic = f"Survive{fault.title()}"
    cluster.create_topic(topic, queues=4)
    rows = _write_json_files(tmp_path / "in", files=4, rows_per_file=250)
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic=topic, group="test-survive", max_request_bytes=4000)
    reports = []
    after_fault: set[bytes] = set()

    def publish(df, batch_id):
        if batch_id >= 1:
            after_fault.update(r.body.encode() for r in df.select("body").collect())
        if batch_id == 1:
            if fault == "stop":
                cluster.broker("broker-a").stop()
            else:
                cluster.broker("broker-a").inject(code="SYSTEM_BUSY", times=5)
        reports.append(sink(df, batch_id))

    _run_stream(spark, tmp_path / "in", tmp_path / "ck", publish)
    if fault == "stop":
        cluster.broker("broker-a").start()
    stored = cluster.messages(topic)
    # Nothing lost; a repeat (a retried request the broker had stored) keeps its UNIQ_KEY.
    assert set(_bodies(stored)) == {json.dumps(r, separators=(",", ":")) for r in rows}
    by_body: dict[bytes, set[str]] = {}
    for m in stored:
        by_body.setdefault(m.body, set()).add(m.uniq_key)
    assert all(len(ids) == 1 for ids in by_body.values())
    assert sum(r.messages for r in reports) == len(rows)
    assert len(after_fault) == 750
    if fault == "stop":
        assert {m.broker_name for m in stored if m.body in after_fault} == {"broker-b"}


def test_replayed_micro_batch_republishes_identical_ids(spark, cluster, tmp_path) -> None:
    """Batch 1 is published, then the query dies before committing it; the restarted query replays it."""
    topic = "Replay"
    cluster.create_topic(topic, queues=4)
    rows = _write_json_files(tmp_path / "in", files=3, rows_per_file=200)
    sink = RocketMQSink(namesrv_addr=cluster.namesrv_addr, topic=topic, group="test-replay")
    crashed = []

    def publish_then_crash(df, batch_id):
        sink(df, batch_id)
        if batch_id == 1 and not crashed:
            crashed.append(batch_id)
            raise RuntimeError("simulated driver failure after publishing batch 1")

    with pytest.raises(Exception, match="simulated driver failure"):
        _run_stream(spark, tmp_path / "in", tmp_path / "ck", publish_then_crash)
    _run_stream(spark, tmp_path / "in", tmp_path / "ck", publish_then_crash)

    stored = cluster.messages(topic)
    ids_by_body: dict[bytes, set[str]] = {}
    for m in stored:
        ids_by_body.setdefault(m.body, set()).add(m.uniq_key)
    assert set(_bodies(stored)) == {json.dumps(r, separators=(",", ":")) for r in rows}
    assert len(stored) == len(rows) + 200  # batch 1 twice
    assert all(len(ids) == 1 for ids in ids_by_body.values())


def _stored_once(stored) -> dict[str, bytes]:
    """UNIQ_KEY -> body of stored messages, asserting no message id was stored twice."""
    by_id: dict[str, bytes] = {}
    for m in stored:
        assert m.uniq_key not in by_id, f"message {m.uniq_key} stored twice"
        by_id[m.uniq_key] = m.body
    return by_id


def test_a_request_failing_after_the_client_retries_is_resent_and_stored_once(spark, new_cluster) -> None:
    cluster = new_cluster(brokers=2)
    topic = "Resent"
    cluster.create_topic(topic, queues=4)
    # No client retries: broker-a's error answers reach the sink, which sends those requests again.
    cluster.broker("broker-a").inject(code=ResponseCode.SYSTEM_ERROR, times=4)
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic=topic,
        group="test-resend",
        max_request_bytes=2000,
        retry_times_when_send_async_failed=0,
    )
    df = spark.range(0, 2000, numPartitions=2).select(F.col("id").cast("string").alias("body"))
    report = sink(df, 0)
    assert report.ok and (report.messages, report.failed_rows) == (2000, 0)
    assert report.resends >= 1
    by_id = _stored_once(cluster.messages(topic))
    assert sorted(by_id.values()) == sorted(str(i).encode() for i in range(2000))


def test_keyed_rows_keep_row_order_when_a_request_fails_and_is_resent(spark, new_cluster) -> None:
    cluster = new_cluster(brokers=2)
    topic = "ShardedResent"
    cluster.create_topic(topic, queues=4)
    # The first request broker-a gets fails (no client retries): the sink resends it on its queue,
    # and sends no later request of that queue before it is stored.
    cluster.broker("broker-a").inject(code=ResponseCode.SYSTEM_ERROR, times=1)
    df = spark.range(0, 3000, numPartitions=2).select(
        F.col("id").cast("string").alias("body"),
        F.concat(F.lit("p"), F.spark_partition_id(), F.lit("-k"), (F.col("id") % 5).cast("string")).alias(
            "sharding_key"
        ),
    )
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic=topic,
        group="test-shard-resend",
        max_request_bytes=2000,
        retry_times_when_send_async_failed=0,
    )
    report = sink(df, 0)
    assert report.ok and report.messages == 3000
    assert report.resends == 1
    stored = cluster.messages(topic)
    _stored_once(stored)
    by_key: dict[str, list] = {}
    for m in stored:
        by_key.setdefault(m.properties["__SHARDINGKEY"], []).append(m)
    assert len(by_key) == 10
    assert any(m.broker_name == "broker-a" for m in stored)
    for key, msgs in by_key.items():
        assert len({(m.broker_name, m.queue_id) for m in msgs}) == 1, key
        in_queue_order = [int(m.body) for m in sorted(msgs, key=lambda m: m.queue_offset)]
        assert in_queue_order == sorted(in_queue_order), key
        assert len(in_queue_order) == 300


def test_stream_over_two_brokers_completes_when_one_hangs(spark, new_cluster, tmp_path) -> None:
    """A broker frozen (as by SIGSTOP) before the second micro-batch: every micro-batch completes,
    and every row of the later batches is stored exactly once, on the healthy broker."""
    cluster = new_cluster(brokers=2)
    topic = "SurviveHang"
    cluster.create_topic(topic, queues=4)
    rows = _write_json_files(tmp_path / "in", files=3, rows_per_file=300)
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic=topic,
        group="test-hang",
        max_request_bytes=4000,
        send_msg_timeout_ms=1000,  # a request to the hung broker fails in 1 s, then goes elsewhere
    )
    reports = []
    after_hang: set[bytes] = set()

    def publish(df, batch_id):
        if batch_id == 1:
            cluster.broker("broker-a").hang()
        if batch_id >= 1:
            after_hang.update(r.body.encode() for r in df.select("body").collect())
        reports.append(sink(df, batch_id))

    try:
        _run_stream(spark, tmp_path / "in", tmp_path / "ck", publish)
        assert [r.batch_id for r in reports] == [0, 1, 2]
        assert all(r.ok and r.failed_rows == 0 for r in reports)
        stored = cluster.messages(topic)  # read while broker-a is still hung
    finally:
        cluster.broker("broker-a").resume()
    by_id = _stored_once(stored)
    assert sorted(by_id.values()) == sorted(json.dumps(r, separators=(",", ":")).encode() for r in rows)
    assert len(after_hang) == 600
    assert {m.broker_name for m in stored if m.body in after_hang} == {"broker-b"}
    assert reports[1].resends >= 1  # requests that timed out on broker-a were sent again, and landed on broker-b


@pytest.mark.parametrize("require", [False, True], ids=["counted", "retry_another_broker_when_not_store_ok"])
def test_stored_but_not_replicated_answers_are_counted_or_sent_again(spark, new_cluster, require: bool) -> None:
    """A SYNC_MASTER without its slave stores a request and answers SLAVE_NOT_AVAILABLE: the rows are
    delivered (on the master only) and the report counts them by status; with
    retry_another_broker_when_not_store_ok the request is sent again until a broker answers SEND_OK, and
    its first copy stays (the same UNIQ_KEYs twice)."""
    cluster = new_cluster(brokers=2)
    topic = "NotReplicated"
    cluster.create_topic(topic, queues=4)
    cluster.broker("broker-a").inject(code=ResponseCode.SLAVE_NOT_AVAILABLE, times=2)
    sink = RocketMQSink(
        namesrv_addr=cluster.namesrv_addr,
        topic=topic,
        group="test-not-replicated",
        max_request_bytes=2000,
        retry_another_broker_when_not_store_ok=require,
    )
    df = spark.range(0, 2000, numPartitions=2).select(F.col("id").cast("string").alias("body"))
    report = sink(df, 0)
    assert report.ok and (report.messages, report.failed_rows) == (2000, 0)
    (counted,) = report.not_replicated.values()
    assert list(report.not_replicated) == ["SLAVE_NOT_AVAILABLE"] and counted > 0
    assert "stored, not yet replicated or flushed: SLAVE_NOT_AVAILABLE=" in report.line()
    stored = cluster.messages(topic)
    copies: dict[str, list[bytes]] = {}
    for m in stored:
        copies.setdefault(m.uniq_key, []).append(m.body)
    assert sorted(b for bodies in copies.values() for b in set(bodies)) == sorted(str(i).encode() for i in range(2000))
    assert all(len(set(bodies)) == 1 for bodies in copies.values())  # a copy is the same row, same UNIQ_KEY
    if require:
        assert report.resends == 2 and len(stored) == 2000 + counted
    else:
        assert report.resends == 0 and len(stored) == 2000
