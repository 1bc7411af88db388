"""The halves of exactly_once batches committed through a RocketMQ 5.x Proxy, until their rows are visible.

A Proxy's remoting port answers END_TRANSACTION SUCCESS and drops it (apache/rocketmq#8313, RocketMQ 5.3.3),
so the driver sends none: its brokers check each half back once the half's check immunity (the commit
window after it was sent) is over, at their next check round; the Proxy relays the check to a producer of
the group connected to it (the driver's) and forwards its answer, COMMIT from the transaction log.

A Proxy checks halves back only for the groups it heartbeats to the brokers, and it learns a group from the
transactional halves sent through it (``addTransactionSubscription`` in its send path; remoting clients have
no other way): a Proxy started again after the batch's halves were sent knows nothing of the group, and the
brokers find no producer to ask. So while rows are left, the driver sends one half of its own to each of
their topics every ANNOUNCE_EVERY_S through the Proxy (its SPARK_TXN names the batch but no recorded half:
the check-back rolls it back), which announces the group again. ``settle`` waits until every row is in its
queue (read with pulls: published_scan.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..client.policy import PUBLISHED_CHECK_BACKOFF
from ..client.transaction import TransactionHandle
from ..errors import RocketMQError
from ..protocol.message import Message
from ..protocol.route import MessageQueue
from .published_scan import PublishedScan
from .transaction_ids import PROPERTY_SPARK_TXN, parse_transaction_id

log = logging.getLogger("spark_rocketmq.spark")

#: While rows are left, the driver announces its group through the Proxy this often (a 5.3.3 Proxy
#: heartbeats the groups it knows to the brokers every 20 s, its transactionHeartbeatPeriodSecond).
ANNOUNCE_EVERY_S = 20.0
#: The body of an announcing half (rolled back by its check-back, never visible).
ANNOUNCE_BODY = b"spark-rocketmq: announces this producer group to the RocketMQ Proxy; rolled back"


class ProxyCommits:
    """The halves left to check-backs through a Proxy, and the thread that announces their group while any
    is left; thread-safe."""

    def __init__(self, producer: Callable[[], Any], scan: PublishedScan) -> None:
        self._producer = producer
        self._scan = scan
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        #: Halves whose row was not seen published yet, with their SPARK_TXN.
        self._left: list[tuple[TransactionHandle, str]] = []
        #: Where each queue is read from (the lowest offset of any batch left).
        self._scan_from: dict[MessageQueue, int] = {}
        #: monotonic time by which every half's check immunity is over.
        self.until = 0.0
        self._announcer: threading.Thread | None = None
        self._closed = False

    def add(
        self, handles: list[tuple[TransactionHandle, str]], scan_from: dict[MessageQueue, int], window_s: float
    ) -> None:
        """A batch recorded through a Proxy: its halves are left to check-backs (sent before the record, each
        checked back from ``window_s`` after it was sent)."""
        with self._lock:
            known = {h.offset_msg_id for h, _ in self._left}
            self._left += [(h, txn) for h, txn in handles if h.offset_msg_id not in known]
            for queue, offset in scan_from.items():
                self._scan_from[queue] = min(offset, self._scan_from.get(queue, offset))
            self.until = max(self.until, time.monotonic() + window_s)
            if self._left and self._announcer is None and not self._closed:
                self._announcer = threading.Thread(target=self._announce_while_left, name="rocketmq-proxy-announce",
                                                   daemon=True)  # fmt: skip
                self._announcer.start()

    @property
    def left(self) -> int:
        with self._lock:
            return len(self._left)

    def batches_left(self) -> list[str]:
        """The batches ("<id namespace>/<batch>") with rows left, for the log."""
        with self._lock:
            parsed = {parse_transaction_id(txn) for _, txn in self._left}
        return [f"{p[0]}/{p[1]}" for p in sorted(p for p in parsed if p is not None)]

    def unpublished(self) -> int:
        """Read the queues of the rows left to their ends; how many are still not there."""
        with self._lock:
            left, scan_from = list(self._left), dict(self._scan_from)
        if not left:
            return 0
        try:
            still = {h.offset_msg_id for h in self._scan.unpublished([h for h, _ in left], scan_from)}
        except RocketMQError as exc:
            log.info("exactly_once: cannot read whether the rows are published yet: %s", exc)
            return len(left)
        with self._lock:  # halves added meanwhile stay
            seen = {h.offset_msg_id for h, _ in left} - still
            self._left = [(h, txn) for h, txn in self._left if h.offset_msg_id not in seen]
            return len(self._left)

    def settle(self, deadline: float) -> int:
        """Wait until every row left is in its queue, at most until ``deadline`` (monotonic); how many are not."""
        rounds = 0
        while (left := self.unpublished()) and time.monotonic() < deadline:
            rounds += 1
            time.sleep(min(PUBLISHED_CHECK_BACKOFF.delay(rounds), max(0.0, deadline - time.monotonic())))
        return left

    def announce(self) -> None:
        """One half through the Proxy to each topic with rows left, naming a batch of them and no recorded half."""
        with self._lock:
            topics = {h.topic: txn for h, txn in self._left}
        producer = self._producer()
        for topic, txn in sorted(topics.items()):
            parsed = parse_transaction_id(txn)
            if parsed is None:
                continue
            message = Message(
                topic, ANNOUNCE_BODY, properties={PROPERTY_SPARK_TXN: f"{parsed[0]}/{parsed[1]}/announce/0/0/0"}
            )
            try:
                producer.send_half(message)
            except RocketMQError as exc:  # the Proxy is down: the next round tries again
                log.info("exactly_once: cannot announce group %s through the Proxy for topic %s: %s",
                         producer.config.group, topic, exc)  # fmt: skip

    def _announce_while_left(self) -> None:
        while True:
            with self._lock:
                self._wake.wait(ANNOUNCE_EVERY_S)
                if self._closed:
                    return
            if not self.unpublished():
                with self._lock:
                    if not self._left:
                        self._announcer = None
                        return
            self.announce()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            announcer = self._announcer
        if announcer is not None:
            announcer.join(timeout=10)
