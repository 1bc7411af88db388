"""make test-real: the real-cluster tier (tests/real) against each RocketMQ kit, or against your own cluster.

    python -m tests.real.tier [KIT_FOLDER ...] [-- PYTEST_ARGS ...]

For each kit folder (a real Apache RocketMQ run by its `rmq` script, e.g. ../shared/rocketmq-4.9.8),
start a NameServer and brokers on free loopback ports in a run folder of their own, run the tier
against them, then stop every process and delete the run folder, whatever happened. With no kit
folder and ROCKETMQ_NAMESRV_ADDR set, run the tier against that cluster (the tests that need to
freeze, kill or restart its processes skip). With neither, say so and succeed: a clone without the
kits still passes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from .kit import KIT_ENV, Kit

TIER = Path(__file__).resolve().parent


def run_pytest(env: dict[str, str], pytest_args: list[str]) -> int:
    command = [sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "--durations=0"]
    paths = [] if any(not a.startswith("-") for a in pytest_args) else [str(TIER)]  # the whole tier by default
    return subprocess.call([*command, *paths, *pytest_args], env={**os.environ, **env})


def say(text: str) -> None:
    print(f"test-real: {text}", flush=True)


def run_kit(folder: Path, pytest_args: list[str]) -> int:
    started = time.monotonic()
    say(f"starting RocketMQ {Kit(folder).version} from {folder}: a NameServer, broker-a, broker-b")
    kit = Kit.launch(folder)
    try:
        say(f"RocketMQ {kit.version} up at {kit.namesrv_addr} in {time.monotonic() - started:.0f} s")
        env = {KIT_ENV: str(folder), "ROCKETMQ_NAMESRV_ADDR": kit.namesrv_addr, **kit.env}
        return run_pytest(env, pytest_args)
    finally:
        kit.close()
        say(f"RocketMQ {kit.version} stopped and removed ({time.monotonic() - started:.0f} s in all)")


def _stop_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through run_kit's finally: the cluster is cleaned


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
            return run_pytest({}, pytest_args)
        say(
            "skipped: no RocketMQ kit (RMQ_KITS) and no ROCKETMQ_NAMESRV_ADDR. "
            "Set ROCKETMQ_NAMESRV_ADDR=host:port to run the tier against your cluster, "
            "or RMQ_KITS='path/to/rocketmq-kit ...' to start one."
        )
        return 0
    status = 0
    for folder in kits:
        code = run_kit(folder, pytest_args)
        say(f"{folder.name}: {'passed' if code == 0 else f'FAILED (pytest exit {code})'}")
        status = status or code
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
