"""A cluster that never worked fails a send within its send_msg_timeout_ms with a ClusterConfigError naming
each address, what it said and the fix; a cluster that worked keeps the usual retries and errors."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import closed_port

from spark_rocketmq import Message, Producer
from spark_rocketmq.client.diagnosis import explain_refusal
from spark_rocketmq.errors import BrokerError, ClusterConfigError, SendFailedError


def _timed_send(p: Producer, topic: str, body: bytes = b"x", *, sync: bool = False) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        if sync:
            p.send(Message(topic, body))
        else:
            p.send_async(Message(topic, body)).result(timeout=30)
    return info.value, time.monotonic() - started


@pytest.mark.parametrize("sync", [False, True])
def test_nothing_on_the_namesrv_ports_fails_at_once_naming_each(sync: bool) -> None:
    dead = [f"127.0.0.1:{closed_port()}", f"127.0.0.1:{closed_port()}"]
    with Producer(namesrv_addr=";".join(dead), group="misconfig") as p:
        exc, took = _timed_send(p, "Orders", sync=sync)
    assert isinstance(exc, ClusterConfigError), exc
    text = str(exc)
    for addr in dead:
        assert f"{addr}: [Errno 111] Connection refused" in text
    assert "has ever answered this producer" in text and "nc -vz" in text
    assert took < 3.0  # send_msg_timeout_ms: not the sink's delivery deadline


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """An address whose connects time out: a listener with a full backlog that never accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    addr = f"127.0.0.1:{server.getsockname()[1]}"
    fillers = []
    for _ in range(4):  # fill the accept queue: further SYNs are dropped, so connects hang
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(server.getsockname())
        fillers.append(s)
    yield addr
    for s in fillers:
        s.close()
    server.close()


def test_a_namesrv_whose_connect_times_out_fails_within_the_send_timeout(silent_listener: str) -> None:
    probe = socket.socket()
    probe.settimeout(0.5)
    try:
        host, port = silent_listener.rsplit(":", 1)
        probe.connect((host, int(port)))
        pytest.skip("this kernel completes connects beyond the backlog: no connect timeout to test")
    except OSError:
        pass
    finally:
        probe.close()
    with Producer(namesrv_addr=silent_listener, remoting_timeout_ms=1000, send_msg_timeout_ms=3000) as p:
        exc, took = _timed_send(p, "Orders")
    assert isinstance(exc, ClusterConfigError), exc
    assert f"{silent_listener}: connect timed out" in str(exc)
    assert took < 5.0


def test_a_namesrv_that_closes_before_answering_is_named_with_the_tls_hint() -> None:
    """As a NameServer or broker that enforces TLS treats a plain-text client: it closes the connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.1)
    addr = f"127.0.0.1:{server.getsockname()[1]}"
    stop = threading.Event()

    def refuse() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            conn.recv(64)
            conn.close()

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    try:
        with Producer(namesrv_addr=addr) as p:
            exc, took = _timed_send(p, "Orders")
    finally:
        stop.set()
        server.close()
        thread.join(5)
    assert isinstance(exc, ClusterConfigError), exc
    text = str(exc)
    said = text.split(f"{addr}: ", 1)[1]  # the peer closed (FIN) or reset (RST) the connection
    assert said.startswith(("closed by the peer before any answer", "lost: [Errno 104] Connection reset by peer"))
    assert "before any answer" in said
    assert "use_tls=true" in text
    assert took < 3.0


def test_failures_of_a_namesrv_are_logged_once_until_it_answers(caplog: pytest.LogCaptureFixture) -> None:
    dead = f"127.0.0.1:{closed_port()}"
    with caplog.at_level(logging.WARNING, logger="spark_rocketmq"), Producer(namesrv_addr=dead) as p:
        for _ in range(10):
            _timed_send(p, "Orders")
    lines = [r.getMessage() for r in caplog.records if dead in r.getMessage()]
    assert len(lines) == 1, lines


def test_a_namesrv_that_answered_before_keeps_the_retrying_error(local_cluster) -> None:
    cluster = local_cluster
    with Producer(namesrv_addr=cluster.namesrv_addr) as p:
        assert p.send(Message("Orders", b"x")).msg_id
        cluster.namesrvs[0].stop()
        exc, _ = _timed_send(p, "NotCachedYet", sync=True)
    assert isinstance(exc, SendFailedError) and not isinstance(exc, ClusterConfigError), exc
    assert "no NameServer" in str(exc)


def test_brokers_advertised_where_nothing_listens_fail_naming_each(advertise_dead_broker) -> None:
    cluster, dead = advertise_dead_broker("Ghost")
    with Producer(namesrv_addr=cluster.namesrv_addr, group="misconfig") as p:
        exc, took = _timed_send(p, "Ghost")
    assert isinstance(exc, ClusterConfigError), exc
    text = str(exc)
    assert f"broker-x at {dead} (the address the NameServer advertises): [Errno 111] Connection refused" in text
    assert "brokerIP1" in text
    assert took < 3.0


def test_a_dead_broker_beside_a_live_one_is_no_configuration_error(advertise_dead_broker) -> None:
    cluster, _ = advertise_dead_broker("Ghost", brokers=1)
    cluster.create_topic("Ghost", queues=4)
    with Producer(namesrv_addr=cluster.namesrv_addr) as p:
        results = [p.send(Message("Ghost", b"x")) for _ in range(8)]
    assert {r.queue.broker_name for r in results} == {"broker-a"}


def test_a_broker_that_stored_before_keeps_the_retrying_error(make_cluster) -> None:
    cluster = make_cluster(brokers=1)
    cluster.create_topic("Orders", queues=4)
    with Producer(namesrv_addr=cluster.namesrv_addr, send_msg_timeout_ms=1000) as p:
        assert p.send(Message("Orders", b"x")).msg_id
        cluster.broker("broker-a").stop()  # the producer's cached route still names it
        exc, _ = _timed_send(p, "Orders")
    assert isinstance(exc, SendFailedError) and not isinstance(exc, ClusterConfigError), exc


def test_a_request_over_the_brokers_max_message_size_names_both_limits(make_cluster) -> None:
    cluster = make_cluster(brokers=1, max_message_size=64 * 1024)
    cluster.create_topic("Big", queues=1)
    with Producer(namesrv_addr=cluster.namesrv_addr, compress_msg_body_over=1 << 30) as p:
        exc, took = _timed_send(p, "Big", b"x" * 100_000)
    assert isinstance(exc, ClusterConfigError), exc
    text = str(exc)
    assert "refused a request of 100000 bytes: its maxMessageSize is 65536 bytes" in text
    assert "max_message_size 4194304" in text and "at most 65536" in text
    assert took < 3.0


@pytest.mark.parametrize(
    ("code", "remark", "says"),
    [
        (1, "org.apache.rocketmq.acl.common.AclException: No accessKey is configured, org.apache.x", "set access_key"),
        (
            1,
            "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=a, x",
            "secret_key is not",
        ),
        (1, "org.apache.rocketmq.acl.common.AclException: No default permission for topic:T, x", "may not publish"),
        (13, "the message is illegal, ... msg body length limit 65536B, msg properties length limit 32KB.", "is 65536"),
        (1, "java.lang.RuntimeException: message body size exceeded, org.apache.rocketmq.store.X", "is smaller"),
        (16, "the broker[10.0.0.7] sending transaction message is forbidden", "rejectTransactionMessage=false"),
        (16, "username cannot be null.", "set access_key and secret_key to a user"),
        (16, "check signature failed.", "secret_key is not the password"),
        (16, "User:nobody is not found.", "mqadmin createUser -b BROKER -u nobody"),
        (16, "User:old is disabled.", "updateUser -b BROKER -u old -s enable"),
        (
            16,
            "User:limited has no permission to access Topic:T from 127.0.0.1, the decision is deny.",
            "User:limited may not publish to Topic:T: grant it (mqadmin createAcl -b BROKER "
            "-s User:limited -r Topic:T -a Pub -d Allow",
        ),
    ],
    ids=[
        "acl-no-key",
        "acl-signature",
        "acl-topic",
        "size-4x",
        "size-5x-batch",
        "transactions-forbidden",
        "acl2-no-key",
        "acl2-signature",
        "acl2-unknown-user",
        "acl2-disabled-user",
        "acl2-denied",
    ],
)
def test_refusals_that_name_their_fix(code: int, remark: str, says: str) -> None:
    error = explain_refusal(BrokerError(code, remark, "127.0.0.1:10911"), "broker-a", 100_000, 4 << 20)
    assert isinstance(error, ClusterConfigError) and says in str(error)
    assert str(error).startswith("broker broker-a at 127.0.0.1:10911 refused")


@pytest.mark.parametrize(
    ("code", "remark"),
    [
        (2, "[TIMEOUT_CLEAN_QUEUE]broker busy"),
        (13, "msg body length limit 4194304B"),
        (1, "store broken"),
        (16, "the broker[10.0.0.7] sending message is forbidden"),
    ],
)
def test_other_refusals_are_left_as_they_are(code: int, remark: str) -> None:
    assert explain_refusal(BrokerError(code, remark, "127.0.0.1:10911"), "broker-a", 1000, 4 << 20) is None


@pytest.mark.parametrize(
    ("remark", "says"),
    [
        (
            "TopicMessageType validate failed, the expected type is NORMAL, but actual type is TRANSACTION",
            "refused a TRANSACTION message to topic 'Orders' (the expected type is NORMAL, but actual type is "
            "TRANSACTION): the topic's message.type is NORMAL",
        ),
        (
            "TopicMessageType validate failed, the expected type is UNSPECIFIED, but actual type is NORMAL",
            "the topic does not exist, and a Proxy never creates one. Create it: mqadmin updateTopic -n NAMESRV "
            "-c CLUSTER -t Orders -r 8 -w 8 -a +message.type=NORMAL",
        ),
    ],
    ids=["type-mismatch", "no-topic"],
)
def test_a_proxy_type_check_refusal_names_the_topic_its_type_and_the_command(remark: str, says: str) -> None:
    error = explain_refusal(BrokerError(13, remark, "127.0.0.1:10997"), "broker-a", 100, 4 << 20, "Orders")
    assert isinstance(error, ClusterConfigError) and says in str(error)
    assert str(error).startswith("the RocketMQ Proxy at 127.0.0.1:10997 refused")
