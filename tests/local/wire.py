"""Raw client connections to the local servers: requests made with the protocol layer only."""

from __future__ import annotations

import socket
import time

from spark_rocketmq.protocol.codes import RequestCode
from spark_rocketmq.protocol.command import RemotingCommand
from spark_rocketmq.protocol.frame import FrameDecoder
from spark_rocketmq.protocol.headers import SendMessageRequestHeader
from spark_rocketmq.protocol.message import encode_properties


class Wire:
    """One raw client connection: request in, answer out."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = FrameDecoder()
        self.opaque = 0

    def call(self, cmd: RemotingCommand) -> RemotingCommand:
        self.opaque += 1
        cmd.opaque = self.opaque
        self.sock.sendall(cmd.encode())
        return self.read()

    def read(self) -> RemotingCommand:
        while True:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("peer closed the connection")
            frames = self.decoder.feed(data)
            if frames:
                return frames[0]

    def closed_by_peer(self) -> bool:
        self.sock.settimeout(10)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def send_request(
    topic: str,
    body: bytes = b"hello",
    queue_id: int = 0,
    props: dict[str, str] | None = None,
    batch: bool = False,
    sys_flag: int = 0,
) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="g",
        topic=topic,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=encode_properties(props if props is not None else {"UNIQ_KEY": "A" * 32, "WAIT": "true"}),
        batch=batch,
        broker_name="broker-a",
    )
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(code=code, ext_fields=header.to_v2_fields(), body=body)
