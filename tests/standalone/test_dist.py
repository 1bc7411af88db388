"""`make dist`: the wheel and sdist's metadata, and the --py-files zip imported alone by a fresh Python."""

from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import spark_rocketmq

pytestmark = [pytest.mark.standalone, pytest.mark.timeout(600)]


def test_wheel_is_pure_typed_and_carries_the_version_and_extras(dist) -> None:
    assert dist.wheel.name == f"spark_rocketmq-{spark_rocketmq.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(dist.wheel) as whl:
        names = set(whl.namelist())
        meta = email.message_from_bytes(whl.read(f"spark_rocketmq-{spark_rocketmq.__version__}.dist-info/METADATA"))
    assert "spark_rocketmq/py.typed" in names
    assert meta["Version"] == spark_rocketmq.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert "spark" in meta.get_all("Provides-Extra")
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("tenacity") for r in requires)
    assert any(r.startswith("pyspark") and 'extra == "spark"' in r for r in requires)
    assert "Typing :: Typed" in meta.get_all("Classifier")
    with tarfile.open(dist.sdist) as sdist:
        assert f"spark_rocketmq-{spark_rocketmq.__version__}/spark_rocketmq/py.typed" in sdist.getnames()


def test_bundles_hold_the_package_and_tenacity_and_nothing_compiled(dist) -> None:
    with zipfile.ZipFile(dist.py_files_zip) as zf:
        zipped = set(zf.namelist())
    with tarfile.open(dist.site_packages_tar) as tar:
        tarred = set(tar.getnames())
    assert zipped == tarred
    assert {n.split("/")[0] for n in zipped if not n.split("/")[0].endswith(".dist-info")} == {
        "spark_rocketmq",
        "tenacity",
    }
    assert not [n for n in zipped if n.endswith((".so", ".pyd", ".pyc")) or n.endswith("direct_url.json")]


def test_every_module_imports_from_the_zip_and_a_producer_sends(dist, bare_python: Path, tmp_path: Path) -> None:
    """A fresh interpreter with only the zip for spark_rocketmq: every module imports from it, then a local
    cluster started from it stores what a producer from it sends."""
    script = textwrap.dedent(
        f"""
        import importlib, sys, zipfile
        ZIP = {str(dist.py_files_zip)!r}
        sys.path.insert(0, ZIP)
        files = [n for n in zipfile.ZipFile(ZIP).namelist() if n.startswith("spark_rocketmq/") and n.endswith(".py")]
        names = sorted(n[:-3].replace("/", ".").removesuffix(".__init__") for n in files)
        for name in names:
            module = importlib.import_module(name)
            assert module.__file__.startswith(ZIP), (name, module.__file__)
        import tenacity
        assert tenacity.__file__.startswith(ZIP), tenacity.__file__
        from importlib.metadata import version
        import spark_rocketmq
        assert version("spark-rocketmq") == spark_rocketmq.__version__
        from spark_rocketmq import Message, Producer
        from spark_rocketmq.local import LocalCluster
        with LocalCluster(brokers=1, namesrvs=1) as cluster:
            cluster.create_topic("ZipImport", queues=2)
            with Producer(namesrv_addr=cluster.namesrv_addr, group="zip-import") as producer:
                producer.send_batch([Message("ZipImport", b"row-%d" % i) for i in range(100)])
            stored = sorted(m.body for m in cluster.messages("ZipImport"))
        assert stored == sorted(b"row-%d" % i for i in range(100)), len(stored)
        print("modules", len(names))
        """
    )
    proc = subprocess.run(
        [str(bare_python), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, env={}
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    imported = int(proc.stdout.split()[-1])
    assert imported >= 70  # every module of protocol, client, local and spark


def test_the_wheel_installs_in_a_new_venv_with_its_dependency(dist, tmp_path: Path) -> None:
    """pip install of the wheel into an empty venv brings tenacity (PyPI, or pip's cache) and a package that
    reports its version, carries py.typed and builds a producer's configuration; the producer needs no Spark."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(dist.wheel)], check=True, timeout=300)
    probe = textwrap.dedent(
        """
        import importlib.resources, spark_rocketmq
        from spark_rocketmq.client.config import ProducerConfig
        assert importlib.resources.files("spark_rocketmq").joinpath("py.typed").is_file()
        assert ProducerConfig(namesrv_addr="127.0.0.1:9876").namesrv_addrs == ["127.0.0.1:9876"]
        print(spark_rocketmq.__version__, spark_rocketmq.__file__)
        """
    )
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    version, location = out.split()
    assert version == spark_rocketmq.__version__
    assert location.startswith(str(venv))  # the installed copy, not this checkout
