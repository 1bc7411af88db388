"""Fixtures of the real-cluster tier: the cluster under test, the kit that runs it, private clusters, topics.

`make test-real` (tests/real/tier.py) starts each kit and runs this folder with ROCKETMQ_NAMESRV_ADDR,
ROCKETMQ_KIT and the kit's RMQ_* variables set. With ROCKETMQ_NAMESRV_ADDR alone (your own cluster),
the tests that read topics back with the kit's Java consumer, or freeze, kill or restart processes, skip.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

# test_standalone.py: a Spark standalone cluster, the built dist, the executors' Python without the package.
from standalone_cluster import bare_python, dist, standalone  # noqa: F401 (fixtures)

from .kit import KIT_ENV, ONCE_ENV, Kit, read_kit_env

#: Tests that freeze, kill or restart the shared cluster's processes run after every other test.
DISRUPTIVE = "disruptive"
#: Tests of what no broker version changes (the ready jobs, each its own Spark) run against one kit of a tier
#: run: tier.py sets ONCE_ENV to "I/N" for the pytest of its kit I of N, which runs the I-th, (I+N)-th, ... of
#: them (in collection order, the same in every kit's pytest). Unset, every one runs. ``once_per_tier(5)`` runs
#: against the 5.x kit of a tier run of several kits.
ONCE = "once_per_tier"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{DISRUPTIVE}: freezes, kills or restarts the tier's shared cluster")
    config.addinivalue_line("markers", f"{ONCE}: checks no broker version changes; run against one kit of a tier")
    # tier.py ends a pytest it stops with SIGTERM: end it as Ctrl-C does, so that the private clusters' fixture
    # removes them (by default SIGTERM ends the process with the clusters running)
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


#: Lines a test measured (failover stalls), printed at the end of the run whether the test passed or not.
MEASURED: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if MEASURED:
        terminalreporter.section("measured")
        for line in MEASURED:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # last the tests that stop the shared cluster's processes, before them those that stop a private one's
    # (make_kit takes the pool's cluster of its configuration: the tests sharing it have run)
    items.sort(key=lambda item: (item.get_closest_marker(DISRUPTIVE) is not None, "make_kit" in item.fixturenames))
    kit_index, kits = (int(n) for n in os.environ.get(ONCE_ENV, "0/1").split("/"))
    kit = Kit.from_env()
    once: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker(ONCE)
        if marker is None:
            continue
        if not marker.args:
            once.append(item)  # shared out below
        elif kits > 1 and kit is not None and kit.major != marker.args[0]:  # once_per_tier(major): that kit's
            item.add_marker(pytest.mark.skip(reason=f"{ONCE}: run against the RocketMQ {marker.args[0]}.x kit"))
    for i, item in enumerate(once):
        if i % kits != kit_index:
            item.add_marker(pytest.mark.skip(reason=f"{ONCE}: run against another kit of this tier run"))
    for item in items:
        item.add_marker(pytest.mark.realcluster)


@pytest.fixture(scope="session")
def real_addr() -> str:
    addr = os.environ.get("ROCKETMQ_NAMESRV_ADDR")
    if not addr:
        pytest.skip("set ROCKETMQ_NAMESRV_ADDR=host:port (or run make test-real) to run the real-cluster tier")
    return addr


@pytest.fixture(scope="session")
def kit(real_addr: str) -> Kit:
    """The kit running the cluster under test (its Java consumer, admin tool and processes)."""
    found = Kit.from_env()
    if found is None:
        pytest.skip(f"needs the cluster run from a RocketMQ kit ({KIT_ENV}); make test-real starts one")
    assert found.namesrv_addr == real_addr, f"{KIT_ENV} runs {found.namesrv_addr}, the tier tests {real_addr}"
    return found


#: A private cluster's configuration: its brokers, extra broker.properties lines, extra broker JVM options,
#: and rmq's other variables (RMQ_MASTER_ROLE).
Config = tuple[tuple[str, ...], str, str, tuple[tuple[str, str], ...]]


class PrivateClusters:
    """Private clusters of the kit under test, one per configuration, shared by the tests that ask for it.

    A cluster costs a NameServer and broker JVMs (10-30 s to register on the tier's machine), so the tests
    of one configuration, in any module, share one. Those that kill or freeze a process take theirs out of
    the pool (`take`). At most KEEP run at once: starting another stops the one used longest ago.

    One, because an idle cluster costs more than starting it again: a 5.3.3 broker doing nothing takes 6-9 % of a
    core, its NameServer 4 % (a 4.9.8 broker 3 %), while a start costs a NameServer and a broker about 20 s of CPU.
    Two clusters kept idle beside the one in use took about a quarter of the tier machine's two cores.
    """

    KEEP = 1

    def __init__(self, kit: Kit) -> None:
        self._kit = kit
        self._running: dict[Config, Kit] = {}  # least recently used first

    def get(
        self, brokers: Iterable[str] = ("a", "b"), props: str = "", opts: str = "", env: dict[str, str] | None = None
    ) -> Kit:
        """The running cluster of this configuration, started if there is none; stays in the pool."""
        config = (tuple(brokers), props, opts, tuple(sorted((env or {}).items())))
        cluster = self._running.pop(config, None) or self._launch(config)
        self._running[config] = cluster
        return cluster

    def take(
        self, brokers: Iterable[str] = ("a", "b"), props: str = "", opts: str = "", env: dict[str, str] | None = None
    ) -> Kit:
        """A cluster of this configuration for the caller alone (it may kill it): the pool's, or a new one.

        The caller closes it.
        """
        config = (tuple(brokers), props, opts, tuple(sorted((env or {}).items())))
        return self._running.pop(config, None) or self._launch(config)

    def _launch(self, config: Config) -> Kit:
        while len(self._running) >= self.KEEP:
            self._running.pop(next(iter(self._running))).close()
        brokers, props, opts, env = config
        shift = int(os.environ.get("RMQ_PRIVATE_SHIFT", "2000"))  # tier.py gives each kit run a range of its own
        return Kit.launch(
            self._kit.folder, brokers, props=props, opts=opts, first_shift=shift, heap=PRIVATE_HEAP, extra_env=dict(env)
        )

    def close(self) -> None:
        """Remove every cluster of the pool, each whatever removing another raised."""
        failures: list[BaseException] = []
        while self._running:
            try:
                self._running.popitem()[1].close()
            except BaseException as exc:  # raised once the others are removed
                failures.append(exc)
        if failures:
            raise failures[0]


#: One private configuration for test_transactions (brokers that check halves back every 2 s, not 60) and
#: test_timer's recall (5.3.3's default is recallMessageEnable=false; a 4.x broker ignores the setting).
#: Checks 30 times as often as by default would give a half 30 s instead of 15 min before the broker drops
#: it (transactionCheckMax checks), while batches and the answers' clock margin take as long as anywhere:
#: 60 checks keep 2 minutes.
FAST_CHECKS_AND_RECALL = (
    "transactionCheckInterval=2000\ntransactionTimeOut=2000\ntransactionCheckMax=60\nrecallMessageEnable=true"
)

#: One private configuration for test_misconfig's refusals (no auto-created topics, messages of 64 KiB at
#: most) and test_timer's broker with its timer wheel off (a 4.x broker ignores the setting).
REFUSING = "autoCreateTopicEnable=false\nmaxMessageSize=65536\ntimerWheelEnable=false"

#: The heap of a private cluster's brokers (the kit's default is 1 GiB).
PRIVATE_HEAP = "-Xms256m -Xmx512m"


@pytest.fixture(scope="session")
def private_clusters(kit: Kit) -> Iterator[PrivateClusters]:
    pool = PrivateClusters(kit)
    yield pool
    pool.close()


@pytest.fixture
def private_kit(private_clusters: PrivateClusters) -> Callable[..., Kit]:
    """private_kit(brokers=("a", "b"), props="", opts="") -> a private cluster of the same kit, shared with the
    other tests of that configuration: the test may not kill, freeze or restart its processes (make_kit)."""
    return private_clusters.get


@pytest.fixture
def make_kit(private_clusters: PrivateClusters) -> Iterator[Callable[..., Kit]]:
    """make_kit(brokers=("a", "b"), props="", opts="", env=None) -> a private cluster of the same kit for this test
    alone (it may kill its processes), removed at teardown: the pool's of that configuration, or a new one."""
    taken: list[Kit] = []

    def make(
        brokers: Iterable[str] = ("a", "b"), props: str = "", opts: str = "", env: dict[str, str] | None = None
    ) -> Kit:
        taken.append(private_clusters.take(brokers, props, opts, env))
        return taken[-1]

    yield make
    for private in taken:
        private.close()


def fresh_topic_name(label: str) -> str:
    return f"SparkRmq_{label}_{uuid.uuid4().hex[:8]}"


def wait_for(cond: Callable[[], Any], timeout: float = 90.0, every: float = 1.0, what: str = "condition") -> Any:
    """Poll ``cond`` every ``every`` s until it returns something true (returned), failing after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() >= deadline:
            if not value:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {value!r})")
            return value
        time.sleep(every)  # polling a condition, with a deadline


@pytest.fixture
def real_topic(request: pytest.FixtureRequest, real_addr: str) -> str:
    """A topic name of this test's own, created by the brokers on its first message (autoCreateTopicEnable).

    Tests that need it on both brokers from the start create it with `kit.topic(name)` (mqadmin, ~4 s).
    """
    return fresh_topic_name(request.node.name.split("[")[0].removeprefix("test_")[:40])


@pytest.fixture(scope="session")
def proxy_addr(kit: Kit) -> Iterator[str]:
    """The kit's RocketMQ Proxy (remoting), started by the first test that needs it and killed after the
    session; 5.x kits only."""
    port = read_kit_env(kit.folder).get("PORT_PROXY")
    if not port:
        pytest.skip(f"the RocketMQ {kit.version} kit has no Proxy")
    pid_file = Path(kit.run_folder) / "run" / "proxy.pid"
    running = pid_file.exists()
    if not running:
        kit.rmq("start", "proxy", timeout=180)
    yield f"127.0.0.1:{int(port) + kit.shift}"
    if not running:
        kit.rmq("kill", "proxy", check=False)


@pytest.fixture(scope="session")
def spark(real_addr: str) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from spark_session import local_session

    session = local_session("spark-rocketmq-real-tier")
    yield session
    session.stop()
