"""The halves of batches committed through a RocketMQ Proxy while their rows are not visible yet
(spark/proxy_commit.py): the driver's announcing halves, which its own check-back answers roll back, and the
bound of close()'s wait. The whole path against a local Proxy: tests/spark/test_exactly_once_local.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from spark_rocketmq.client.transaction import TransactionHandle
from spark_rocketmq.protocol.message import Message
from spark_rocketmq.protocol.route import MessageQueue
from spark_rocketmq.protocol.stored import offset_msg_id
from spark_rocketmq.protocol.transaction import TransactionState
from spark_rocketmq.spark.proxy_commit import ProxyCommits
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
