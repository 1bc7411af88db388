"""The transport against tiny servers built from the protocol layer."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from spark_rocketmq import RemotingConnectError, RemotingTimeoutError
from spark_rocketmq.client.remoting import RemotingClient
from spark_rocketmq.protocol.acl import acl_signature
from spark_rocketmq.protocol.codes import ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand

from .frame_server import FrameServer


@pytest.fixture
def client() -> Iterator[RemotingClient]:
    c = RemotingClient(connect_timeout_ms=1000)
    yield c
    c.close()


def echo(cmd: RemotingCommand) -> RemotingCommand | None:
    if cmd.code == 999:  # never answered
        return None
    return cmd.response(ResponseCode.SUCCESS, ext_fields={"code": str(cmd.code)}, body=cmd.body)


@pytest.fixture
def server() -> Iterator[FrameServer]:
    s = FrameServer(echo)
    s.start()
    yield s
    s.stop()


def test_many_requests_in_flight_on_one_connection_are_matched_by_opaque(client, server) -> None:
    futures = [client.invoke_async(server.addr, RemotingCommand(code=100 + i, body=b"x" * i), 5000) for i in range(50)]
    answers = [f.result(timeout=5) for f in futures]
    assert [a.field("code") for a in answers] == [str(100 + i) for i in range(50)]
    assert [len(a.body) for a in answers] == list(range(50))
    assert len(client.addresses()) == 1


def test_requests_from_many_threads_share_the_connection(client, server) -> None:
    results: list[int] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        for i in range(20):
            resp = client.invoke_sync(server.addr, RemotingCommand(code=n * 100 + i), 5000)
            with lock:
                results.append(int(resp.field("code")))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(n * 100 + i for n in range(1, 5) for i in range(20))
    assert len(server.requests) == 80


def test_unanswered_request_times_out(client, server) -> None:
    with pytest.raises(RemotingTimeoutError, match="no answer from"):
        client.invoke_sync(server.addr, RemotingCommand(code=999), 200)
    # the connection is still usable
    assert client.invoke_sync(server.addr, RemotingCommand(code=1), 2000).field("code") == "1"


def test_lost_connection_fails_in_flight_requests_at_once_and_reconnects(client, server) -> None:
    fut = client.invoke_async(server.addr, RemotingCommand(code=999), 60_000)
    assert client.invoke_sync(server.addr, RemotingCommand(code=1), 2000).code == 0  # connection established
    server.drop_connections()
    with pytest.raises(RemotingConnectError):
        fut.result(timeout=5)  # far sooner than the request's own 60 s timeout
    assert client.invoke_sync(server.addr, RemotingCommand(code=2), 2000).field("code") == "2"


def test_connect_refused_is_a_connect_error(client) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"):
        client.invoke_sync(f"127.0.0.1:{port}", RemotingCommand(code=1), 1000)


def test_garbage_from_the_peer_closes_the_connection_with_a_protocol_error(client) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    addr = f"127.0.0.1:{listener.getsockname()[1]}"

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"\xff\xff\xff\xffHTTP/1.1 400 Bad Request\r\n\r\n")
        conn.recv(1)  # hold the socket until the client closes it
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    fut = client.invoke_async(addr, RemotingCommand(code=1), 60_000)
    with pytest.raises(RemotingConnectError, match="protocol error"):
        fut.result(timeout=5)
    t.join(timeout=5)
    listener.close()


def test_oneway_requests_carry_the_oneway_flag(client, server) -> None:
    client.invoke_oneway(server.addr, RemotingCommand(code=7, body=b"one"))
    client.invoke_sync(server.addr, RemotingCommand(code=8), 2000)  # ordered after the oneway on the socket
    oneway = [r for r in server.requests if r.code == 7]
    assert len(oneway) == 1 and oneway[0].flag & 2 and oneway[0].body == b"one"


def test_acl_signing_appends_access_key_and_signature(server) -> None:
    c = RemotingClient(access_key="goldenAK", secret_key="goldenSecret123")
    try:
        c.invoke_sync(server.addr, RemotingCommand(code=5, ext_fields={"b": "2", "a": "1"}, body=b"body"), 2000)
    finally:
        c.close()
    sent = server.requests[-1]
    assert sent.ext_fields is not None
    assert sent.ext_fields["AccessKey"] == "goldenAK"
    unsigned = {k: v for k, v in sent.ext_fields.items() if k != "Signature"}
    assert sent.ext_fields["Signature"] == acl_signature("goldenSecret123", unsigned, b"body")
    assert list(sent.ext_fields)[-2:] == ["Signature", "AccessKey"]


def test_requests_are_written_in_python_language_json_version_409(client, server) -> None:
    client.invoke_sync(server.addr, RemotingCommand(code=1), 2000)
    sent = server.requests[-1]
    assert (sent.language, sent.version, int(sent.serialize_type)) == ("PYTHON", 409, 0)


def test_tls_connection(tmp_path) -> None:
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"],
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server = FrameServer(echo, ssl_context=ctx)
    server.start()
    plain = RemotingClient(connect_timeout_ms=1000)
    tls = RemotingClient(connect_timeout_ms=1000, use_tls=True)
    try:
        resp = tls.invoke_sync(server.addr, RemotingCommand(code=3, body=b"secret" * 10_000), 5000)
        assert resp.body == b"secret" * 10_000
        # Many requests in flight: writers encrypt while the reader decrypts on the same TLS session.
        futures = [
            tls.invoke_async(server.addr, RemotingCommand(code=10 + i, body=b"b" * i * 50), 10_000) for i in range(300)
        ]
        assert [len(f.result(timeout=10).body) for f in futures] == [i * 50 for i in range(300)]
        with pytest.raises((RemotingConnectError, RemotingTimeoutError)):
            plain.invoke_sync(server.addr, RemotingCommand(code=4), 1000)  # a plain client gets no answer
    finally:
        tls.close()
        plain.close()
        server.stop()


# -- a peer that stops reading, timeouts, idle and unrouted connections -------------------------------
@pytest.fixture
def frozen_peer() -> Iterator[tuple[str, list[socket.socket]]]:
    """Accepts connections and never reads from them (as a SIGSTOPped broker): writes fill the buffers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}", accepted
    listener.close()
    for conn in accepted:
        conn.close()


def test_a_peer_that_stops_reading_never_blocks_the_caller(frozen_peer) -> None:
    addr, _ = frozen_peer
    client = RemotingClient(connect_timeout_ms=1000)
    body = b"x" * (4 * 1024 * 1024)
    try:
        # 64 MiB is far beyond what the socket buffers take: a blocking write would hang here.
        futures = [client.invoke_async(addr, RemotingCommand(code=320, body=body), 300) for _ in range(16)]
        for fut in futures:
            with pytest.raises((RemotingTimeoutError, RemotingConnectError)):
                fut.result(timeout=10)
        assert sum(isinstance(f.exception(), RemotingTimeoutError) for f in futures) >= 1
    finally:
        closer = threading.Thread(target=client.close)
        closer.start()
        closer.join(timeout=5)
        assert not closer.is_alive(), "close() blocked on a peer that does not read"


def test_a_timed_out_request_closes_its_connection(client, server) -> None:
    first = client.connection(server.addr)
    with pytest.raises(RemotingTimeoutError):
        client.invoke_sync(server.addr, RemotingCommand(code=999), 200)
    assert first.closed
    assert client.invoke_sync(server.addr, RemotingCommand(code=5), 2000).field("code") == "5"
    assert client.connection(server.addr) is not first


def test_a_timeout_on_one_lane_leaves_the_other_lanes_connection_open(client, server) -> None:
    """A request that times out closes its own connection, not the address's connection on another lane:
    a heartbeat to a frozen broker must not close the connection holding its END_TRANSACTIONs."""
    answers: list[RemotingCommand | None] = []
    client.invoke_with_callback(server.addr, RemotingCommand(code=999), 60_000, lambda a, e: answers.append(a), "end")
    held = client.connection(server.addr, "end")
    with pytest.raises(RemotingTimeoutError):
        client.invoke_sync(server.addr, RemotingCommand(code=999), 200)
    assert not held.closed and held.in_flight == 1 and answers == []
    assert client.connection(server.addr, "end") is held
    assert client.addresses() == [server.addr]
    client.invoke_with_callback(server.addr, RemotingCommand(code=7), 5000, lambda a, e: answers.append(a), "end")
    assert wait_until(lambda: len(answers) == 1, 5.0) and answers[0] is not None
    assert answers[0].field("code") == "7"


def test_idle_connections_are_closed(server) -> None:
    client = RemotingClient(connect_timeout_ms=1000, max_idle_ms=100)
    try:
        conn = client.connection(server.addr)
        client.invoke_sync(server.addr, RemotingCommand(code=5), 2000)
        assert wait_until(lambda: conn.closed, 5.0)
        assert client.addresses() == []
    finally:
        client.close()


def test_retain_closes_idle_connections_to_other_addresses(client, server) -> None:
    other = FrameServer(echo)
    other.start()
    try:
        client.invoke_sync(server.addr, RemotingCommand(code=5), 2000)
        client.invoke_sync(other.addr, RemotingCommand(code=5), 2000)
        # The answer can come before the writer thread has taken the sent request off its backlog.
        conn = client.connection(other.addr)
        assert wait_until(lambda: conn.idle_for(time.monotonic()) > 0, 5.0)
        assert client.retain({server.addr}) == [other.addr]
        assert client.addresses() == [server.addr]
    finally:
        other.stop()


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_a_connection_closed_while_it_opens_leaves_the_loop_running(client, server, monkeypatch) -> None:
    """A request times out (closing its connection) after the connect, before the socket reaches the loop:
    the loop drops and closes the socket first, then is asked to watch it. Once, on a real broker frozen
    mid-batch, that stopped the executor's I/O loop, and every later request of the producer waited for
    its deadline."""
    loop = client._loop
    add = type(loop).add
    added = threading.Event()

    def closed_before_add(self, channel) -> bool:
        monkeypatch.undo()  # the first connection only
        channel.close(RemotingConnectError("closed while it opened (test)", server.addr))
        sock = channel.loop_socket()
        deadline = time.monotonic() + 5
        while sock.fileno() >= 0 and time.monotonic() < deadline:  # the loop runs the drop: closes it
            time.sleep(0.01)
        try:
            return add(self, channel)
        finally:
            added.set()

    monkeypatch.setattr(type(loop), "add", closed_before_add)
    with pytest.raises(RemotingConnectError, match="closed while it opened"):
        client.invoke_sync(server.addr, RemotingCommand(code=5), 2000)
    assert added.wait(10)
    assert client.invoke_sync(server.addr, RemotingCommand(code=6), 2000).field("code") == "6"
    assert not loop.stopped


def test_a_failed_loop_fails_its_requests_at_once_not_at_their_deadlines(client, server, monkeypatch) -> None:
    waiting = client.invoke_async(server.addr, RemotingCommand(code=999), 30_000)  # never answered
    assert client.invoke_sync(server.addr, RemotingCommand(code=5), 2000).field("code") == "5"

    def broken_select(timeout=None):
        raise RuntimeError("selector broken (test)")

    monkeypatch.setattr(client._loop._selector, "select", broken_select)
    client.invoke_async(server.addr, RemotingCommand(code=6), 30_000)  # wakes the loop
    with pytest.raises(RemotingConnectError, match="selector broken"):
        waiting.result(timeout=5)
    assert client.broken  # a producer of it reads as closed: the sink's pool makes a new one
    with pytest.raises(RemotingConnectError, match="I/O loop failed"):
        client.invoke_sync("127.0.0.1:1", RemotingCommand(code=7), 2000)
