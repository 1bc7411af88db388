"""FrameReader: small and large frames off one socket, however the bytes are cut."""

from __future__ import annotations

import socket
import threading

from spark_rocketmq.local.server import LARGE_FRAME, FrameReader
from spark_rocketmq.protocol.codes import RequestCode
from spark_rocketmq.protocol.command import RemotingCommand


def _frames() -> list[RemotingCommand]:
    big = bytes(range(256)) * ((LARGE_FRAME * 3) // 256)
    return [
        RemotingCommand(code=RequestCode.HEART_BEAT, opaque=1, body=b"small"),
        RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, opaque=2, ext_fields={"a": "g"}, body=big),
        RemotingCommand(code=RequestCode.HEART_BEAT, opaque=3, body=big[: LARGE_FRAME * 2]),
        RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=4, body=b"x" * 10),
    ]


def _read_all(cut: int) -> list[RemotingCommand]:
    sent = b"".join(cmd.encode() for cmd in _frames())
    left, right = socket.socketpair()

    def write() -> None:
        for i in range(0, len(sent), cut):
            left.sendall(sent[i : i + cut])
        left.close()

    writer = threading.Thread(target=write)
    writer.start()
    reader = FrameReader(right)
    got: list[RemotingCommand] = []
    while (commands := reader.read()) is not None:
        got += commands
    writer.join()
    right.close()
    return got


def test_every_frame_arrives_whole_whatever_the_cuts() -> None:
    expected = _frames()
    for cut in (7, 4096, LARGE_FRAME - 1, 1 << 20):
        got = _read_all(cut)
        assert [(c.code, c.opaque, bytes(c.body)) for c in got] == [
            (c.code, c.opaque, bytes(c.body)) for c in expected
        ], f"cut {cut}"
        assert got[1].ext_fields == {"a": "g"}
        assert isinstance(got[2].body, bytes)  # only a send's large body stays a view of its frame
