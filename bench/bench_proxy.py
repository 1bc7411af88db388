"""What a RocketMQ 5.x Proxy costs: the Spark sink and Java's BatchProducer, direct and through the Proxy, in one run.

Starts a real RocketMQ 5.3.3 from its kit (a NameServer and two brokers on free ports, then `rmq start proxy`,
the Proxy's remoting port; removed afterwards), creates a topic of 4 queues on each broker, and measures on
the same brokers, one after the other:

- Java's BatchProducer (8 threads, batches of 1000 x 100 B) with -n the NameServer, then with -n the Proxy;
- the Spark sink (RocketMQSink, local[2], a cached DataFrame of --rows 100 B rows, warm) with the NameServer's
  address, then with the Proxy's;
- Java's BatchProducer both ways again (a broker's JIT favours what runs later; the better run counts).

It prints messages/s and the CPU per message of the client and of the servers (NameServer, brokers and the
Proxy together), and the ratio through the Proxy to direct of each. Figures, not a test: run it on a quiet
machine.

    python bench/bench_proxy.py                      # the 5.3.3 kit beside this clone
    python bench/bench_proxy.py --seconds 60 --rows 4000000
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_real import Figure, java, our_sink  # noqa: E402

from tests.real.kit import Kit, read_kit_env  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kit", default=str(ROOT.parent / "shared" / "rocketmq-5.3.3"), help="RocketMQ 5 kit folder")
    parser.add_argument("--seconds", type=float, default=40, help="length of each Java run")
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the sink's DataFrame")
    parser.add_argument("--runs", type=int, default=3, help="sink runs each way (the best rate, the mean CPU)")
    args = parser.parse_args()
    folder = Path(args.kit)
    if not (folder / "rmq").is_file() or not read_kit_env(folder).get("PORT_PROXY"):
        print(f"bench_proxy: no RocketMQ kit with a Proxy at {args.kit}", file=sys.stderr)
        return 2
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        "brokers, the Proxy, clients and Spark on the same cores"
    )
    kit = Kit.launch(folder)
    try:
        kit.rmq("start", "proxy", timeout=180)
        proxy = f"127.0.0.1:{int(read_kit_env(folder)['PORT_PROXY']) + kit.shift}"
        pids = {pid for name in ("namesrv", "a", "b", "proxy") if (pid := kit.pid(name))}
        topic = kit.topic("BenchProxy")
        print(f"RocketMQ {kit.version}: NameServer {kit.namesrv_addr}, Proxy {proxy}, topic {topic}", flush=True)
        batch = ["-t", topic, "-s", "100", "-b", "1000", "-w", "8"]
        name = "Java BatchProducer, 8 threads, 1000 x 100 B"
        javas: dict[str, list[Figure]] = {"direct": [], "proxy": []}
        sinks: dict[str, Figure] = {}
        for way, addr in (("direct", kit.namesrv_addr), ("proxy", proxy)):
            javas[way].append(java(kit, pids, f"{name}, {way}", "BatchProducer", batch, args.seconds, addr))
            print(javas[way][-1], flush=True)
        for way, addr in (("direct", kit.namesrv_addr), ("proxy", proxy)):
            sinks[way] = our_sink(addr, topic, pids, args.rows, args.runs)
            sinks[way].name += f", {way}"
            print(sinks[way], flush=True)
        for way, addr in (("direct", kit.namesrv_addr), ("proxy", proxy)):
            javas[way].append(java(kit, pids, f"{name}, {way} (again)", "BatchProducer", batch, args.seconds, addr))
            print(javas[way][-1], flush=True)
        best = {way: max(figures, key=lambda f: f.rate) for way, figures in javas.items()}
        print(
            f"\nthrough the Proxy / direct: Java BatchProducer {best['proxy'].rate / best['direct'].rate:.2f}x, "
            f"Spark sink {sinks['proxy'].rate / sinks['direct'].rate:.2f}x\n"
            f"Spark sink / Java BatchProducer (better runs): direct {sinks['direct'].rate / best['direct'].rate:.2f}x, "
            f"through the Proxy {sinks['proxy'].rate / best['proxy'].rate:.2f}x",
            flush=True,
        )
    finally:
        kit.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
