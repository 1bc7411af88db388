"""spark.read / spark.readStream .format("rocketmq") against a real RocketMQ, on topics the kit's Java producer
filled (tests/real/ReadTestProducer.java: tags, keys, user properties, batches, zlib- and on 5.x LZ4-compressed
bodies).

A batch read compared field by field with the kit's Java consumer (`rmq dump`) and the Java producer's send
results; a streaming read through a broker killed and restarted (disruptive); the driver SIGKILLed mid-stream
and restarted on its checkpoint (tests/real/stream_read_job.py); jobs/relay.py with exactly_once, its driver
SIGKILLed and restarted; the consumer group's lag as `mqadmin consumerProgress` shows it; and, on a 5.x kit,
a batch and a streaming read through the RocketMQ Proxy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq import Message, Producer
from spark_rocketmq.client.consumer_config import ConsumerConfig
from spark_rocketmq.client.pull_consumer import PullConsumer
from spark_rocketmq.protocol.transaction import TransactionState

from .conftest import DISRUPTIVE, FAST_CHECKS_AND_RECALL, MEASURED, ONCE, fresh_topic_name, wait_for
from .kit import Kit
from .readback import sha256
from .test_faults import healthy  # noqa: F401 (fixture: the shared cluster whole again after a disruptive test)

#: Spark jobs of their own, Java producers and dumps: more than the suite's 300 s on a loaded machine.
pytestmark = pytest.mark.timeout(600)

HERE = Path(__file__).resolve().parent
JAVA_PRODUCER = HERE / "ReadTestProducer.java"
STREAM_JOB = HERE / "stream_read_job.py"
RELAY = HERE.parents[1] / "jobs" / "relay.py"
#: ReadTestProducer sends its first BATCHED messages in batches of 10.
BATCHED = 40
#: Properties the Java pull client adds to each message it returns (PullAPIWrapper.processPullResult), not stored.
CLIENT_ADDED = {"MIN_OFFSET", "MAX_OFFSET"}
#: MessageSysFlag.COMPRESSED_FLAG and INNER_BATCH_FLAG.
COMPRESSED_FLAG = 0x1
INNER_BATCH_FLAG = 0x80
#: The columns a streaming test keeps of a row: its position and identity.
IDENTITY = ("broker_name", "queue_id", "queue_offset", "msg_id")


# -- the Java producer ---------------------------------------------------------------------------------------
def java_body(prefix: str, i: int) -> bytes:
    """The body ReadTestProducer gives message i."""
    text = ("batched-" if i < BATCHED else "") + f"{prefix}-{i}"
    if i % 7 == 3:
        while len(text) < 5000:
            text += f" padding-{i}"
    return text.encode()


@pytest.fixture(scope="session")
def java_produce(kit: Kit) -> Callable[..., list[dict[str, Any]]]:
    """java_produce(topic, count, prefix, namesrv_addr=kit's, compress_type=None) -> ReadTestProducer's send
    results, one a message. ``compress_type``: the 5.x producer's rocketmq.message.compressType (ZLIB by default)."""
    classes = kit.run_folder / "reader-test-classes"
    classes.mkdir(parents=True, exist_ok=True)
    jars = ":".join(str(j) for j in sorted((kit.folder / "lib").glob("*.jar")))
    subprocess.run(
        ["javac", "-nowarn", "-cp", jars, "-d", str(classes), str(JAVA_PRODUCER)],
        check=True,
        capture_output=True,
        timeout=300,
    )

    def produce(
        topic: str, count: int, prefix: str, namesrv_addr: str | None = None, compress_type: str | None = None
    ) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [
                str(kit.folder / "rmq"),
                "java",
                *([f"-Drocketmq.message.compressType={compress_type}"] if compress_type else []),
                "ReadTestProducer",
                namesrv_addr or kit.namesrv_addr,
                topic,
                str(count),
                prefix,
            ],
            env={**os.environ, **kit.env, "EXTRA_CP": str(classes), "HEAP": "-Xms64m -Xmx256m"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:] or proc.stdout[-3000:]
        sent = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        assert [s["row"] for s in sent] == list(range(count))
        return sent

    return produce


def filled(
    kit: Kit, java_produce: Callable[..., list[dict[str, Any]]], topic: str, count: int, queues: int = 4
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`topic` created on both brokers and filled by the Java producer: (its send results, `rmq dump`)."""
    kit.topic(topic, queues=queues)
    sent = java_produce(topic, count, topic)
    stored = kit.dump(topic, at_least=count)
    assert len(stored) == count
    return sent, stored


def position(m: dict[str, Any]) -> tuple[str, int, int]:
    """A dumped or sent message's (brokerName, queue id, queue offset)."""
    return (m["broker"], m["queue"], m["offset"])


# -- reads -----------------------------------------------------------------------------------------------------
def batch_read(spark: Any, addr: str, topic: str, **options: str) -> list[Any]:
    reader = spark.read.format("rocketmq").option("namesrvAddr", addr).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .selectExpr("*", "unix_millis(born_timestamp) AS born_ms", "unix_millis(store_timestamp) AS store_ms")
        .collect()
    )


def assert_rows_are_the_dump(
    rows: list[Any],
    stored: list[dict[str, Any]],
    sent: list[dict[str, Any]],
    kit: Kit,
    topic: str,
    proxy: str | None = None,
) -> None:
    """Every row is the message `rmq dump` read at its position, field by field, and what the Java producer sent."""
    by_position = {(r.broker_name, r.queue_id, r.queue_offset): r for r in rows}
    assert len(by_position) == len(rows), "a position read twice"
    assert set(by_position) == {position(m) for m in stored}
    sent_at = {position(s): s for s in sent}
    assert set(sent_at) == set(by_position), "the rows' positions are not those the producer was answered"
    for m in stored:
        r = by_position[position(m)]
        s = sent_at[position(m)]
        i = int(m["props"]["row"])
        assert s["row"] == i
        where = f"{position(m)} (row {i})"
        assert r.topic == m["topic"] == topic, where
        assert r.msg_id == m["uniq"] == m["msgId"], where
        # a 5.3.3 broker stores the messages of a Java client's batch under the batch's own UNIQ_KEY, not the ids
        # the send result lists (the dump's id is the same for the ten); 4.9.8 stores each message's own
        if i >= BATCHED or kit.major == 4:
            assert r.msg_id == s["msgId"], where
        assert r.offset_msg_id == s["offsetMsgId"], where
        assert r.keys == m["keys"].split(" ") == [f"k-{i}", f"j-{i}"], where
        assert r.tags == m["tags"] == f"Tag{i % 3}", where
        assert bytes(r.body) == java_body(topic, i) and sha256(bytes(r.body)) == m["bodySha256"], where
        assert len(r.body) == m["bodyLen"], where
        stored_props = {k: v for k, v in m["props"].items() if k not in CLIENT_ADDED}
        assert dict(r.properties) == stored_props, where
        assert (r.properties["row"], r.properties["origin"]) == (str(i), "java"), where
        assert (r.born_ms, r.store_ms) == (m["bornTimestamp"], m["storeTimestamp"]), where
        # as stored, but for COMPRESSED_FLAG: the reader clears it once it inflated the body, as the 5.3.3 Java
        # client does (the 4.9.8 one keeps it)
        assert r.sys_flag == m["sysFlag"] & ~COMPRESSED_FLAG, where
        assert (r.reconsume_times, r.flag) == (0, 0), where
        # the broker's id is its store host (IPv4 and port, 8 bytes) and the commit-log offset
        host = r.offset_msg_id[:8]
        assert r.store_host == "{}.{}.{}.{}:{}".format(*bytes.fromhex(host), int(r.offset_msg_id[8:16], 16)), where
        if proxy is None:
            assert r.store_host == kit.broker_addr({"broker-a": "a", "broker-b": "b"}[r.broker_name]), where
        assert r.born_host.startswith("127.0.0.1:") and int(r.born_host.rsplit(":", 1)[1]) > 0, where
    # a Java producer's connection to a broker is one socket: one born host per broker
    hosts = {(r.broker_name, r.born_host) for r in rows}
    assert len(hosts) == len({r.broker_name for r in rows}), hosts
    # the Java client compresses a body over 4 KiB sent alone (not in a batch): the 4.9.8 consumer shows it
    compressed = [m for m in stored if m["bodyLen"] >= 4096 and int(m["props"]["row"]) >= BATCHED]
    assert compressed and (kit.major != 4 or all(m["sysFlag"] & COMPRESSED_FLAG for m in compressed))


def checkpoint_offsets(checkpoint: Path) -> dict[int, dict[tuple[str, int], int]]:
    """The end offsets of each micro-batch in a query's offset log: {batch: {(brokerName, queue): offset}}."""
    out = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit():
            source = json.loads(f.read_text().splitlines()[2])
            out[int(f.name)] = {
                (b, int(q)): o for brokers in source.values() for b, qs in brokers.items() for q, o in qs.items()
            }
    return out


def assert_each_message_once(rows: list[tuple[str, int, int, str]], stored: list[dict[str, Any]]) -> None:
    """Rows of (brokerName, queue id, queue offset, msg id): every stored message once, nothing else."""
    counts = Counter(rows)
    repeated = {k: n for k, n in counts.items() if n > 1}
    assert not repeated, f"{len(repeated)} messages read more than once, e.g. {next(iter(repeated.items()))}"
    expected = {(*position(m), m["uniq"]) for m in stored}
    missing, extra = expected - set(counts), set(counts) - expected
    assert not missing and not extra, f"{len(missing)} messages not read ({sorted(missing)[:3]}), {len(extra)} unknown"


# -- 1. a batch read of what the Java producer wrote -------------------------------------------------------------
def test_batch_read_is_what_the_java_consumer_reads(spark, kit: Kit, java_produce, real_topic: str) -> None:
    sent, stored = filled(kit, java_produce, real_topic, 120)
    rows = batch_read(spark, kit.namesrv_addr, real_topic)
    assert_rows_are_the_dump(rows, stored, sent, kit, real_topic)
    # bounded by offsets: the last 5 offsets of each queue
    queues = {(m["broker"], m["queue"]) for m in stored}
    high = {q: sum(1 for m in stored if (m["broker"], m["queue"]) == q) for q in queues}
    start = {real_topic: {}}
    for (b, q), n in high.items():
        start[real_topic].setdefault(b, {})[str(q)] = max(0, n - 5)
    tail = batch_read(spark, kit.namesrv_addr, real_topic, startingOffsets=json.dumps(start), subExpression="Tag1")
    expected = {
        position(m) for m in stored if m["offset"] >= high[(m["broker"], m["queue"])] - 5 and m["tags"] == "Tag1"
    }
    assert {(r.broker_name, r.queue_id, r.queue_offset) for r in tail} == expected


def test_lz4_bodies_of_a_java_producer_are_inflated(spark, kit: Kit, java_produce, real_topic: str) -> None:
    """A 5.x Java producer set to compress with LZ4 (rocketmq.message.compressType): its bodies over 4 KiB are
    read inflated, the rest of each row as `rmq dump` reads it. (ZSTD is checked on frames pyarrow writes
    only, tests/spark/test_decoder.py: the kit's zstd-jni has no native library, so its producer cannot.)"""
    if kit.major < 5:
        pytest.skip("a 4.x Java producer compresses with zlib only")
    kit.topic(real_topic, queues=2)
    count = BATCHED + 20  # messages 45, 52 and 59 are sent alone and padded past 4 KiB: compressed
    sent = java_produce(real_topic, count, real_topic, compress_type="LZ4")
    stored = kit.dump(real_topic, at_least=count)
    lz4 = sorted(int(m["props"]["row"]) for m in stored if (m["sysFlag"] >> 8) & 0x7 == 1)  # CompressionType.LZ4
    assert lz4 == [45, 52, 59], f"the messages stored LZ4-compressed: {lz4}"
    assert_rows_are_the_dump(batch_read(spark, kit.namesrv_addr, real_topic), stored, sent, kit, real_topic)


def test_inner_batches_of_a_batch_cq_topic_are_read_as_their_messages(
    spark, kit: Kit, java_produce, real_topic: str
) -> None:
    """A 5.x topic of BatchCQ queues stores each of the Java producer's batches as one inner-batch record
    (SendMessageProcessor: INNER_BATCH_FLAG and NEED_UNWRAP_FLAG); the read unwraps it into its messages, as
    `rmq dump` (the Java consumer) does, at the same positions and with the same fields."""
    if kit.major < 5:
        pytest.skip("BatchCQ queues and inner batches are RocketMQ 5's")
    kit.topic(real_topic, queues=2, attributes="+queue.type=BatchCQ")
    count = BATCHED + 10
    sent = java_produce(real_topic, count, real_topic)
    stored = kit.dump(real_topic, at_least=count)
    inner = sorted(int(m["props"]["row"]) for m in stored if m["sysFlag"] & INNER_BATCH_FLAG)
    assert inner == list(range(BATCHED)), f"the messages stored in inner batches: {inner}"
    assert_rows_are_the_dump(batch_read(spark, kit.namesrv_addr, real_topic), stored, sent, kit, real_topic)


def test_delayed_timer_and_transactional_messages_are_read_once_visible(spark, kit: Kit, real_topic: str) -> None:
    """Delayed (and on 5.x timer) messages once due, a committed half and not a rolled-back one: the read and
    `rmq dump` name the same messages, with the same ids, bodies, store times and properties."""
    topic = kit.topic(real_topic, queues=2)
    with Producer(namesrv_addr=kit.namesrv_addr, group="spark_rocketmq_read_kinds") as producer:
        producer.send(Message(topic, b"plain"))
        producer.send(Message(topic, b"delayed", delay_level=1))
        if kit.major >= 5:
            producer.send(Message(topic, b"timer", delay_time_sec=2))
        committed = producer.send_half(Message(topic, b"committed"))
        rolled_back = producer.send_half(Message(topic, b"rolled-back"))
        producer.end_transaction(committed, TransactionState.COMMIT)
        producer.end_transaction(rolled_back, TransactionState.ROLLBACK)
    expected = [b"plain", b"delayed", b"committed"] + ([b"timer"] if kit.major >= 5 else [])
    stored = kit.dump(topic, at_least=len(expected), timeout=60)
    assert sorted(m["bodySha256"] for m in stored) == sorted(sha256(b) for b in expected)
    rows = batch_read(spark, kit.namesrv_addr, topic)
    assert sorted(bytes(r.body) for r in rows) == sorted(expected)
    by_position = {(r.broker_name, r.queue_id, r.queue_offset): r for r in rows}
    for m in stored:
        r = by_position[position(m)]
        assert (r.msg_id, sha256(bytes(r.body)), r.store_ms) == (m["uniq"], m["bodySha256"], m["storeTimestamp"])
        assert dict(r.properties) == {k: v for k, v in m["props"].items() if k not in CLIENT_ADDED}, m


# -- 2. a broker killed and restarted during a streaming read ----------------------------------------------------
OUTAGE_S = 8.0  # broker-b is down at least this long, from the end of micro-batch 1


@getattr(pytest.mark, DISRUPTIVE)
@pytest.mark.timeout(900)  # the query, broker-b's restart (its registration: 10-30 s), the dump
def test_stream_reads_each_message_once_through_a_broker_restart(
    spark,
    healthy: Kit,  # noqa: F811 (the imported fixture)
    java_produce,
    real_topic: str,
    tmp_path: Path,
) -> None:
    kit = healthy
    count = 1200
    _, stored = filled(kit, java_produce, real_topic, count)
    rows: list[tuple[str, int, int, str]] = []
    batches: list[int] = []
    b_down_batches: list[set[str]] = []
    restart = threading.Timer(OUTAGE_S, kit.start, args=("a", "b"))

    def collect(df: Any, batch_id: int) -> None:
        got = [tuple(r) for r in df.select(*IDENTITY).collect()]
        if kit.pid("b") is None:
            b_down_batches.append({g[0] for g in got})
        rows.extend(got)  # type: ignore[arg-type]
        batches.append(batch_id)
        if batch_id == 1:  # the next micro-batches are planned and read with broker-b killed
            kit.kill("b")
            restart.start()

    query = (
        spark.readStream.format("rocketmq")
        .option("namesrvAddr", kit.namesrv_addr)
        .option("topic", real_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    started = time.monotonic()
    try:
        wait_for(lambda: len(set(rows)) >= count or not query.isActive, 300, 0.2, "every message read")
        if restart.ident is not None:  # started at micro-batch 1; a query that failed before: its error below
            restart.join()
    finally:
        query.stop()
        if restart.is_alive():
            restart.join()
    assert query.exception() is None, query.exception()
    assert batches == list(range(len(batches))), "a micro-batch failed and was run again"
    assert_each_message_once(rows, stored)
    assert all(brokers <= {"broker-a"} for brokers in b_down_batches), b_down_batches
    MEASURED.append(
        f"RocketMQ {kit.version} test_reader broker restart: {len(batches)} micro-batches, {len(b_down_batches)} "
        f"with broker-b down, all {count} messages read once in {time.monotonic() - started:.0f} s"
    )


# -- 3. the driver killed mid-stream and restarted on its checkpoint -----------------------------------------------
def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with log.open("ab") as out:  # the driver, its JVM and Python workers in a process group of their own
        return subprocess.Popen([sys.executable, *args], stdout=out, stderr=out, env=env, start_new_session=True)


def kill_mid_batch(proc: subprocess.Popen[bytes], checkpoint: Path, log: Path, after: int = 2) -> int:
    """SIGKILL the driver's process group once `after` micro-batches committed and the next one is running
    (its offsets logged, not committed); the number of the micro-batch it was running."""

    def running() -> int | None:
        assert proc.poll() is None, f"the job ended (exit {proc.returncode}): {log.read_text()[-3000:]}"
        offsets = {int(f.name) for f in (checkpoint / "offsets").glob("[0-9]*")} if checkpoint.exists() else set()
        commits = {int(f.name) for f in (checkpoint / "commits").glob("[0-9]*")} if checkpoint.exists() else set()
        open_ = offsets - commits
        return max(open_) if len(commits) >= after and open_ else None

    try:
        wait_for(lambda: running() is not None, 400, 0.05, f"{after} micro-batches committed and one running")
        batch = running()
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
    assert batch is not None
    return batch


def run_to_end(args: list[str], log: Path, timeout: float = 400) -> None:
    proc = spawn(args, log)
    try:
        assert proc.wait(timeout) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)


# the checkpoint's work, the same whatever the broker version: one kit of a tier run, the 4.9.8 one (the 5.x
# kit's pytest is the longer)
@getattr(pytest.mark, ONCE)(4)
@pytest.mark.timeout(900)  # two Spark drivers started one after the other
def test_driver_killed_mid_stream_resumes_from_its_checkpoint(
    spark, kit: Kit, java_produce, real_topic: str, tmp_path: Path
) -> None:
    count = 1000
    _, stored = filled(kit, java_produce, real_topic, count)
    ck, out, log = tmp_path / "ck", tmp_path / "out", tmp_path / "job.log"
    args = [
        str(STREAM_JOB),
        "--namesrv",
        kit.namesrv_addr,
        "--topic",
        real_topic,
        "--checkpoint",
        str(ck),
        "--out",
        str(out),
        "--max-offsets",
        "250",  # 4 micro-batches: 2 committed, the third killed running, the rest after the restart
    ]
    killed_in = kill_mid_batch(spawn(args, log), ck, log)
    run_to_end([*args, "--available-now"], log)
    written = spark.read.schema("broker_name string, queue_id int, queue_offset long, msg_id string, sha string")
    rows = written.json(str(out)).collect()  # the file sink's committed files (its _spark_metadata log)
    assert_each_message_once([(r.broker_name, r.queue_id, r.queue_offset, r.msg_id) for r in rows], stored)
    sha_at = {position(m): m["bodySha256"] for m in stored}
    assert all(r.sha == sha_at[(r.broker_name, r.queue_id, r.queue_offset)] for r in rows)
    ends = checkpoint_offsets(ck)
    assert killed_in in ends and max(ends) >= killed_in  # the killed micro-batch was run again from its logged offsets
    assert sum(ends[max(ends)].values()) == count


# -- 4. the relay, exactly once, its driver killed and restarted ---------------------------------------------------
#: The relay's commit window: its halves are committed within it, or by check-backs from its end and 30 s more.
RELAY_WINDOW_MS = 20_000


def relay_conf(tmp_path: Path, addr: str, source: str, destination: str) -> Path:
    conf = tmp_path / "relay.toml"
    conf.write_text(
        f"""
[source]
topic = "{source}"
startingOffsets = "earliest"
maxOffsetsPerTrigger = 225

[rocketmq]
namesrv_addr = "{addr}"
group = "{destination}_publisher"
topic = "{destination}"
delivery_guarantee = "exactly_once"
transaction_log_dir = "{tmp_path / "txlog"}"
transaction_commit_window_ms = {RELAY_WINDOW_MS}

[job]
master = "local[2]"
checkpoint = "{tmp_path / "ck"}"
trigger_seconds = 0.2
timeout_seconds = 600
"""
    )
    return conf


@getattr(pytest.mark, ONCE)(4)  # the sink's exactly once is checked on both kits by test_transactions.py
@pytest.mark.timeout(900)  # two relay drivers, and check-backs from the commit window's end and 30 s more
def test_relay_exactly_once_through_a_driver_kill(private_kit, java_produce, real_topic: str, tmp_path: Path) -> None:
    """jobs/relay.py from a topic the Java producer filled to another, exactly_once, its driver SIGKILLed mid-run
    and restarted: the destination has every input body once. Brokers that check halves back every 2 s (the
    private cluster of test_transactions): a micro-batch the driver recorded but did not mark committed is
    committed by check-backs from its commit window's end and 30 s more."""
    kit: Kit = private_kit(props=FAST_CHECKS_AND_RECALL)
    count = 900
    _, stored = filled(kit, lambda *a: java_produce(*a, namesrv_addr=kit.namesrv_addr), real_topic, count)
    destination = kit.topic(f"{real_topic}_out"[:120])
    conf, log = relay_conf(tmp_path, kit.namesrv_addr, real_topic, destination), tmp_path / "relay.log"
    started = time.monotonic()
    killed_in = kill_mid_batch(spawn([str(RELAY), "--conf", str(conf)], log), tmp_path / "ck", log)
    run_to_end([str(RELAY), "--conf", str(conf), "--available-now"], log)
    relayed = kit.dump(destination, at_least=count, timeout=RELAY_WINDOW_MS / 1000 + 120)
    expected = Counter(m["bodySha256"] for m in stored)
    got = Counter(m["bodySha256"] for m in relayed)
    assert got == expected, f"{sum((expected - got).values())} bodies missing, {sum((got - expected).values())} extra"
    assert sorted((m["tags"], m["keys"]) for m in relayed) == sorted((m["tags"], m["keys"]) for m in stored)
    MEASURED.append(
        f"RocketMQ {kit.version} test_reader relay: driver killed in micro-batch {killed_in}, {count} bodies in the "
        f"destination once, {time.monotonic() - started:.0f} s in all (commit window {RELAY_WINDOW_MS / 1000:.0f} s, "
        "check-backs every 2 s)"
    )


# -- 5. the group's offsets as mqadmin consumerProgress shows them ----------------------------------------------
def consumer_progress(kit: Kit, group: str, topic: str, *args: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """`mqadmin consumerProgress -g GROUP ARGS`: {(brokerName, queue): (broker offset, consumer offset, diff)} of
    topic. 4.9.8 prints a Client IP column before Diff, 5.3.3 (without -s) none."""
    out = kit.admin("consumerProgress", "-n", kit.namesrv_addr, "-g", group, *args)
    diff_at = 6 if "#Client IP" in out else 5
    table = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) > diff_at and cols[0] == topic:
            table[(cols[1], int(cols[2]))] = (int(cols[3]), int(cols[4]), int(cols[diff_at]))
    return table


@pytest.fixture(scope="module")
def lagging_group(spark, kit: Kit, java_produce, tmp_path_factory) -> dict[str, Any]:
    """A topic of 300 messages the Java producer wrote, read to its end by a streaming query with consumerGroup
    in micro-batches of 100 (Trigger.AvailableNow): the topic, the group, the queues' max offsets and the end
    offsets of each micro-batch (the checkpoint's offset log)."""
    topic = fresh_topic_name("group_lag")
    count = 300
    _, stored = filled(kit, java_produce, topic, count)
    group = f"{topic}_group"
    ck = tmp_path_factory.mktemp("group_lag") / "ck"
    query = (
        spark.readStream.format("rocketmq")
        .option("namesrvAddr", kit.namesrv_addr)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .option("consumerGroup", group)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240), "the query did not end in 240 s"
    assert query.exception() is None, query.exception()
    ends = checkpoint_offsets(ck)
    high = Counter((m["broker"], m["queue"]) for m in stored)
    return {"topic": topic, "group": group, "count": count, "ends": ends, "high": {q: high[q] for q in ends[0]}}


def test_consumer_group_offsets_trail_by_the_last_micro_batch(kit: Kit, lagging_group: dict[str, Any]) -> None:
    topic, group, ends, high = (lagging_group[k] for k in ("topic", "group", "ends", "high"))
    assert sorted(ends) == [0, 1, 2] and ends[2] == high  # 100 offsets a micro-batch, to the end
    # Spark commits micro-batch 1 to the source when it plans micro-batch 2; nothing commits micro-batch 2
    lag = lagging_group["count"] - sum(ends[1].values())
    assert lag == 100
    with PullConsumer(ConsumerConfig(namesrv_addr=kit.namesrv_addr, group=group)) as consumer:
        held = {
            (mq.broker_name, mq.queue_id): consumer.query_consumer_offset(group, mq)
            for mq in consumer.fetch_subscribe_queues(topic)
        }
    assert held == ends[1]
    if kit.major >= 5:  # 5.x mqadmin: consumerProgress -g GROUP -t TOPIC, the topic's route
        progress = consumer_progress(kit, group, topic, "-t", topic)
        assert progress == {q: (high[q], ends[1][q], high[q] - ends[1][q]) for q in high}
        assert sum(d for _, _, d in progress.values()) == lag


def test_consumer_progress_by_group_alone(kit: Kit, lagging_group: dict[str, Any]) -> None:
    """What docs/reading.md says an operator runs: `mqadmin consumerProgress -g GROUP`. mqadmin finds the group's
    brokers through the route of %RETRY%GROUP, which a broker creates at a consumer's heartbeat: the reader
    announces its group once (a heartbeat, then unregister) at its first commit."""
    topic, group, ends, high = (lagging_group[k] for k in ("topic", "group", "ends", "high"))
    progress = consumer_progress(kit, group, topic)
    assert progress == {q: (high[q], ends[1][q], high[q] - ends[1][q]) for q in high}


# -- 6. through the 5.x Proxy -------------------------------------------------------------------------------------
def test_batch_and_stream_reads_through_the_proxy(
    spark,
    kit: Kit,
    proxy_addr: str,
    java_produce,
    real_topic: str,
    tmp_path: Path,
) -> None:
    sent, stored = filled(kit, java_produce, real_topic, 100)
    rows = batch_read(spark, proxy_addr, real_topic)
    assert_rows_are_the_dump(rows, stored, sent, kit, real_topic, proxy=proxy_addr)
    got: list[tuple[str, int, int, str]] = []
    query = (
        spark.readStream.format("rocketmq")
        .option("namesrvAddr", proxy_addr)
        .option("topic", real_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .writeStream.foreachBatch(lambda df, _: got.extend(tuple(r) for r in df.select(*IDENTITY).collect()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240), "the query did not end in 240 s"
    assert query.exception() is None, query.exception()
    assert_each_message_once(got, stored)
