"""The halves of batches committed through a RocketMQ Proxy while their rows are not visible yet
(spark/proxy_commit.py): the driver's announcing halves, which its own check-back answers roll back, and the
bound of close()'s wait. The whole path against a local Proxy: tests/spark/test_exactly_once_local.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from spark_rocketmq.client.pull_consumer import PullResult
from spark_rocketmq.client.transaction import TransactionHandle
from spark_rocketmq.protocol.message import Message, encode_properties
from spark_rocketmq.protocol.pull import PullStatus
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.protocol.stored import encode_stored_message, offset_msg_id
from spark_rocketmq.protocol.transaction import TransactionState
from spark_rocketmq.spark.proxy_commit import ProxyCommits
from spark_rocketmq.spark.published_scan import QueueScan
from spark_rocketmq.spark.transaction_ids import PROPERTY_SPARK_TXN
from spark_rocketmq.spark.transaction_log import TransactionLog

ADDR = "127.0.0.1:10911"


def _half(topic: str, i: int) -> TransactionHandle:
    return TransactionHandle(
        topic, "broker-a", ADDR, i % 2, 4096 + i, i, f"U{i}", offset_msg_id("127.0.0.1", 10911, 4096 + i)
    )


class NeverPublished:
    """A PublishedScan whose queues never show the rows."""

    def unpublished(self, handles: Any, from_offsets: Any) -> list[TransactionHandle]:
        return list(handles)


class HalfSender:
    """A driver producer that keeps the halves it is asked to send."""

    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send_half(self, message: Message) -> None:
        self.sent.append(message)


def test_announcing_halves_name_each_topic_left_and_are_rolled_back_by_the_log(tmp_path: Path) -> None:
    tlog = TransactionLog(str(tmp_path / "txlog"))
    halves = [(_half("Orders", i), f"q/7/run1/0/0/{i}") for i in range(4)]
    halves += [(_half("Payments", 10 + i), f"q/8/run1/0/0/{i}") for i in range(2)]
    tlog.record("q", 7, halves[:4], 0, scan_from={MessageQueue("Orders", "broker-a", 0): 0})
    tlog.record("q", 8, halves[4:], 0, scan_from={MessageQueue("Payments", "broker-a", 0): 0})
    producer = HalfSender()
    left = ProxyCommits(lambda: producer, NeverPublished())  # type: ignore[arg-type]
    try:
        left.add(halves, {}, window_s=0.0)
        left.announce()
        assert left.batches_left() == ["q/7", "q/8"]
        assert left.settle(time.monotonic() + 0.2) == 6  # not visible: given up at the deadline
    finally:
        left.close()
    assert sorted(m.topic for m in producer.sent) == ["Orders", "Payments"]
    for message in producer.sent:  # each names its topic's batch, and none of its recorded halves
        txn = (message.properties or {})[PROPERTY_SPARK_TXN]
        answer = tlog.answer(txn, f"announce-{message.topic}", ADDR, lambda: False, queue_id=0)
        assert answer is TransactionState.ROLLBACK, (txn, answer)


class Queues:
    """A PublishedScan of queues whose rows this test publishes by hand."""

    def __init__(self) -> None:
        self.published: set[str] = set()
        self.asked: list[tuple[str, int]] = []

    def unpublished(self, handles: Any, from_offsets: dict[MessageQueue, int]) -> list[TransactionHandle]:
        handles = list(handles)
        self.asked += [(h.msg_id, from_offsets[MessageQueue(h.topic, h.broker_name, h.queue_id)]) for h in handles]
        return [h for h in handles if h.msg_id not in self.published]


def test_check_backs_of_a_batch_recorded_through_a_proxy_commit_at_once_and_read_its_queue(tmp_path: Path) -> None:
    """No window to wait for (the driver sent no COMMIT), no QUERY_MESSAGE: the row's queue is read from the
    offset taken before the record; a copy checked after its row shows is rolled back."""
    tlog = TransactionLog(str(tmp_path / "txlog"))
    queues = Queues()
    tlog.scan = queues  # type: ignore[assignment]
    half = _half("Orders", 0)
    tlog.record("q", 9, [(half, "q/9/run1/0/0/0")], 2**62, scan_from={MessageQueue("Orders", "broker-a", 0): 77})

    def answer() -> TransactionState:
        return tlog.answer("q/9/run1/0/0/0", "U0", ADDR, lambda: pytest.fail("QUERY_MESSAGE asked"), queue_id=0)

    assert answer() is TransactionState.COMMIT  # at once, though the commit deadline given is far away
    assert answer() is TransactionState.UNKNOWN  # another copy, its row not in its queue yet: the COMMIT may come
    queues.published.add("U0")
    assert answer() is TransactionState.ROLLBACK  # a copy of a published row
    assert queues.asked == [("U0", 77)] * 3
    # read again from the record: a restarted driver answers the same
    again = TransactionLog(str(tmp_path / "txlog"))
    again.scan = queues  # type: ignore[assignment]
    assert again.answer("q/9/run1/0/0/0", "U0", ADDR, lambda: False, queue_id=0) is TransactionState.ROLLBACK
    assert again.answer("q/9/run2/0/0/0", "U0", ADDR, lambda: False, queue_id=0) is TransactionState.ROLLBACK


class Pulls:
    """A pull consumer of one queue holding ``keys`` at offsets 0, 1, ..."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        self.pulled_from: list[int] = []

    def pull(self, mq: MessageQueue, offset: int, max_nums: int) -> Any:
        self.pulled_from.append(offset)
        end = min(len(self.keys), offset + max_nums)
        if offset >= len(self.keys):
            return PullResult(PullStatus.NO_NEW_MSG, offset, 0, len(self.keys), 0, b"", ADDR)
        body = b"".join(
            encode_stored_message(
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=i,
                commit_log_offset=1000 * i,
                sys_flag=0,
                flag=0,
                born_timestamp=1,
                born_host=("127.0.0.1", 1),
                store_timestamp=1,
                store_host=("127.0.0.1", 10911),
                body=b"x",
                properties=encode_properties({"UNIQ_KEY": self.keys[i]}),
            )
            for i in range(offset, end)
        )
        return PullResult(PullStatus.FOUND, end, 0, len(self.keys), 0, body, ADDR)


def test_a_queue_is_read_once_and_again_from_an_earlier_batch_offset() -> None:
    queue = MessageQueue("Orders", "broker-a", 0)
    pulls = Pulls(["A", "B", "C", "D"])
    scan = QueueScan(queue, 2)
    scan.want(["C", "D"], 2)
    scan.read_to_end(pulls)  # type: ignore[arg-type]
    assert set(scan.found) == {"C", "D"} and scan.cursor == 4
    scan.want(["A"], 0)  # a batch recorded earlier: its row may be behind the cursor
    scan.read_to_end(pulls)  # type: ignore[arg-type]
    assert set(scan.found) == {"A", "C", "D"} and not scan.wanted
    assert pulls.pulled_from == [2, 0]  # each read stops at the end its first answer gave
    pulls.keys.append("E")  # stored since: read at the next look-up, from where the last one stopped
    scan.want(["E"], 4)  # a later batch's offset
    scan.read_to_end(pulls)  # type: ignore[arg-type]
    assert "E" in scan.found and pulls.pulled_from == [2, 0, 4]
