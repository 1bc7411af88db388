"""The local broker under stress as a 4.9.8 broker behaves: the send queue's 200 ms rule, a full
queue, a hung (SIGSTOPped) broker, and the ack-only mode. Raw sockets and the protocol layer only."""

from __future__ import annotations

import re
import select
import socket
import threading
import time
from collections.abc import Callable

import pytest

from spark_rocketmq.local import LocalBroker, LocalCluster
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.frame import FrameDecoder
from spark_rocketmq.protocol.message import encode_batch_body, encode_properties
from spark_rocketmq.protocol.stored import (
    encode_stored_message,
    encode_stored_records,
    index_stored_records,
    offset_msg_id,
    offset_msg_ids,
    parse_offset_msg_id,
    split_batch_body,
)

from .wire import Wire, send_request

TIMEOUT_CLEAN_QUEUE = re.compile(
    r"\[TIMEOUT_CLEAN_QUEUE\]broker busy, start flow control for a while, "
    r"period in queue: (\d+)ms, size of queue: (\d+)"
)
OVERLOAD = "[OVERLOAD]system busy, start flow control for a while"


def frames(topic: str, bodies: list[bytes], first_opaque: int = 1) -> bytes:
    """SEND_MESSAGE_V2 requests for queue 0, one per body, opaques counting up."""
    out = []
    for i, body in enumerate(bodies):
        cmd = send_request(topic, body=body)
        cmd.opaque = first_opaque + i
        out.append(cmd.encode())
    return b"".join(out)


def read_answers(
    sock: socket.socket, decoder: FrameDecoder, count: int, timeout: float = 20.0
) -> dict[int, RemotingCommand]:
    """The next `count` answers, by opaque (each opaque answered once)."""
    deadline = time.monotonic() + timeout
    got: dict[int, RemotingCommand] = {}
    while len(got) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{len(got)} of {count} answers in {timeout} s")
        sock.settimeout(left)
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("broker closed the connection")
        for answer in decoder.feed(data):
            assert answer.opaque not in got, f"opaque {answer.opaque} answered twice"
            got[answer.opaque] = answer
    return got


def nothing_to_read(sock: socket.socket, window: float = 0.5) -> bool:
    """No byte arrives within the window (an observation, not a synchronisation)."""
    readable, _, _ = select.select([sock], [], [], window)
    return not readable


def poll(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout} s")
        time.sleep(0.005)  # polling interval of a deadline-bounded wait


# -- the send queue ----------------------------------------------------------------------------------


def test_a_burst_behind_a_slow_broker_is_answered_busy_after_200_ms(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1)
    cluster.create_topic("Burst", queues=1)
    broker = cluster.broker("broker-a")
    broker.inject(latency_ms=100)
    n = 20
    wire = Wire(broker.addr)
    wire.sock.sendall(frames("Burst", [f"m{i}".encode() for i in range(n)]))
    answers = read_answers(wire.sock, wire.decoder, n)
    wire.close()

    ok = [i for i in range(1, n + 1) if answers[i].code == ResponseCode.SUCCESS]
    busy = [i for i in range(1, n + 1) if answers[i].code == ResponseCode.SYSTEM_BUSY]
    assert sorted(ok + busy) == list(range(1, n + 1))
    assert ok[0] == 1 and busy[-1] == n  # the first ran at once; the last waited past 200 ms
    sizes = []
    for i in busy:
        answer = answers[i]
        m = TIMEOUT_CLEAN_QUEUE.fullmatch(answer.remark or "")
        assert m, answer.remark
        assert int(m.group(1)) >= 200
        sizes.append(int(m.group(2)))
        assert answer.ext_fields is None and answer.is_response
    # Taken from the head one by one: each answer names the queue size left behind it.
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes) and sizes[-1] == 0
    # What was answered SEND_OK is stored, and nothing else.
    assert sorted(m.body for m in cluster.messages("Burst")) == sorted(f"m{i - 1}".encode() for i in ok)
    assert [int(answers[i].field("queueOffset") or -1) for i in ok] == list(range(len(ok)))


def test_without_a_wait_limit_a_slow_broker_stores_the_whole_burst(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, wait_time_mills_in_send_queue=0)
    cluster.create_topic("Patient", queues=1)
    broker = cluster.broker("broker-a")
    broker.inject(latency_ms=60)
    wire = Wire(broker.addr)
    wire.sock.sendall(frames("Patient", [f"m{i}".encode() for i in range(6)]))
    answers = read_answers(wire.sock, wire.decoder, 6)
    wire.close()
    assert [answers[i].code for i in range(1, 7)] == [ResponseCode.SUCCESS] * 6
    assert [answers[i].field("queueOffset") for i in range(1, 7)] == [str(i) for i in range(6)]


def test_a_full_send_queue_answers_overload_at_once(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, wait_time_mills_in_send_queue=0, send_queue_capacity=2)
    cluster.create_topic("Full", queues=1)
    broker = cluster.broker("broker-a")
    broker.inject(latency_ms=100)
    n = 8
    wire = Wire(broker.addr)
    wire.sock.sendall(frames("Full", [f"m{i}".encode() for i in range(n)]))
    answers = read_answers(wire.sock, wire.decoder, n)
    wire.close()
    overload = [i for i, a in answers.items() if a.code == ResponseCode.SYSTEM_BUSY]
    ok = [i for i, a in answers.items() if a.code == ResponseCode.SUCCESS]
    assert all(answers[i].remark == OVERLOAD for i in overload)
    # The send thread holds one request, the queue two more: the rest are refused.
    assert n - 3 <= len(overload) <= n - 2 and len(ok) + len(overload) == n
    assert len(cluster.messages("Full")) == len(ok)


def test_heartbeats_are_answered_while_sends_queue(make_cluster: Callable[..., LocalCluster]) -> None:
    from spark_rocketmq.protocol.headers import heartbeat_request

    cluster = make_cluster(brokers=1, wait_time_mills_in_send_queue=0)
    cluster.create_topic("Slow", queues=1)
    broker = cluster.broker("broker-a")
    broker.inject(latency_ms=300)
    wire = Wire(broker.addr)
    beat = heartbeat_request("client-1", ["g"], opaque=99).encode()
    wire.sock.sendall(frames("Slow", [b"a", b"b"]) + beat)
    first = read_answers(wire.sock, wire.decoder, 1)
    assert list(first) == [99] and first[99].code == ResponseCode.SUCCESS  # not behind the sends
    rest = read_answers(wire.sock, wire.decoder, 2)
    wire.close()
    assert sorted(rest) == [1, 2] and all(a.code == ResponseCode.SUCCESS for a in rest.values())


# -- hang / resume ---------------------------------------------------------------------------------


def test_a_hung_broker_reads_and_answers_nothing_until_resumed(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, wait_time_mills_in_send_queue=0)
    cluster.create_topic("Frozen", queues=1)
    broker = cluster.broker("broker-a")
    ns = cluster.namesrvs[0]

    # One request on the send thread, one queued behind it, then the broker stops.
    early = Wire(broker.addr)
    broker.inject(latency_ms=300)
    early.sock.sendall(frames("Frozen", [b"running", b"queued"]))
    poll(lambda: broker.send_queue_size == 1, what="one send running, one queued")
    broker.hang()
    assert broker.hung

    # A client with a small send buffer writes until its writes cannot progress.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    host, _, port = broker.addr.rpartition(":")
    sock.connect((host, int(port)))  # the kernel completes it; the broker reads nothing
    sock.setblocking(False)
    pending = b""
    sent_frames = 0
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "writes to a hung broker never blocked"
        if not pending:
            cmd = send_request("Frozen", body=b"x" * 65536)
            sent_frames += 1
            cmd.opaque = sent_frames
            pending = cmd.encode()
        try:
            pending = pending[sock.send(pending) :]
            continue
        except BlockingIOError:
            pass
        _, writable, _ = select.select([], [sock], [], 0.5)
        if not writable:
            break  # the socket stayed full: nothing drains it
    assert sent_frames > 1
    assert nothing_to_read(early.sock) and nothing_to_read(sock, 0.1)  # nothing answered, not even the first

    # A hung broker stops registering: the NameServer expires it (3 s in these tests).
    poll(lambda: ns.broker_names() == [], what="the NameServer expiring the hung broker")

    broker.clear_faults()
    broker.resume()
    assert not broker.hung
    sock.setblocking(True)
    sock.sendall(pending)
    held = read_answers(early.sock, early.decoder, 2)
    assert [held[1].code, held[2].code] == [ResponseCode.SUCCESS, ResponseCode.SUCCESS]
    late = read_answers(sock, FrameDecoder(), sent_frames, timeout=60)
    assert {a.code for a in late.values()} == {ResponseCode.SUCCESS}
    poll(lambda: ns.broker_names() == ["broker-a"], what="the resumed broker registering again")
    assert len(cluster.messages("Frozen")) == 2 + sent_frames
    early.close()
    sock.close()


def test_stop_ends_a_hung_broker_at_once(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=1, wait_time_mills_in_send_queue=0)
    cluster.create_topic("Stuck", queues=1)
    broker = cluster.broker("broker-a")
    wire = Wire(broker.addr)
    broker.inject(latency_ms=200)
    wire.sock.sendall(frames("Stuck", [b"a", b"b", b"c"]))
    poll(lambda: broker.send_queue_size == 2, what="sends queued")
    broker.hang()
    wire.sock.sendall(frames("Stuck", [b"d"], first_opaque=4))
    stopper = threading.Thread(target=broker.stop)
    started = time.monotonic()
    stopper.start()
    stopper.join(timeout=10)
    assert not stopper.is_alive(), "stop() hangs on a hung broker"
    assert time.monotonic() - started < 5
    assert not broker.running and wire.closed_by_peer()
    wire.close()
    broker.start()  # and it starts again, running
    assert not broker.hung
    fresh = Wire(broker.addr)
    assert fresh.call(send_request("Stuck")).code == ResponseCode.SUCCESS
    fresh.close()


# -- ack-only --------------------------------------------------------------------------------------


def _exchange(broker: LocalBroker) -> list[RemotingCommand]:
    """The same requests, in order, to a broker: singles, batches, a malformed and an empty batch."""
    batch = encode_batch_body(
        [(0, f"b{i}".encode(), encode_properties({"UNIQ_KEY": f"{i:032X}"}).encode()) for i in range(3)]
    )
    bare = encode_batch_body([(0, b"no properties", b"")])
    requests = [
        send_request("Acked", body=b"one", queue_id=1),
        send_request("Acked", body=batch, queue_id=1, batch=True),
        send_request("Acked", body=b"two", queue_id=2),
        send_request("Acked", body=bare, queue_id=1, batch=True),
        send_request("Acked", body=batch[:-3], queue_id=1, batch=True),  # torn last record
        send_request("Acked", body=b"", queue_id=1, batch=True),
        send_request("Acked", body=b"x" * 5000, queue_id=1),
        send_request("Acked", body=b"three", queue_id=1),
    ]
    wire = Wire(broker.addr)
    try:
        return [wire.call(r) for r in requests]
    finally:
        wire.close()


def test_ack_only_answers_as_the_store_would_and_stores_nothing(make_cluster: Callable[..., LocalCluster]) -> None:
    storing = make_cluster(brokers=1, max_message_size=4096)
    acking = make_cluster(brokers=1, max_message_size=4096, ack_only=True)
    for c in (storing, acking):
        c.create_topic("Acked", queues=4)
    stored_broker, ack_broker = storing.broker("broker-a"), acking.broker("broker-a")
    assert ack_broker.ack_only and not stored_broker.ack_only
    stored, acked = _exchange(stored_broker), _exchange(ack_broker)

    codes = [a.code for a in acked]
    ok, illegal = ResponseCode.SUCCESS, ResponseCode.MESSAGE_ILLEGAL
    assert codes == [ok, ok, ok, ok, illegal, illegal, illegal, ok]
    assert codes == [a.code for a in stored]
    assert [a.remark for a in acked] == [a.remark for a in stored]
    assert [a.field("queueOffset") for a in acked] == ["0", "1", "0", "4", None, None, None, "5"]
    for s, a in zip(stored, acked, strict=True):
        assert a.field("queueId") == s.field("queueId")
        assert a.field("queueOffset") == s.field("queueOffset")
        if a.code == ok:  # same commit-log offsets: each record sized exactly as the store writes it
            ids_a = [parse_offset_msg_id(i) for i in (a.field("msgId") or "").split(",")]
            ids_s = [parse_offset_msg_id(i) for i in (s.field("msgId") or "").split(",")]
            assert [(h, off) for h, _p, off in ids_a] == [(h, off) for h, _p, off in ids_s]
            assert {p for _h, p, _o in ids_a} == {ack_broker.port}
    assert len(stored_broker.messages("Acked")) == 7
    assert ack_broker.messages("Acked") == []
    assert (ack_broker.store_dir / "commitlog").stat().st_size == 0
    assert ack_broker.sends == 5


# -- the protocol layer the broker writes with ---------------------------------------------------------


def test_stored_records_and_message_ids_match_their_one_by_one_forms() -> None:
    batch = encode_batch_body([(i, b"body%d" % i, b"" if i == 1 else b"K\x01v%d" % i) for i in range(3)])
    items = split_batch_body(batch)
    assert items == [(0, b"body0", b"K\x01v0"), (1, b"body1", b""), (2, b"body2", b"K\x01v2")]
    common = {
        "topic": "T",
        "queue_id": 3,
        "sys_flag": 0,
        "born_timestamp": 11,
        "born_host": ("10.0.0.1", 4000),
        "store_timestamp": 12,
        "store_host": ("127.0.0.1", 10911),
    }
    data, sizes = encode_stored_records(items, first_queue_offset=7, commit_log_offset=100, **common)
    one_by_one, pos = [], 100
    for i, (flag, body, props) in enumerate(items):
        rec = encode_stored_message(
            queue_offset=7 + i, commit_log_offset=pos, flag=flag, body=body, properties=props.decode(), **common
        )
        one_by_one.append(rec)
        pos += len(rec)
    assert data == b"".join(one_by_one) and sizes == [len(r) for r in one_by_one]
    offsets = [0, 100, (1 << 40) + 5]
    one_id = [offset_msg_id("127.0.0.1", 10911, o) for o in offsets]
    assert offset_msg_ids("127.0.0.1", 10911, offsets) == ",".join(one_id)
    assert offset_msg_ids("127.0.0.1", 10911, []) == ""


def test_the_commit_log_index_stops_where_whole_records_end() -> None:
    data, sizes = encode_stored_records(
        [(0, b"a", b"K\x01v"), (0, b"bb", b""), (0, b"ccc", b"K\x01w")],
        topic="Idx",
        queue_id=2,
        first_queue_offset=0,
        commit_log_offset=0,
        sys_flag=0,
        born_timestamp=1,
        born_host=("10.0.0.1", 1),
        store_timestamp=2,
        store_host=("127.0.0.1", 2),
    )
    whole = [(0, sizes[0], 2, "Idx"), (sizes[0], sizes[1], 2, "Idx"), (sizes[0] + sizes[1], sizes[2], 2, "Idx")]
    assert index_stored_records(data) == (whole, len(data))
    assert index_stored_records(data[:-4]) == (whole[:2], sizes[0] + sizes[1])  # torn last record
    assert index_stored_records(data + bytes(300)) == (whole, len(data))  # zeros after the last record


@pytest.mark.parametrize("body", [b"\x00\x00\x00", encode_batch_body([(0, b"", b"")])])
def test_split_batch_body_refuses_torn_and_empty_records(body: bytes) -> None:
    from spark_rocketmq.errors import ProtocolError

    with pytest.raises(ProtocolError):
        split_batch_body(body)
