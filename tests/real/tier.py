"""make test-real: the real-cluster tier (tests/real) against each RocketMQ kit, or against your own cluster.

    python -m tests.real.tier [KIT_FOLDER ...] [-- PYTEST_ARGS ...]

For each kit folder (a real Apache RocketMQ run by its `rmq` script, e.g. ../shared/rocketmq-4.9.8),
start a NameServer and brokers on free loopback ports in a run folder of their own, every kit at once,
run the tier against every kit at once (much of the tier waits: for JVMs, registrations, delivery
times), then stop every process and delete the run folders, whatever happened. The checks of what no
broker version changes (marked once_per_tier) are shared out: each runs against one kit. With no kit folder and
ROCKETMQ_NAMESRV_ADDR set, run the tier against that cluster (the tests that need to freeze, kill or
restart its processes skip). With neither, say so and succeed: a clone without the
kits still passes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from types import FrameType

from .kit import KIT_ENV, ONCE_ENV, Kit

TIER = Path(__file__).resolve().parent


#: Private clusters a test starts (make_kit) probe ports from here up, a range of their own per kit run.
PRIVATE_SHIFT_ENV = "RMQ_PRIVATE_SHIFT"

#: The shared clusters' brokers register with the NameServer every 10 s (the least a broker takes; its
#: default is 30 s), so that a NameServer the tier restarts knows them again sooner; they keep the message
#: trace topic (RMQ_SYS_TRACE_TOPIC), which the trace tests write to.
SHARED_PROPS = "registerNameServerPeriod=10000\ntraceTopicEnable=true"


def pytest_command(pytest_args: list[str]) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "--durations=0"]
    named = any(Path(a.split("::")[0]).exists() for a in pytest_args if not a.startswith("-"))
    paths = [] if named else [str(TIER)]  # the whole tier unless test files are named
    return [*command, *paths, *pytest_args]


def say(text: str) -> None:
    sys.stdout.write(f"test-real: {text}\n")  # one write: the kits' launch threads say things at once
    sys.stdout.flush()


def launch(folder: Path, started: float) -> Kit:
    """Start a cluster of the kit in `folder`: a NameServer, broker-a and broker-b on free ports."""
    say(f"starting RocketMQ {Kit(folder).version} from {folder}: a NameServer, broker-a, broker-b")
    kit = Kit.launch(folder, props=SHARED_PROPS)
    say(f"RocketMQ {kit.version} up at {kit.namesrv_addr} ({time.monotonic() - started:.0f} s)")
    return kit


def run_kits(folders: list[Path], pytest_args: list[str], log_dir: Path) -> int:
    """Start every kit, run the tier against all of them at once (each pytest's output to a log, printed
    when it ends), then stop and remove every cluster whatever happened."""
    started = time.monotonic()
    kits: list[Kit] = []
    runs: list[tuple[Kit, subprocess.Popen[bytes], Path]] = []
    try:
        pool = ThreadPoolExecutor(len(folders))
        launches = [pool.submit(launch, folder, started) for folder in folders]
        try:
            wait(launches)
        finally:  # a signal included: every launch ends, and each cluster started is removed below
            pool.shutdown()
            kits += [f.result() for f in launches if f.exception() is None]
        for launched in launches:
            launched.result()  # the first launch that failed
        for i, kit in enumerate(kits):
            env = {
                **os.environ,
                **kit.env,
                KIT_ENV: str(kit.folder),
                "ROCKETMQ_NAMESRV_ADDR": kit.namesrv_addr,
                PRIVATE_SHIFT_ENV: str(2000 + 3000 * i),
                ONCE_ENV: f"{i}/{len(kits)}",
            }
            log = log_dir / f"rocketmq-{kit.version}.log"
            with log.open("wb") as out:
                runs.append((kit, subprocess.Popen(pytest_command(pytest_args), env=env, stdout=out, stderr=out), log))
        status = 0
        for kit, proc, log in runs:
            code = proc.wait()
            say(f"RocketMQ {kit.version}: pytest output")
            sys.stdout.write(log.read_text(errors="replace"))
            say(f"RocketMQ {kit.version}: {'passed' if code == 0 else f'FAILED (pytest exit {code})'}")
            status = status or code
        return status
    finally:
        for _, proc, _ in runs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
        for kit in kits:
            kit.close()
        say(f"every cluster stopped and removed ({time.monotonic() - started:.0f} s in all)")


def _stop_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through run_kits' finally: the clusters are removed


def main(argv: list[str]) -> int:
    pytest_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    signal.signal(signal.SIGTERM, _stop_on_signal)
    signal.signal(signal.SIGHUP, _stop_on_signal)
    kits = [Path(a).resolve() for a in argv if (Path(a) / "rmq").is_file()]
    missing = [a for a in argv if not (Path(a) / "rmq").is_file()]
    for a in missing:
        say(f"no RocketMQ kit at {a} (a folder with an rmq script); not run there")
    if not kits:
        addr = os.environ.get("ROCKETMQ_NAMESRV_ADDR")
        if addr:
            say(f"against the cluster at ROCKETMQ_NAMESRV_ADDR={addr}")
            return subprocess.call(pytest_command(pytest_args))
        say(
            "skipped: no RocketMQ kit (RMQ_KITS) and no ROCKETMQ_NAMESRV_ADDR. "
            "Set ROCKETMQ_NAMESRV_ADDR=host:port to run the tier against your cluster, "
            "or RMQ_KITS='path/to/rocketmq-kit ...' to start one."
        )
        return 0
    with tempfile.TemporaryDirectory(prefix="spark-rocketmq-tier-") as log_dir:
        return run_kits(kits, pytest_args, Path(log_dir))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
