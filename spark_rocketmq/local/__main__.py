"""python -m spark_rocketmq.local --brokers 2 [--namesrv-port 9876] [--broker-port 10911] [--store-dir DIR]
[--ack-only] [--wait-time-mills-in-send-queue 200] [--send-queue-capacity 10000] [--rocketmq-version 5.3.3]

Runs a local NameServer and brokers in the foreground, prints the NameServer address, and stops
cleanly on Ctrl-C or SIGTERM. --ack-only brokers check and acknowledge every message but store
nothing (for measuring senders).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from .cluster import LocalCluster
from .schedule import DEFAULT_MESSAGE_DELAY_LEVEL
from .send_queue import DEFAULT_SEND_QUEUE_CAPACITY, DEFAULT_WAIT_TIME_MILLS_IN_SEND_QUEUE
from .timer import TimerConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_rocketmq.local", description=__doc__)
    parser.add_argument("--brokers", type=int, default=2)
    parser.add_argument("--namesrvs", type=int, default=1)
    parser.add_argument("--namesrv-port", type=int, default=0, help="first NameServer port (0: free ports)")
    parser.add_argument("--broker-port", type=int, default=0, help="first broker port, next ones +10 (0: free)")
    parser.add_argument("--store-dir", help="keep the stores here (default: a temporary directory)")
    parser.add_argument("--topic", action="append", default=[], help="create this topic (4 queues per broker)")
    parser.add_argument("--no-auto-create-topic", action="store_true")
    parser.add_argument(
        "--ack-only", action="store_true", help="check and acknowledge sends with real offsets, store nothing"
    )
    parser.add_argument(
        "--wait-time-mills-in-send-queue",
        type=int,
        default=DEFAULT_WAIT_TIME_MILLS_IN_SEND_QUEUE,
        help="answer SYSTEM_BUSY to sends queued this long (ms; 0: never)",
    )
    parser.add_argument(
        "--send-queue-capacity", type=int, default=DEFAULT_SEND_QUEUE_CAPACITY, help="queued sends beyond: OVERLOAD"
    )
    parser.add_argument(
        "--message-delay-level",
        default=DEFAULT_MESSAGE_DELAY_LEVEL,
        help="each delay level's delay, level 1 first (messageDelayLevel)",
    )
    parser.add_argument(
        "--rocketmq-version",
        choices=("4.9.8", "5.3.3"),
        default="4.9.8",
        help="answer as this broker version (5.3.3: timer messages and recall, timer wheel on)",
    )
    parser.add_argument(
        "--recall-message-enable", action="store_true", help="5.3.3: accept RECALL_MESSAGE (recallMessageEnable)"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cluster = LocalCluster(
        brokers=args.brokers,
        namesrvs=args.namesrvs,
        store_dir=args.store_dir,
        namesrv_port=args.namesrv_port,
        broker_port=args.broker_port,
        auto_create_topic=not args.no_auto_create_topic,
        ack_only=args.ack_only,
        wait_time_mills_in_send_queue=args.wait_time_mills_in_send_queue,
        send_queue_capacity=args.send_queue_capacity,
        message_delay_level=args.message_delay_level,
        rocketmq_version=args.rocketmq_version,
        timer=TimerConfig(recall_message_enable=args.recall_message_enable),
    )
    with cluster:
        for topic in args.topic:
            cluster.create_topic(topic)
        print(f"NameServer {cluster.namesrv_addr}", flush=True)
        for b in cluster.brokers.values():
            mode = " ack-only" if b.ack_only else ""
            print(f"broker {b.name} {b.addr} cluster {cluster.cluster_name}{mode}", flush=True)
        stop.wait()
        print("stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
