"""A Spark standalone cluster for tests: a Master and Workers of the installed PySpark, on loopback.

Its executors run a Python in which spark_rocketmq (and tenacity) are NOT importable (`executor_python`),
as on a cluster nobody pip-installed into: a job reaches them only by shipping the package with
spark-submit (--py-files, --archives). Used by tests/standalone (local RocketMQ) and tests/real
(a real RocketMQ kit).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


def spark_home() -> Path:
    """The pip-installed PySpark is a Spark distribution: bin/spark-class, bin/spark-submit, jars/."""
    pyspark = pytest.importorskip("pyspark")
    return Path(pyspark.__file__).resolve().parent


JOBS = Path(__file__).resolve().parents[1] / "jobs"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from build_dist import Dist, build_dist  # noqa: E402

#: Distributions the executors' Python must not have: what a job ships to them.
SHIPPED = ("spark_rocketmq", "tenacity")
START_TIMEOUT_S = 240.0


def executor_python(folder: Path, without: Sequence[str] = SHIPPED) -> Path:
    """A venv whose site-packages links every entry of this interpreter's site-packages except ``without``
    (and the editable install's finder): pyspark, pyarrow and pandas import, spark_rocketmq does not."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    target = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    source = Path(sysconfig.get_paths()["purelib"])
    for entry in sorted(source.iterdir()):
        name = entry.name.lower().replace("-", "_")
        if name.startswith("__editable__") or name.startswith(tuple(without)) or (target / entry.name).exists():
            continue
        (target / entry.name).symlink_to(entry)
    for module in ("pyspark", "pyarrow", "pandas", *without):
        probe = subprocess.run([str(python), "-c", f"import {module}"], cwd=folder, capture_output=True)
        importable = probe.returncode == 0
        if importable == (module in without):
            state = "importable" if importable else "missing"
            raise RuntimeError(f"executor Python {python}: {module} is {state}: {probe.stderr.decode()[-500:]}")
    return python


def _children(pid: int) -> list[int]:
    """Every process whose parent is ``pid`` (from /proc)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(proc.name))
    return out


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class StandaloneCluster:
    """A Master and ``workers`` Workers (``cores`` each) started with spark-class; stop() ends them all."""

    folder: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    master_port: int = 0
    ui_port: int = 0
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1")
        env["SPARK_LOG_DIR"] = str(self.folder / "logs")
        env["SPARK_NO_DAEMONIZE"] = "1"
        # No REST submission server (it binds a fixed port, 6066) and no worker-side app cleanup surprises.
        env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
        env.pop("PYTHONPATH", None)
        return env

    def _daemon(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.folder / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            cwd=self.folder,
            start_new_session=True,  # its own process group: stop() ends its executors and their Python too
        )
        self.daemons.append(proc)
        return proc

    def start(self) -> StandaloneCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            # Port 0: the master binds free ports itself (no race with other processes); read them from its log.
            self._daemon(
                "master",
                ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
            )
            self.master_port = self._bound_port("master", "sparkMaster")
            self.ui_port = self._bound_port("master", "MasterUI")
            for i in range(self.workers):
                self._daemon(
                    f"worker-{i}",
                    ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                     "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory,
                     "--work-dir", str(self.folder / f"work-{i}")],
                )  # fmt: skip
            self.wait_alive_workers(self.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def _bound_port(self, daemon: str, service: str, timeout_s: float = START_TIMEOUT_S) -> int:
        """The port a daemon's service bound, from its log line "Successfully started service 'X' on port N"."""
        pattern = re.compile(rf"Successfully started service '{service}' on port (\d+)")
        log = self.folder / f"{daemon}.log"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = pattern.search(log.read_text(errors="replace"))
            if found:
                return int(found.group(1))
            self._check_daemons()
            time.sleep(0.2)  # polling the log until the deadline
        raise RuntimeError(f"{daemon}: no {service} port in {timeout_s} s: {self.log_tail()}")

    def _check_daemons(self) -> None:
        for proc in self.daemons:
            if proc.poll() is not None:
                raise RuntimeError(f"a Spark daemon exited ({proc.returncode}): {self.log_tail()}")

    def state(self) -> dict[str, Any]:
        """The Master's JSON status (workers, apps)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as resp:
            return dict(json.load(resp))

    def wait_alive_workers(self, count: int, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            self._check_daemons()
            try:
                status = self.state()
                alive = int(status.get("aliveworkers", 0))
                if alive >= count:
                    return
                last = f"{alive} alive workers"
            except (OSError, ValueError) as exc:  # not listening yet, or not answering JSON yet
                last = str(exc)
            time.sleep(0.2)  # polling the Master's status page until the deadline
        raise RuntimeError(f"standalone cluster not up in {timeout_s} s ({last}): {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        logs = sorted(self.folder.glob("*.log"))
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in logs)

    def worker_pid(self, index: int) -> int:
        return self.daemons[1 + index].pid

    def executor_pids(self, index: int) -> list[int]:
        """The executor JVMs that worker ``index`` launched (and that still run)."""
        return [p for p in descendants(self.worker_pid(index)) if "CoarseGrainedExecutorBackend" in cmdline(p)]

    def python_workers(self, index: int) -> list[int]:
        """Python processes under worker ``index``'s executors (the pyspark daemon and the workers it forks)."""
        found = []
        for pid in descendants(self.worker_pid(index)):
            argv = cmdline(pid).split()
            if argv and Path(argv[0]).name.startswith("python") and "pyspark.daemon" in argv:
                found.append(pid)
        return found

    def kill_worker(self, index: int) -> list[int]:
        """SIGKILL worker ``index``, its executors and their Python processes, as a lost machine; returns the pids."""
        pids = [self.worker_pid(index), *descendants(self.worker_pid(index))]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.daemons[1 + index].wait(timeout=30)
        return pids

    def stop(self) -> None:
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.daemons):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError, PermissionError):  # what is left of its group
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def submit_command(
        self,
        app: Path,
        app_args: Iterable[str] = (),
        *,
        py_files: Iterable[Path] = (),
        archives: Iterable[str] = (),
        conf: Mapping[str, str] | None = None,
    ) -> list[str]:
        """spark-submit of ``app`` to this cluster: client mode, loopback, small executors, no UI."""
        settings = {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            **(conf or {}),
        }
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url]
        for key, value in settings.items():
            cmd += ["--conf", f"{key}={value}"]
        if py_files:
            cmd += ["--py-files", ",".join(str(p) for p in py_files)]
        if archives:
            cmd += ["--archives", ",".join(archives)]
        return [*cmd, str(app), *app_args]

    def submit_env(self, driver_python: Path, executor_python: Path) -> dict[str, str]:
        env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1")
        env["PYSPARK_PYTHON"] = str(executor_python)
        env["PYSPARK_DRIVER_PYTHON"] = str(driver_python)
        env.pop("PYTHONPATH", None)
        return env


#: How a job ships the package: the zip on --py-files, or the site-packages tar.gz on --archives.
SHIPPING = ("py-files", "archives")


def shipped_submit(
    cluster: StandaloneCluster, dist: Dist, bare_python: Path, shipping: str, app: Path, args: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command and environment that ship the package to executors running ``bare_python``.

    py-files: the driver runs ``bare_python`` too and imports the package from the zip; archives: the
    tar.gz is unpacked as ``env`` beside each executor (spark.executorEnv.PYTHONPATH=env) and the driver
    runs this interpreter, which has the package installed, as an edge node does."""
    if shipping == "py-files":
        cmd = cluster.submit_command(app, args, py_files=[dist.py_files_zip])
        return cmd, cluster.submit_env(driver_python=bare_python, executor_python=bare_python)
    if shipping == "archives":
        cmd = cluster.submit_command(
            app, args, archives=[f"{dist.site_packages_tar}#env"], conf={"spark.executorEnv.PYTHONPATH": "env"}
        )
        return cmd, cluster.submit_env(driver_python=Path(sys.executable), executor_python=bare_python)
    raise ValueError(f"shipping {shipping!r}: expected one of {SHIPPING}")


def write_orders(folder: Path, files: int, rows_per_file: int) -> list[int]:
    """JSON files of {"order_id", "status"} rows; returns the order ids in order."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(files):
        part = [f * rows_per_file + i for i in range(rows_per_file)]
        text = "".join(json.dumps({"order_id": i, "status": "paid" if i % 2 else "new"}) + "\n" for i in part)
        (folder / f"orders-{f:03d}.json").write_text(text)
        ids += part
    return ids


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """What `make dist` writes (sdist, wheel, --py-files zip, site-packages tar.gz), built into a tmp folder."""
    return build_dist(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with pyspark, pyarrow and pandas but neither spark_rocketmq nor tenacity."""
    return executor_python(tmp_path_factory.mktemp("executor-python") / "venv")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two 1-core workers, shared by the tests of one module, stopped after them."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    yield cluster
    cluster.stop()
