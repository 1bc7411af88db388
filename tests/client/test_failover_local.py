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


def test_sends_go_to_masters_only_and_leave_a_broker_name_whose_master_died(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """Routes list each brokerName's master (brokerId 0) and its slaves; sends go to masters only. With
    broker-a's master gone and its slave alive, broker-a stays in the route without a master: every send
    goes to broker-b, none to the slave."""
    cluster = make_cluster(brokers=2)
    cluster.create_topic("Replicated", queues=4)
    slave = cluster.add_slave("broker-a")
    with Producer(namesrv_addr=cluster.namesrv_addr, group="slaves", poll_name_server_interval_ms=POLL_MS) as p:
        route = p.fetch_publish_queues("Replicated")
        assert {q.broker_name for q in route} == {"broker-a", "broker-b"}
        masters = {cluster.broker(name).addr for name in ("broker-a", "broker-b")}
        stored_before = [_send_until_stored(p, "Replicated", f"both-{i}".encode(), within_s=5.0) for i in range(40)]
        cluster.broker("broker-a").stop()  # the master dies; its slave stays
        stored_after = [_send_until_stored(p, "Replicated", f"one-{i}".encode(), within_s=30.0) for i in range(40)]
    assert slave.sends == 0
    assert set(stored_before) == masters
    assert set(stored_after) == {cluster.broker("broker-b").addr}
