"""A brokerName whose master changes address (an election): the producer follows at its first failure.

A DLedger group or RocketMQ 5's controller elects a new master of a brokerName, which registers under
the same name with another address; Java's producer learns it at its next route poll (30 s by default).
Here the route poll is set to ten minutes, so a send that gets through soon after the change shows the
route was asked for again at the failure (routes.py follow_failure), and the old master's fault mark
dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from spark_rocketmq import Message, Producer, SendStatus
from spark_rocketmq.errors import RocketMQError
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.stored import parse_offset_msg_id

#: Far beyond the test's time: a send that gets through did not wait for the poll.
POLL_MS = 600_000


def _send_until_stored(p: Producer, topic: str, body: bytes, within_s: float) -> str:
    """Send until one is stored (each failure is what a user would see meanwhile); the storing broker's
    address, from the message's offset id."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            result = p.send(Message(topic, body))
        except RocketMQError:
            if time.monotonic() > deadline:
                raise
            continue
        assert result.status is SendStatus.SEND_OK
        host, port, _ = parse_offset_msg_id(result.offset_msg_id)
        return f"{host}:{port}"


def test_sends_follow_a_new_master_of_the_same_broker_name(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1)
    cluster.create_topic("Elected", queues=4)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="failover", poll_name_server_interval_ms=POLL_MS) as p:
        old_addr = _send_until_stored(p, "Elected", b"before", within_s=5.0)
        new_addr = cluster.fail_over("broker-a").addr
        assert new_addr != old_addr
        assert _send_until_stored(p, "Elected", b"after", within_s=30.0) == new_addr
    assert sorted(m.body for m in cluster.messages("Elected")) == [b"after", b"before"]
