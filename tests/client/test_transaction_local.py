"""Transactional sends against the local brokers: half messages invisible until committed, rolled-back
ones never visible, check-backs answered over the producer's own connection, and the header fields."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from spark_rocketmq import BrokerError, InvalidMessageError, Message, Producer
from spark_rocketmq.client.transaction import TransactionCheck, TransactionHandle
from spark_rocketmq.errors import ConfigError, IndexBehindError, ProtocolError
from spark_rocketmq.local import LocalCluster
from spark_rocketmq.protocol.codes import RequestCode, SysFlag
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    TransactionState,
)


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def cluster(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    c = make_cluster(request_log=200, transaction_check_interval_ms=200, transaction_timeout_ms=300)
    c.create_topic("Tx", queues=2)
    return c


def bodies(cluster: LocalCluster, topic: str) -> list[bytes]:
    return sorted(m.body for m in cluster.messages(topic))


def unresolved(cluster: LocalCluster) -> int:
    return sum(len(b.transactions.unresolved()) for b in cluster.brokers.values())


def test_half_is_invisible_until_commit_and_rollback_never_shows(cluster: LocalCluster) -> None:
    decided: list[str] = []

    def listener(check: TransactionCheck) -> TransactionState:
        decided.append(check.message.body.decode())
        return TransactionState.UNKNOWN

    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-writer", transaction_listener=listener) as p:
        futures = [p.send_half_async(Message("Tx", f"row-{i}".encode()), check_immunity_s=60) for i in range(20)]
        handles = [f.result(10) for f in futures]
        assert bodies(cluster, "Tx") == []  # stored as halves only
        assert sum(len(list(b.store.messages(HALF_TOPIC))) for b in cluster.brokers.values()) == 20
        for i, h in enumerate(handles):
            p.end_transaction(h, TransactionState.COMMIT if i % 2 == 0 else TransactionState.ROLLBACK)
    stored = cluster.messages("Tx")
    assert sorted(m.body for m in stored) == sorted(f"row-{i}".encode() for i in range(0, 20, 2))
    assert {m.uniq_key for m in stored} == {h.msg_id for h in handles[::2]}
    assert all(m.sys_flag & SysFlag.TRANSACTION_ROLLBACK == SysFlag.TRANSACTION_COMMIT for m in stored)
    assert unresolved(cluster) == 0
    assert sum(len(list(b.store.messages(OP_HALF_TOPIC))) for b in cluster.brokers.values()) == 20
    assert decided == []  # CHECK_IMMUNITY_TIME_IN_SECONDS kept the check service away


def test_check_back_commits_and_rolls_back_through_the_listener(cluster: LocalCluster) -> None:
    def listener(check: TransactionCheck) -> TransactionState:
        return TransactionState.COMMIT if check.message.body.startswith(b"yes") else TransactionState.ROLLBACK

    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-checked", transaction_listener=listener) as p:
        for f in [p.send_half_async(Message("Tx", f"{w}-{i}".encode())) for w in ("yes", "no") for i in range(5)]:
            f.result(10)
        wait_for(lambda: unresolved(cluster) == 0, what="every half resolved by a check-back")
        counters = p.transaction_checks()
    assert bodies(cluster, "Tx") == sorted(f"yes-{i}".encode() for i in range(5))
    assert (counters.commits, counters.rollbacks) == (5, 5)
    answers: dict[str, int] = {}
    for b in cluster.brokers.values():
        for k, v in b.transactions.counters.check_answers.items():
            answers[k] = answers.get(k, 0) + v
    assert answers == {"COMMIT": 5, "ROLLBACK": 5}


def test_unknown_is_asked_again_then_discarded_after_check_max(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(transaction_check_interval_ms=100, transaction_timeout_ms=100, transaction_check_max=3)
    asked: list[str] = []

    def listener(check: TransactionCheck) -> TransactionState:
        asked.append(check.msg_id)
        return TransactionState.UNKNOWN

    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-unsure", transaction_listener=listener) as p:
        h = p.send_half(Message("TxUnsure", b"x"))
        wait_for(lambda: unresolved(cluster) == 0, what="the half discarded")
        # The checks are oneway: the listener may still be answering the last ones.
        wait_for(lambda: len(asked) >= 3, what="the listener asked three times")
    assert asked == [h.msg_id] * 3
    assert cluster.messages("TxUnsure") == []
    assert sum(b.transactions.counters.discarded for b in cluster.brokers.values()) == 1


def test_second_commit_publishes_again_as_a_4_9_8_broker_does(cluster: LocalCluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-twice") as p:
        h = p.send_half(Message("Tx", b"once?"), check_immunity_s=60)
        assert not p.is_published(h.topic, h.msg_id, h.broker_addr)
        p.end_transaction(h, TransactionState.COMMIT)
        assert p.is_published(h.topic, h.msg_id, h.broker_addr)
        p.end_transaction(h, TransactionState.COMMIT)
    assert bodies(cluster, "Tx") == [b"once?", b"once?"]


def test_a_lookup_that_finds_nothing_while_the_index_lacks_the_copy_asked_about_cannot_tell(
    cluster: LocalCluster,
) -> None:
    """A loaded broker indexes a message a while after storing it. A check-back names the half's copy (its
    commit-log offset): when the row is not found and the index does not hold that copy yet, "not found"
    says nothing (IndexBehindError); once it holds it, it does."""
    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-index") as p:
        h = p.send_half(Message("Tx", b"indexed?"), check_immunity_s=60)
        assert p.is_published(h.topic, h.msg_id, h.broker_addr, indexed_through=h.commit_log_offset) is False
        with pytest.raises(IndexBehindError, match=f"does not hold the half's copy at commit-log offset {1 << 40}"):
            p.is_published(h.topic, h.msg_id, h.broker_addr, indexed_through=1 << 40)  # a copy not indexed yet
        p.end_transaction(h, TransactionState.COMMIT)
        assert p.is_published(h.topic, h.msg_id, h.broker_addr, indexed_through=1 << 40) is True


def test_end_transaction_refusals_name_the_reason(cluster: LocalCluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-a") as p:
        h = p.send_half(Message("Tx", b"a"), check_immunity_s=60)
    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-b") as other:
        with pytest.raises(BrokerError, match="producer group wrong"):
            other.end_transaction(h, TransactionState.COMMIT)
        bogus = dataclasses.replace(h, commit_log_offset=h.commit_log_offset + 1)
        with pytest.raises(BrokerError, match="Find prepared transaction message failed"):
            other.end_transaction(bogus, TransactionState.ROLLBACK)
    assert bodies(cluster, "Tx") == []


def test_half_request_fields_and_refusals(cluster: LocalCluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-fields") as p:
        with pytest.raises(InvalidMessageError, match="cannot be delayed"):
            p.send_half(Message("Tx", b"d", delay_level=3))
        h = p.send_half(Message("Tx", b"f", tags="T"), check_immunity_s=30)
        p.end_transaction(h, TransactionState.ROLLBACK)
    broker = cluster.broker(h.broker_name)
    (send,) = [c for c in broker.received(RequestCode.SEND_MESSAGE_V2)]
    assert int(send.require("f")) & SysFlag.TRANSACTION_ROLLBACK == SysFlag.TRANSACTION_PREPARED
    props = send.require("i")
    for kv in ("TRAN_MSG\x01true", "PGROUP\x01tx-fields", "CHECK_IMMUNITY_TIME_IN_SECONDS\x0130", "TAGS\x01T"):
        assert kv in props
    (end,) = broker.received(RequestCode.END_TRANSACTION)
    header = EndTransactionRequestHeader.from_command(end)
    assert header == EndTransactionRequestHeader(
        producer_group="tx-fields",
        tran_state_table_offset=h.tran_state_table_offset,
        commit_log_offset=h.commit_log_offset,
        commit_or_rollback=TransactionState.ROLLBACK,
        msg_id=h.msg_id,
        transaction_id=h.transaction_id,
        from_transaction_check=False,
        broker_name=h.broker_name,
    )


def test_handle_rows_round_trip_and_refuse_garbage(cluster: LocalCluster) -> None:
    with Producer(namesrv_addr=cluster.namesrv_addr, group="tx-rows") as p:
        h = p.send_half(Message("Tx", b"r"), check_immunity_s=60)
        p.end_transaction(h, TransactionState.ROLLBACK)
    assert TransactionHandle.from_row(json.loads(json.dumps(h.to_row()))) == h
    assert h.broker_addr == cluster.broker(h.broker_name).addr
    with pytest.raises(ProtocolError, match="not a transaction handle"):
        TransactionHandle.from_row(["Tx", "broker-a", 0])
    with pytest.raises(ProtocolError, match="differs"):
        TransactionHandle.from_row([*h.to_row()[:3], h.commit_log_offset + 1, *h.to_row()[4:]])


def test_header_round_trips() -> None:
    end = EndTransactionRequestHeader("g", 7, 1234, TransactionState.COMMIT, "AB" * 16, "AB" * 16, True, "broker-a")
    cmd = end.command()
    assert cmd.code == RequestCode.END_TRANSACTION == 37
    assert cmd.field("commitOrRollback") == "8"
    assert EndTransactionRequestHeader.from_command(cmd) == end
    check = CheckTransactionStateRequestHeader(3, 99, "AB" * 16, "AB" * 16, "CD" * 16)
    assert RequestCode.CHECK_TRANSACTION_STATE == 39
    assert CheckTransactionStateRequestHeader.from_command(RemotingCommand(39, ext_fields=check.to_fields())) == check
    with pytest.raises(ProtocolError, match="commitOrRollback field wrong"):
        EndTransactionRequestHeader.from_command(
            RemotingCommand(37, ext_fields={**end.to_fields(), "commitOrRollback": "5"})
        )


def _check_request(uniq: str, offset: int) -> RemotingCommand:
    from spark_rocketmq.protocol.stored import encode_stored_message, offset_msg_id

    host = ("127.0.0.1", 10911)
    body = encode_stored_message(
        topic=HALF_TOPIC, queue_id=0, queue_offset=0, commit_log_offset=offset, sys_flag=4, flag=0,
        born_timestamp=1, born_host=host, store_timestamp=1, store_host=host, body=b"x",
        properties=f"UNIQ_KEY\x01{uniq}\x02",
    )  # fmt: skip
    header = CheckTransactionStateRequestHeader(0, offset, uniq, uniq, offset_msg_id(*host, offset))
    return RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=header.to_fields(), body=body)


def test_check_threads_answer_check_backs_side_by_side() -> None:
    """With check_threads, answers that each wait (a listener looking a row up on a broker) overlap:
    four checks of four halves are all in the listener at once, and each is answered."""
    import threading

    from spark_rocketmq.client.transaction import CheckResponder

    together = threading.Barrier(4, timeout=10)

    def listener(check: TransactionCheck) -> TransactionState:
        together.wait()  # BrokenBarrierError (an UNKNOWN answer) unless four threads are in here at once
        return TransactionState.COMMIT

    written: list[RemotingCommand] = []
    for bad in (0, 1.5):
        with pytest.raises(ConfigError, match="check_threads"):
            CheckResponder("g", listener, written.append, threads=bad)  # type: ignore[arg-type]
    responder = CheckResponder("g", listener, lambda conn, cmd: written.append(cmd), threads=4)
    try:
        for i, uniq in enumerate("ABCD"):
            responder.on_request(None, "127.0.0.1:10911", _check_request(uniq, 100 * (i + 1)))
        wait_for(lambda: len(written) == 4, what="four answers")
    finally:
        responder.close()
    assert sorted(cmd.field("commitOrRollback") for cmd in written) == [str(int(TransactionState.COMMIT))] * 4
    assert responder.counters.commits == 4


def test_a_newer_copy_of_a_waiting_check_replaces_it() -> None:
    """Checks of one half (copies, 4.9.8) that wait for the listener are answered once, the newest."""
    import threading

    from spark_rocketmq.client.transaction import CheckResponder

    release = threading.Event()
    asked: list[int] = []

    def listener(check: TransactionCheck) -> TransactionState:
        asked.append(check.header.commit_log_offset)
        release.wait(10)
        return TransactionState.UNKNOWN

    written: list[RemotingCommand] = []
    responder = CheckResponder("g", listener, lambda conn, cmd: written.append(cmd))

    check = _check_request

    try:
        responder.on_request(None, "127.0.0.1:10911", check("A", 100))  # taken by the checker thread
        wait_for(lambda: asked == [100], what="the first check answered")
        for offset in (200, 300, 400):  # copies of B while the checker is busy: the newest replaces them
            responder.on_request(None, "127.0.0.1:10911", check("B", offset))
        release.set()
        wait_for(lambda: len(written) == 2, what="two answers")
    finally:
        responder.close()
    assert asked == [100, 400]
    assert responder.counters.dropped == 2


def test_a_check_back_answer_is_told_to_the_hooks_before_it_is_written_even_when_the_write_fails() -> None:
    """As Java's checkTransactionState calls the end-transaction hooks before endTransactionOneway: a hook
    sees the answer whose write then fails (the broker asks again at its next check)."""
    from spark_rocketmq.client.transaction import CheckResponder
    from spark_rocketmq.errors import RemotingError

    told: list[tuple[str, TransactionState]] = []

    def write(conn: object, cmd: RemotingCommand) -> None:
        raise RemotingError("connection to 127.0.0.1:10911 closed")

    responder = CheckResponder(
        "g",
        lambda check: TransactionState.ROLLBACK,
        write,
        on_answered=lambda check, state: told.append((check.msg_id, state)),
    )
    try:
        responder.on_request(None, "127.0.0.1:10911", _check_request("A", 100))
        wait_for(lambda: responder.counters.errors == 1, what="the failed write")
    finally:
        responder.close()
    assert told == [("A", TransactionState.ROLLBACK)]
    assert responder.counters.checks == 0  # counted as answered only once written
