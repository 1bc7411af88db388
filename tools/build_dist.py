"""`make dist`: the sdist, the pure wheel and the bundles for executors that have no pip install of it.

    python tools/build_dist.py --out-dir dist

Builds the sdist and the py3-none-any wheel (``python -m build``), checks them with ``twine check
--strict``, then installs the wheel and its dependencies (tenacity) into a scratch folder with pip,
refuses any distribution that is not pure Python (a zip on the executors' path cannot load a
compiled extension), and writes beside the wheel:

- ``spark_rocketmq-<version>-py-files.zip``: for ``spark-submit --py-files`` (``spark.submit.pyFiles``,
  ``SparkContext.addPyFile``), the package and its dependencies at the zip's root;
- ``spark_rocketmq-<version>-site-packages.tar.gz``: the same files for ``--archives`` /
  ``spark.archives`` as ``...tar.gz#env``, with ``spark.executorEnv.PYTHONPATH=env``.

Both list their entries sorted, with fixed timestamps and owners. pyspark, pyarrow and pandas are
not bundled: the executors' Python has them (they come with Spark or the image), and pyarrow is compiled.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

#: The earliest time a zip entry can carry; used for every entry, so a rebuild differs only where the files do.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


#: The project's root (pyproject.toml).
PROJECT = Path(__file__).resolve().parents[1]


class BundleError(RuntimeError):
    """A dependency cannot be shipped as pure Python."""


@dataclass(frozen=True)
class Dist:
    """What `make dist` writes."""

    sdist: Path
    wheel: Path
    py_files_zip: Path
    site_packages_tar: Path


def build_packages(out_dir: Path, project: Path = PROJECT) -> tuple[Path, Path]:
    """The sdist and the wheel of ``project`` in ``out_dir``, checked by twine; returns (sdist, wheel)."""
    # No --sdist/--wheel: build makes the sdist, then the wheel from the unpacked sdist (which so proves
    # complete), in scratch folders rather than the checkout's build/.
    _run([sys.executable, "-m", "build", "--outdir", str(out_dir), str(project)])
    (sdist,) = sorted(out_dir.glob("spark_rocketmq-*.tar.gz"))
    wheels = sorted(out_dir.glob("spark_rocketmq-*.whl"))
    pure = [w for w in wheels if w.name.endswith("-py3-none-any.whl")]
    if len(wheels) != 1 or not pure:
        raise BundleError(f"expected one pure wheel (py3-none-any) in {out_dir}, found {[w.name for w in wheels]}")
    print(_run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(pure[0])]).strip())
    return sdist, pure[0]


def install_into(wheel: Path, target: Path) -> None:
    """pip-install the wheel and its dependencies (binary wheels only, no bytecode) into ``target``."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    cmd += ["--only-binary=:all:", "--target", str(target), str(wheel)]
    _run(cmd)


def _run(cmd: list[str]) -> str:
    """Run a build step quietly; its output, or BundleError with the end of it when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BundleError(
            f"{' '.join(cmd[1:4])} ... failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return proc.stdout


def check_pure(target: Path) -> list[str]:
    """Names of the installed distributions; BundleError when one of them is not pure Python."""
    advice = (
        "a zip on the executors' path cannot load compiled code. Install it on every node, or ship a packed "
        "environment built for the executors' platform (see docs/deploying.md)"
    )
    compiled = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.suffix in {".so", ".pyd", ".dylib"})
    if compiled:
        raise BundleError(f"compiled files in the bundle ({', '.join(compiled[:5])}): {advice}")
    names = []
    for info in sorted(target.glob("*.dist-info")):
        name = info.name.removesuffix(".dist-info")
        wheel_file = info / "WHEEL"
        if not wheel_file.is_file() or "Root-Is-Purelib: true" not in wheel_file.read_text(encoding="utf-8"):
            raise BundleError(f"{name} is not a pure-Python wheel (Root-Is-Purelib is not true): {advice}")
        names.append(name)
    return names


def bundle_files(target: Path) -> list[Path]:
    """Files to ship, relative to ``target``, sorted: everything pip installed except scripts and caches."""
    files = []
    for path in target.rglob("*"):
        rel = path.relative_to(target)
        # direct_url.json names the folder the wheel was installed from: not shipped.
        if path.is_dir() or rel.parts[0] == "bin" or "__pycache__" in rel.parts or rel.name == "direct_url.json":
            continue
        files.append(rel)
    return sorted(files)


def write_zip(target: Path, files: list[Path], out: Path) -> None:
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in files:
            info = zipfile.ZipInfo(rel.as_posix(), date_time=ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, (target / rel).read_bytes())


def write_tar_gz(target: Path, files: list[Path], out: Path) -> None:
    with (
        out.open("wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in files:
            info = tar.gettarinfo(str(target / rel), arcname=rel.as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
            with (target / rel).open("rb") as fh:
                tar.addfile(info, fh)


def bundle(wheel: Path, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write the --py-files zip and the spark.archives tar.gz of ``wheel``; return their paths."""
    if not wheel.is_file() or not wheel.name.endswith("-py3-none-any.whl"):
        raise BundleError(f"{wheel}: expected the pure wheel of `make dist` (spark_rocketmq-VERSION-py3-none-any.whl)")
    out_dir = out_dir or wheel.parent
    stem = "-".join(wheel.name.split("-")[:2])  # spark_rocketmq-<version>
    with tempfile.TemporaryDirectory(prefix="spark-bundle-") as scratch:
        target = Path(scratch) / "site-packages"
        install_into(wheel, target)
        check_pure(target)
        files = bundle_files(target)
        zip_path = out_dir / f"{stem}-py-files.zip"
        tar_path = out_dir / f"{stem}-site-packages.tar.gz"
        write_zip(target, files, zip_path)
        write_tar_gz(target, files, tar_path)
    return zip_path, tar_path


def build_dist(out_dir: Path, project: Path = PROJECT) -> Dist:
    """Everything `make dist` writes, into an empty (or new) ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(out_dir.iterdir()):
        raise BundleError(f"{out_dir} is not empty: remove it first (make dist does) so no older build is picked")
    sdist, wheel = build_packages(out_dir, project)
    zip_path, tar_path = bundle(wheel, out_dir)
    return Dist(sdist, wheel, zip_path, tar_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=PROJECT / "dist", help="an empty or new folder (default dist/)")
    args = parser.parse_args(argv)
    try:
        dist = build_dist(args.out_dir)
    except BundleError as exc:
        print(f"build_dist: {exc}", file=sys.stderr)
        return 2
    for path in (dist.sdist, dist.wheel, dist.py_files_zip, dist.site_packages_tar):
        print(f"{path} ({os.path.getsize(path):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
