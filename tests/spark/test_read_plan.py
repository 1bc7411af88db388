"""Planning a read: offsets JSON, positions resolved against a cluster's answers, tasks' shares, admission."""

from __future__ import annotations

import pytest

from spark_rocketmq.errors import ConfigError
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.spark.offsets import (
    Position,
    check_named_queues,
    from_json_dict,
    parse_spec,
    resolve,
    to_json_dict,
)
from spark_rocketmq.spark.read_plan import QueueRange, admit, queue_ranges, split_ranges

A0, A1, B0 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1), MessageQueue("T", "broker-b", 0)


class FakeCluster:
    """Offsets a cluster would answer: min, max, by timestamp, and a group's committed ones."""

    def __init__(self) -> None:
        self.low = {A0: 5, A1: 0, B0: 0}
        self.high = {A0: 100, A1: 10, B0: 0}
        self.group = {A0: 50}

    def min_offset(self, mq: MessageQueue) -> int:
        return self.low[mq]

    def max_offset(self, mq: MessageQueue) -> int:
        return self.high[mq]

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return min(self.high[mq], timestamp_ms // 1000)

    def query_consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        return self.group.get(mq) if group == "g" else None


def test_offsets_json_round_trips_in_the_checkpoint_form() -> None:
    offsets = {B0: 3, A1: 7, A0: 2}
    data = to_json_dict(offsets)
    assert data == {"T": {"broker-a": {"0": 2, "1": 7}, "broker-b": {"0": 3}}}
    assert from_json_dict(data, "x") == offsets


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "not valid JSON"),
        ('{"T": {"broker-a": {"x": 1}}}', "queue id 'x' is not an integer"),
        ('{"T": {"broker-a": {"0": "7"}}}', "is no integer"),
        ('{"T": {"broker-a": {"0": -3}}}', "-2: earliest, -1: latest"),
        ("newest", "give earliest, latest, group"),
    ],
)
def test_bad_offsets_options_name_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match="startingOffsets") as info:
        parse_spec(text, "startingOffsets")
    assert words in str(info.value)


def test_json_naming_a_broker_or_queue_that_does_not_exist_is_refused() -> None:
    queues = [A0, A1, B0]
    with pytest.raises(ConfigError, match="no queue on broker 'broker-z'"):
        check_named_queues({MessageQueue("T", "broker-z", 0): 1}, queues, "startingOffsets", ["T"])
    with pytest.raises(ConfigError, match=r"has no queue 7 \(its queues are 0-1\)"):
        check_named_queues({MessageQueue("T", "broker-a", 7): 1}, queues, "startingOffsets", ["T"])
    with pytest.raises(ConfigError, match="names topic 'U', which is not read"):
        check_named_queues({MessageQueue("U", "broker-a", 0): 1}, queues, "startingOffsets", ["T"])


def test_positions_resolve_per_queue() -> None:
    cluster = FakeCluster()
    queues = [A0, A1, B0]
    earliest = resolve(Position.of(None, None, "earliest", "startingOffsets"), queues, cluster, fallback="earliest")
    assert earliest == {A0: 5, A1: 0, B0: 0}
    latest = resolve(Position.of("latest", None, "earliest", "startingOffsets"), queues, cluster, fallback="earliest")
    assert latest == {A0: 100, A1: 10, B0: 0}
    by_time = resolve(Position.of(None, 7000, "earliest", "startingOffsets"), queues, cluster, fallback="earliest")
    assert by_time == {A0: 7, A1: 7, B0: 0}
    spec = '{"T": {"broker-a": {"0": 23, "1": -1}}}'
    mixed = resolve(Position.of(spec, None, "earliest", "startingOffsets"), queues, cluster, fallback="earliest")
    assert mixed == {A0: 23, A1: 10, B0: 0}  # B0 is left out: the fallback
    group = resolve(Position.of("group", None, "latest", "s"), queues, cluster, fallback="latest", group="g")
    assert group == {A0: 50, A1: 10, B0: 0}


def test_a_group_offset_beyond_the_queue_max_starts_at_the_max() -> None:
    cluster = FakeCluster()
    cluster.group[A1] = 25  # the queue was reset to 10 since the group committed 25
    group = resolve(Position.of("group", None, "latest", "s"), [A0, A1, B0], cluster, fallback="latest", group="g")
    assert group == {A0: 50, A1: 10, B0: 0}


def test_an_offset_beyond_the_queue_max_is_refused_naming_the_queue() -> None:
    spec = Position.of('{"T": {"broker-a": {"1": 11}}}', None, "earliest", "startingOffsets")
    with pytest.raises(ConfigError, match=r"offset 11 of topic 'T' / 'broker-a' / queue 1 is beyond .* max offset 10"):
        resolve(spec, [A0, A1, B0], FakeCluster(), fallback="earliest")


def test_one_task_per_queue_unless_split_and_small_ranges_packed() -> None:
    big = queue_ranges({A0: 0, A1: 0}, {A0: 100_000, A1: 50_000, B0: 0})
    assert [r.size for r in big] == [100_000, 50_000]  # B0 (empty) is not read
    assert [[r.size for r in task] for task in split_ranges(big, None)] == [[100_000], [50_000]]
    # minPartitions=6: the 150,000 offsets in shares of about 25,000, each range split, none merged across queues
    tasks = split_ranges(big, 6)
    assert [[r.size for r in t] for t in tasks] == [[25_000]] * 4 + [[25_000]] * 2
    assert {(r.queue_id, r.start) for t in tasks for r in t} == {
        (0, 0),
        (0, 25_000),
        (0, 50_000),
        (0, 75_000),
        (1, 0),
        (1, 25_000),
    }
    small = [QueueRange("T", "broker-a", q, 0, 10) for q in range(8)]
    assert [len(t) for t in split_ranges(small, None)] == [8]  # 80 offsets: one task, not eight


def test_admission_spreads_the_limit_by_backlog_without_starving_small_queues() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    latest = {A0: 10_000, A1: 3, B0: 0}
    end = admit(start, latest, 100)
    assert sum(end[q] - start[q] for q in start) == 100
    assert end[A1] >= 1  # the small queue gets its share
    assert end[B0] == 0
    assert admit(start, latest, None) == latest
    assert admit(start, {A0: 50, A1: 3, B0: 0}, 100) == {A0: 50, A1: 3, B0: 0}
