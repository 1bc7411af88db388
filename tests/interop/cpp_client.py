"""Runs the PyPI `rocketmq` package (Apache rocketmq-client-cpp) in a process of its own.

    python cpp_client.py produce NAMESRV TOPIC COUNT   -> JSON list of send results on stdout
    python cpp_client.py consume NAMESRV TOPIC COUNT   -> JSON list of received messages on stdout

A separate process keeps the native client's threads away from the test runner.
"""

from __future__ import annotations

import json
import sys
import threading
import time

#: How long the first send may find no route: rocketmq-client-cpp asks the NameServer for a topic's route when it
#: sends, and answers "No route info of this topic" when that request is slow (a loaded machine) or fails.
ROUTE_WAIT_S = 20.0


def send_sync(producer: object, msg: object) -> object:
    """producer.send_sync, sent again while the client has no route of the topic yet (bounded by ROUTE_WAIT_S)."""
    from rocketmq.exceptions import ProducerSendSyncFailed

    deadline = time.monotonic() + ROUTE_WAIT_S
    while True:
        try:
            return producer.send_sync(msg)  # type: ignore[attr-defined]
        except ProducerSendSyncFailed as exc:
            if "No route info" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)  # a backoff before the client asks the NameServer again


def produce(namesrv: str, topic: str, count: int) -> list[dict[str, object]]:
    from rocketmq.client import Message, Producer

    producer = Producer("interop-cpp-producer")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    out: list[dict[str, object]] = []
    try:
        for i in range(count):
            msg = Message(topic)
            msg.set_keys(f"sync-{i}")
            msg.set_tags("sync")
            msg.set_property("idx", str(i))
            msg.set_body(f"sync body {i}")
            r = send_sync(producer, msg)
            out.append({"kind": "sync", "i": i, "status": int(r.status), "msg_id": r.msg_id})
        for i in range(count):
            msg = Message(topic)
            msg.set_keys(f"orderly-{i}")
            msg.set_tags("orderly")
            msg.set_property("idx", str(i))
            msg.set_body(f"orderly body {i}")
            r = producer.send_orderly(msg, 42)
            out.append({"kind": "orderly", "i": i, "status": int(r.status), "msg_id": r.msg_id})
        emit(out)
    finally:
        producer.shutdown()
    return out


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def consume(namesrv: str, topic: str, count: int, timeout: float = 60.0) -> list[dict[str, object]]:
    from rocketmq.client import PushConsumer

    got: list[dict[str, object]] = []
    done = threading.Event()
    lock = threading.Lock()

    def on_message(msg: object) -> None:
        with lock:
            got.append(
                {
                    "id": msg.id,  # type: ignore[attr-defined]
                    "tags": _text(msg.tags),  # type: ignore[attr-defined]
                    "keys": _text(msg.keys),  # type: ignore[attr-defined]
                    "body": _text(msg.body),  # type: ignore[attr-defined]
                }
            )
            if len(got) >= count:
                done.set()

    consumer = PushConsumer("interop-cpp-consumer")
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message)
    consumer.start()
    try:
        done.wait(timeout)
        with lock:
            emit(list(got))
    finally:
        consumer.shutdown()
    return got


def emit(result: list[dict[str, object]]) -> None:
    """Print the result before the native client shuts down (its shutdown can abort the process)."""
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    action, namesrv, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if action == "produce":
        produce(namesrv, topic, count)
    else:
        consume(namesrv, topic, count)
