"""A real Apache RocketMQ cluster run from a kit folder by its `rmq` script (NameServer, brokers, Java tools).

A kit is a folder with `rmq` and `kit.env` (VERSION, NAMESRV_PORT, PORT_A, PORT_B, PORT_ACL): the
script starts the processes, creates topics, dumps a topic with a real Java pull consumer, and
freezes, kills or restarts a process. `Kit.launch` runs one on free loopback ports in a run folder of
its own, so that several clusters (and a kit someone started by hand) can run side by side;
`Kit.from_env` names the one the real-cluster tier runs against.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_rocketmq.client.namesrv import NameServerClient
from spark_rocketmq.client.remoting import RemotingClient
from spark_rocketmq.errors import RocketMQError
from spark_rocketmq.protocol.codes import RequestCode, ResponseCode
from spark_rocketmq.protocol.command import RemotingCommand

#: The environment the tier passes to pytest: the kit's folder, and how `rmq` runs it (ports, run folder).
KIT_ENV = "ROCKETMQ_KIT"
#: ... and "I/N": this pytest runs against kit I of N (conftest.py shares the once_per_tier tests out).
ONCE_ENV = "SPARK_ROCKETMQ_TIER_ONCE"
RMQ_VARS = (
    "RMQ_RUN",
    "RMQ_PORT_SHIFT",
    "RMQ_NAMESRV_PORT",
    "RMQ_BROKER_PROPS",
    "RMQ_BROKER_OPTS",
    "RMQ_BROKER_HEAP",
    "RMQ_MASTER_ROLE",
)
#: Each process's brokerName (the shared clusters run a and b; private ones the replicated topologies too).
BROKER_NAMES = {
    "a": "broker-a",
    "b": "broker-b",
    "acl": "broker-c",
    "a1": "broker-a",
    "b1": "broker-b",
    **{f"d{i}": "broker-d" for i in range(3)},
    **{f"e{i}": "broker-e" for i in range(2)},
}
#: The processes whose run files are named by their brokerName (the others by the process name).
_KEYED_BY_BROKER_NAME = ("a", "b", "acl")
#: Every process of a cluster, in the order close() kills them.
PROCESSES = ("acl", "e1", "e0", "d2", "d1", "d0", "b1", "a1", "b", "a", "namesrv")
#: GET_BROKER_RUNTIME_INFO (mqadmin brokerStatus): a broker's runtime figures, commitLogMaxOffset among them.
GET_BROKER_RUNTIME_INFO = 28
#: broker.properties lines of every cluster the tier starts. A 5.x broker's TimerFlushService compares its whole
#: timer wheel (11 MB) byte by byte and forces it to disk every timerFlushIntervalMs (1 s by default): a fifth
#: of an idle broker's CPU. Every 10 s persists the wheel less often and changes no delivery time (a 4.x broker
#: ignores the setting).
TIER_BROKER_PROPS = "timerFlushIntervalMs=10000"
#: A 5.x broker registers about 10 s after it listens, any broker every 30 s; starting waits up to 90 s.
START_TIMEOUT_S = 180.0


class KitError(RuntimeError):
    """An `rmq` command failed; the message has its output."""


def read_kit_env(folder: Path) -> dict[str, str]:
    """kit.env's plain assignments (VERSION, ports)."""
    values: dict[str, str] = {}
    for line in (folder / "kit.env").read_text().splitlines():
        m = re.fullmatch(r"([A-Z_]+)=\"?([^\"]*)\"?", line.strip())
        if m:
            values[m[1]] = m[2]
    return values


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Kit:
    """One cluster of a kit: `rmq` with this cluster's ports and run folder."""

    folder: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def _kit_env(self) -> dict[str, str]:
        return read_kit_env(self.folder)

    @property
    def version(self) -> str:
        return self._kit_env["VERSION"]

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def has_acl_broker(self) -> bool:
        return bool(self._kit_env.get("PORT_ACL"))

    @property
    def shift(self) -> int:
        return int(self.env.get("RMQ_PORT_SHIFT", "0"))

    @property
    def namesrv_port(self) -> int:
        return int(self.env.get("RMQ_NAMESRV_PORT") or self._kit_env["NAMESRV_PORT"])

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def run_folder(self) -> Path:
        return Path(self.env.get("RMQ_RUN") or f"/tmp/rocketmq-{self.version}")

    def broker_port(self, name: str) -> int:
        return base_port(self._kit_env, name) + self.shift

    def broker_addr(self, name: str) -> str:
        return f"127.0.0.1:{self.broker_port(name)}"

    def rmq(self, *args: str, timeout: float = 120.0, check: bool = True) -> str:
        """Run `rmq ARGS` for this cluster; its stdout (stderr joins it in the error when it fails)."""
        proc = subprocess.run(
            [str(self.folder / "rmq"), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            output = proc.stderr.strip() or proc.stdout.strip()
            raise KitError(f"rmq {' '.join(args)} exited {proc.returncode}: {output}")
        return proc.stdout

    def start(self, *names: str) -> None:
        """Start the NameServer and the named brokers (default a and b) and wait until they are registered."""
        self.rmq("start", *(names or ("a", "b")), timeout=START_TIMEOUT_S)

    def restart(self, name: str, timeout: float = START_TIMEOUT_S) -> None:
        """Start broker process ``name`` again and wait until the NameServer lists it (``whole``), up to ``timeout``
        from now: on a loaded machine a broker restarted mid-test can take longer than `rmq start` waits."""
        deadline = time.monotonic() + timeout
        try:
            self.start(name)
        except KitError:
            while not self.whole(name):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)  # a broker registers every 10-30 s

    def whole(self, *names: str) -> bool:
        """Whether the NameServer and the named brokers run, and the NameServer lists those brokers
        (GET_BROKER_CLUSTER_INFO: no JVM, unlike `start`'s wait)."""
        if any(self.pid(name) is None for name in ("namesrv", *names)):
            return False
        client = RemotingClient(connect_timeout_ms=2000)
        try:
            registered = NameServerClient(client, [self.namesrv_addr], 2000).registered_brokers()
        except RocketMQError:
            return False
        finally:
            client.close()
        return {BROKER_NAMES[name] for name in names} <= set(registered)

    def stop(self, *names: str) -> None:
        self.rmq("stop", *names)

    def kill(self, name: str) -> None:
        self.rmq("kill", name)

    def freeze(self, name: str) -> None:
        self.rmq("freeze", name)

    def thaw(self, name: str) -> None:
        self.rmq("thaw", name)

    def clean(self) -> None:
        """Stop every process of this cluster and delete its stores and logs."""
        self.rmq("clean", timeout=60)

    def pid(self, name: str) -> int | None:
        """The process id of a running process of this cluster (namesrv, a, b, acl), else None."""
        file = self.run_folder / "run" / f"{_file_key(name)}.pid"
        try:
            pid = int(file.read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def topic(
        self, name: str, queues: int = 4, brokers: Iterable[str] = ("a", "b"), attributes: str | None = None
    ) -> str:
        """Create a topic on `brokers` (those of them running) with `queues` read and write queues, and 5.x
        `attributes` as mqadmin's -a takes them (``+message.type=DELAY``).

        UPDATE_AND_CREATE_TOPIC as mqadmin's updateTopic sends it (`rmq topic` does the same with a JVM
        start per broker, seconds on a busy machine), then waits until the NameServer's route of the
        topic has every one of those brokers.
        """
        brokers = [b for b in brokers if self.pid(b) is not None]
        client = RemotingClient(connect_timeout_ms=5000)
        try:
            for broker in brokers:
                header = {
                    "topic": name,
                    "defaultTopic": "TBW102",
                    "readQueueNums": str(queues),
                    "writeQueueNums": str(queues),
                    "perm": "6",  # read and write
                    "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": "0",
                    "order": "false",
                }
                if attributes:
                    header["attributes"] = attributes
                cmd = RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=header)
                answer = client.invoke_async(self.broker_addr(broker), cmd, 30_000).result(timeout=35)
                if answer.code != ResponseCode.SUCCESS:
                    raise KitError(f"creating topic {name} on broker-{broker}: code {answer.code}, {answer.remark}")
            namesrv = NameServerClient(client, [self.namesrv_addr], 5000)
            deadline = time.monotonic() + 60
            while True:
                route = namesrv.get_route(name)
                routed = {bd.broker_name for bd in route.broker_datas} if route else set()
                if routed >= {BROKER_NAMES[b] for b in brokers}:
                    break
                if time.monotonic() > deadline:
                    raise KitError(f"topic {name}: the NameServer routes it to {sorted(routed)} only after 60 s")
                time.sleep(0.2)  # a broker registers a new topic within milliseconds
        finally:
            client.close()
        return name

    def runtime_info(self, name: str) -> dict[str, str]:
        """What `mqadmin brokerStatus` shows of process `name` (GET_BROKER_RUNTIME_INFO), e.g. commitLogMaxOffset."""
        client = RemotingClient(connect_timeout_ms=2000)
        try:
            cmd = RemotingCommand(GET_BROKER_RUNTIME_INFO, ext_fields={})
            answer = client.invoke_sync(self.broker_addr(name), cmd, 5000)
        finally:
            client.close()
        if answer.code != ResponseCode.SUCCESS or not answer.body:
            raise KitError(f"runtime info of {name}: code {answer.code}, {answer.remark}")
        return {str(k): str(v) for k, v in json.loads(bytes(answer.body))["table"].items()}

    def await_pairs(self, topic: str, pairs: Mapping[str, str], timeout: float = 120.0) -> None:
        """Wait until every master-slave pair (``{"a": "a1", ...}``) is ready for SYNC_MASTER sends of ``topic``:
        its route names each pair's master and slave (brokerIds 0 and 1), and each slave holds all of its
        master's commit log (their commitLogMaxOffset equal, and not 0: the slave has had something to copy,
        so its HA connection works; write to each master first). A slave just started, or slow on a loaded
        machine, may still be copying: a SYNC_MASTER answers sends FLUSH_SLAVE_TIMEOUT meanwhile."""
        deadline = time.monotonic() + timeout
        wanted = {BROKER_NAMES[m]: (self.broker_addr(m), self.broker_addr(s)) for m, s in pairs.items()}
        while True:
            lagging = self._pairs_lagging(topic, wanted, pairs)
            if not lagging:
                return
            if time.monotonic() > deadline:
                raise KitError(f"master-slave pairs of {topic} not ready after {timeout:.0f} s: {lagging}")
            time.sleep(0.2)  # a few small requests a poll

    def _pairs_lagging(self, topic: str, wanted: Mapping[str, tuple[str, str]], pairs: Mapping[str, str]) -> list[str]:
        """What await_pairs still waits for, in words (nothing: ready)."""
        client = RemotingClient(connect_timeout_ms=2000)
        try:
            route = NameServerClient(client, [self.namesrv_addr], 2000).get_route(topic)
        except RocketMQError as exc:
            return [f"no route ({exc})"]
        finally:
            client.close()
        routed = {bd.broker_name: bd.broker_addrs for bd in route.broker_datas} if route else {}
        lagging = [
            f"the route names {name} {routed.get(name, {})}"
            for name, (master, slave) in wanted.items()
            if {0: master, 1: slave}.items() - routed.get(name, {}).items()
        ]
        for master, slave in pairs.items():
            try:
                offsets = [int(self.runtime_info(p)["commitLogMaxOffset"]) for p in (master, slave)]
            except (RocketMQError, KitError, TimeoutError, KeyError, ValueError) as exc:
                lagging.append(f"{master}, {slave}: no commitLogMaxOffset ({exc})")
                continue
            if offsets[0] == 0 or offsets[1] < offsets[0]:
                lagging.append(f"commitLogMaxOffset of {master} {offsets[0]}, of {slave} {offsets[1]}")
        return lagging

    def has_processes(self, *names: str) -> bool:
        """Whether this kit can run these processes (its kit.env has their ports)."""
        try:
            for name in names:
                base_port(self._kit_env, name)
        except KitError:
            return False
        return True

    def admin(self, *args: str) -> str:
        """mqadmin ARGS (signed as the ACL admin)."""
        return self.rmq("admin", *args)

    def dump(self, topic: str, at_least: int = 0, timeout: float = 60.0) -> list[dict[str, Any]]:
        """What a real Java pull consumer reads from every queue of `topic`: one dict per stored message.

        A broker answers SEND_OK once a message is in its commit log and makes it readable when its
        dispatch thread has indexed it; delayed and committed messages appear later still. Until the
        brokers' queues of `topic` hold `at_least` messages (`stored_count`, a few requests, no JVM) the
        consumer is not started; then it is run, again about once a second while it reads fewer, until
        `timeout` has passed. It gives up on its first timeout (a NameServer just restarted can be slow on
        a busy machine): a failed run counts as a poll, and the last one's error is raised.
        """
        deadline = time.monotonic() + timeout
        while True:
            if at_least:
                self._wait_stored(topic, at_least, deadline)
            try:
                stored = self._dump_once(topic)
            except KitError:
                if time.monotonic() > deadline:
                    raise
            else:
                if len(stored) >= at_least or time.monotonic() > deadline:
                    return stored
            time.sleep(1.0)  # each run starts a JVM: one a second is plenty

    def stored_count(self, topic: str) -> int | None:
        """How many messages the brokers' queues of `topic` hold (the sum of their max offsets, GET_MAX_OFFSET
        to each queue of its route), or None when that cannot be told (no route yet, a broker not answering).

        Delayed, timer and half messages wait in the brokers' system topics: they count once in `topic`.
        """
        client = RemotingClient(connect_timeout_ms=2000)
        try:
            route = NameServerClient(client, [self.namesrv_addr], 2000).get_route(topic)
            if route is None or not route.queue_datas:
                return None
            total = 0
            for queues in route.queue_datas:
                addr = route.broker_addr(queues.broker_name)
                if addr is None:
                    return None
                for queue_id in range(queues.read_queue_nums):
                    offset = _max_offset(client, addr, topic, queue_id)
                    if offset is None:
                        return None
                    total += offset
            return total
        except (RocketMQError, ValueError):  # no answer, or one without an offset: ask the Java consumer
            return None
        finally:
            client.close()

    def max_offset(self, name: str, topic: str, queue_id: int = 0) -> int | None:
        """The max offset of one queue of `topic` on broker `name` (a system topic too, such as the half
        topic), or None when the broker does not tell."""
        client = RemotingClient(connect_timeout_ms=2000)
        try:
            return _max_offset(client, self.broker_addr(name), topic, queue_id)
        except (RocketMQError, ValueError):
            return None
        finally:
            client.close()

    def _wait_stored(self, topic: str, at_least: int, deadline: float) -> None:
        """Return once the brokers hold `at_least` messages of `topic`, the count is unknown, or at `deadline`."""
        while time.monotonic() < deadline:
            count = self.stored_count(topic)
            if count is None or count >= at_least:
                return
            time.sleep(0.2)  # a few small requests a poll

    def _dump_once(self, topic: str) -> list[dict[str, Any]]:
        out = self.rmq("dump", topic, timeout=300)
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def log_text(self, name: str) -> str:
        """The console output of one process (namesrv, a, b, acl)."""
        file = self.run_folder / "logs" / f"{_file_key(name)}.out"
        return file.read_text(errors="replace") if file.exists() else ""

    @classmethod
    def from_env(cls) -> Kit | None:
        """The kit the tier runs against (ROCKETMQ_KIT and the RMQ_* variables), or None."""
        folder = os.environ.get(KIT_ENV)
        if not folder:
            return None
        return cls(Path(folder), {k: os.environ[k] for k in RMQ_VARS if k in os.environ})

    @classmethod
    def launch(
        cls,
        folder: Path,
        brokers: Iterable[str] = ("a", "b"),
        *,
        props: str = "",
        opts: str = "",
        heap: str | None = None,
        first_shift: int = 1000,
        extra_env: Mapping[str, str] | None = None,
    ) -> Kit:
        """A cluster of the kit in `folder` on free ports and a run folder of its own, started; clean() ends it.

        props: extra broker.properties lines ('\\n'-separated), after TIER_BROKER_PROPS; opts: extra broker JVM
        options.
        """
        brokers = tuple(brokers)
        kit_env = read_kit_env(folder)
        base = [base_port(kit_env, b) for b in brokers]
        # a DLedger node also takes port - 1 (its peers'); a 5.x NameServer runs the embedded controller
        extra = [p - 1 for b, p in zip(brokers, base, strict=True) if b.startswith("d")]
        if kit_env.get("PORT_CONTROLLER"):
            extra.append(int(kit_env["PORT_CONTROLLER"]))
        if kit_env.get("PORT_PROXY"):  # `rmq start proxy`: its remoting port, and the gRPC port beside it
            extra += [int(kit_env["PORT_PROXY"]), int(kit_env["PORT_PROXY"]) + 1]
        for shift in range(first_shift, 20000, 100):
            namesrv = int(kit_env["NAMESRV_PORT"]) + shift
            # each broker listens on its port, port - 2 (the VIP channel) and port + 1 (HA)
            wanted = [namesrv, *(p + shift + d for p in base for d in (-2, 0, 1)), *(p + shift for p in extra)]
            if all(port_free(p) for p in wanted):
                break
        else:
            raise KitError("no free ports for a RocketMQ cluster")
        run = tempfile.mkdtemp(prefix=f"spark-rocketmq-{kit_env['VERSION']}-")
        env = {"RMQ_RUN": run, "RMQ_PORT_SHIFT": str(shift), "RMQ_NAMESRV_PORT": str(namesrv), **(extra_env or {})}
        env["RMQ_BROKER_PROPS"] = "\n".join(p for p in (TIER_BROKER_PROPS, props) if p)
        if opts:
            env["RMQ_BROKER_OPTS"] = opts
        if heap:
            env["RMQ_BROKER_HEAP"] = heap
        kit = cls(folder, env)
        try:
            kit.start(*brokers)
        except BaseException:
            kit.clean()
            shutil.rmtree(run, ignore_errors=True)
            raise
        return kit

    def close(self) -> None:
        """Kill every process of this cluster (a broker's orderly stop takes seconds, and nothing of a test
        cluster is kept), clean(), and remove the run folder itself."""
        try:
            for name in PROCESSES:
                if self.pid(name) is not None:
                    self.rmq("kill", name, check=False)  # gone already is as good: clean() stops the rest
            self.clean()
        finally:
            shutil.rmtree(self.run_folder, ignore_errors=True)


def base_port(kit_env: Mapping[str, str], name: str) -> int:
    """A process's port before the cluster's shift, from kit.env (as rmq's broker_port)."""
    single = {"a": "PORT_A", "b": "PORT_B", "acl": "PORT_ACL", "a1": "PORT_A_SLAVE", "b1": "PORT_B_SLAVE"}
    if name in single:
        return int(kit_env[single[name]])
    group = {"d": "PORT_DLEDGER", "e": "PORT_CONTROLLER_MODE"}.get(name[:1])
    ports = kit_env.get(group or "", "").split()
    if not ports or not name[1:].isdigit():
        raise KitError(f"the RocketMQ {kit_env.get('VERSION')} kit has no process {name!r}")
    return int(ports[int(name[1:])])


def _file_key(name: str) -> str:
    """The name of a process's files in the run folder (rmq's key_of)."""
    return BROKER_NAMES[name] if name in _KEYED_BY_BROKER_NAME else name


def _max_offset(client: RemotingClient, addr: str, topic: str, queue_id: int) -> int | None:
    """GET_MAX_OFFSET of one queue; None for an error answer."""
    cmd = RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": topic, "queueId": str(queue_id)})
    answer = client.invoke_sync(addr, cmd, 2000)
    if answer.code != ResponseCode.SUCCESS:
        return None
    return int(answer.field("offset") or "")
