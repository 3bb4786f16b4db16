"""What the CPU machine prepares for the device run beside the wheels (``jobs/pack-gpu.sh`` calls
``python -m jobs.gpu_run.pack WHL``), and what the device run reads of it:

- ``kernel-cache.tar.xz``: every kernel of the arch exported ahead of time
  (``python -m cutlass_kernels cache build``, then ``cache verify``), so that no process on the device
  compiles what the cache holds; rebuilt only where its key (DSL version, arch, the kernels' sources)
  changed.
- ``estimates.json``: ``python -m pipeline.estimate`` of the packing execution at the preset the
  device run sets it beside (:data:`plan.ESTIMATED`): its peak, read here, never written down by hand.
- ``provenance.json``: the commit the run was prepared from, whether the tree differed from it, and a
  digest of the files that travel (tracked, and untracked that git does not ignore: what a device
  call carries) with their paths. On the device the tree is hashed again over those paths, and the
  shards name the recorded commit (the device's copy of ``.git`` may be stale), marked with the
  digest of what ran where that is not the commit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from cutlass_kernels.kernel_cache import CACHE_ENV
from jobs.gpu_run.plan import ESTIMATED, PACKING, ROOT
from pipeline.data.atomic import atomic_write

DSL_ARCHIVE = "cutlass-dsl.tar.xz"
KERNEL_CACHE = "kernel-cache.tar.xz"  # a tar.xz of the folder kernel-cache/
CACHE_KEY = "kernel-cache.key"  # what the packed cache was built from (a rebuild where it differs)
ESTIMATES = "estimates.json"
PROVENANCE = "provenance.json"
ARCH = "sm_90a"  # the lent GPUs' (H100, H200)


def travelling(root: Path = ROOT) -> list[str]:
    """The files a device call carries of the tree: tracked, and untracked that git does not ignore
    (deleted ones left out), sorted."""
    listed = _git(root, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    return sorted(p for p in set(listed) if p and (root / p).is_file())


def tree_digest(root: Path, paths: list[str]) -> str:
    """SHA-256 over ``paths`` and each one's content (a missing file counts as empty, and differs)."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        file = root / path
        content = hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else "missing"
        digest.update(f"{path}\0{content}\n".encode())
    return digest.hexdigest()


def provenance(root: Path = ROOT) -> dict[str, Any]:
    """The record of the code: the commit, whether the tree differs from it, the travelling files'
    digest and paths."""
    paths = travelling(root)
    differs = bool(_git(root, "status", "--porcelain", "--untracked-files=normal").strip())
    return {
        "commit": _git(root, "rev-parse", "HEAD").strip(),
        "differs": differs,
        "tree": tree_digest(root, paths),
        "files": len(paths),
        "paths": paths,
    }


def checked(record: dict[str, Any], root: Path = ROOT) -> tuple[str, list[str]]:
    """The commit as the shards name it, and what is wrong (empty: the tree here is the one packed):
    the recorded commit where the tree is the commit's, else that commit marked ``+`` the first 12
    digits of this tree's digest; a problem for each path missing here, and for a digest that differs."""
    paths = record["paths"]
    here = tree_digest(root, paths)
    missing = [p for p in paths if not (root / p).is_file()]
    problems = [f"{len(missing)} packed file(s) missing here, e.g. {missing[0]}"] if missing else []
    if here != record["tree"]:
        problems.append(f"the tree's digest {here[:12]} is not the packed {record['tree'][:12]}")
    same = not record["differs"] and not problems
    return (record["commit"] if same else f"{record['commit']}+{here[:12]}"), problems


def estimates() -> dict[str, dict[str, Any]]:
    """``python -m pipeline.estimate`` of the packing execution at :data:`ESTIMATED` (kept once per
    code in the estimate's own table): per execution id, its preset, its timed peak (GiB) and whether
    it fits."""
    selection = [f"workload={PACKING.workloads}", f"variant={PACKING.variants}", f"cluster={ESTIMATED}"]
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.estimate", *selection, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode not in (0, 1):  # 1: a shape does not fit, which the record says
        raise RuntimeError(f"python -m pipeline.estimate {' '.join(selection)}: {done.stderr.strip()[-600:]}")
    keep = ("cluster", "timed_peak_gib", "peak_gib", "fits", "gpu_memory_gb")
    return {e["execution_id"]: {k: e.get(k) for k in keep} for e in json.loads(done.stdout)}


def cache_key() -> str:
    """What a kernel cache of :data:`ARCH` is built from: the DSL's version and the kernels' sources."""
    from cutlass_kernels.kernel_cache import dsl_version, sources_digest

    return f"{dsl_version()} {ARCH} {sources_digest()}"


def kernel_cache(whl: Path) -> str:
    """Build, verify and pack the kernel cache into ``whl`` where the packed one's key differs; a line
    saying what was done."""
    key = cache_key()
    stamp = whl / CACHE_KEY
    if (whl / KERNEL_CACHE).is_file() and stamp.is_file() and stamp.read_text() == key:
        return f"already packed: {whl / KERNEL_CACHE} ({key[:40]})"
    environ = {k: v for k, v in os.environ.items() if k != CACHE_ENV} | {"CUTE_DSL_ARCH": ARCH}
    with tempfile.TemporaryDirectory() as scratch:  # a build compiles every kernel, never loads one
        cache = Path(scratch) / "kernel-cache"
        for argv in (["build", "--arch", ARCH, "--out", str(cache)], ["verify", str(cache)]):
            done = subprocess.run(
                [sys.executable, "-m", "cutlass_kernels", "cache", *argv],
                capture_output=True,
                text=True,
                check=False,
                env=environ,
            )
            if done.returncode != 0:
                raise RuntimeError(f"cutlass_kernels cache {argv[0]}: {(done.stdout + done.stderr)[-600:]}")
        pack_cache(cache, whl / KERNEL_CACHE)
    stamp.write_text(key)
    return f"packed {whl / KERNEL_CACHE}: {done.stdout.strip().splitlines()[-1]}"


def pack_cache(cache: Path, archive: Path) -> None:
    """The cache folder ``cache`` as ``archive`` (xz), its folder named ``kernel-cache``."""
    with tarfile.open(archive.with_suffix(".tmp"), "w:xz", preset=9) as tar:
        tar.add(cache, arcname="kernel-cache")
    archive.with_suffix(".tmp").replace(archive)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.gpu_run.pack", description=__doc__)
    parser.add_argument("whl", type=Path, help="the folder the device call carries (.whl/)")
    args = parser.parse_args(argv)
    if not args.whl.is_dir():
        print(f"python -m jobs.gpu_run.pack: {args.whl} is not a directory", file=sys.stderr)
        return 2
    try:
        print(kernel_cache(args.whl))
        found = estimates()
        atomic_write(args.whl / ESTIMATES, json.dumps(found, indent=1) + "\n")
        peaks = ", ".join(f"{e}: {v['timed_peak_gib']:.2f} GiB at {v['cluster']}" for e, v in found.items())
        print(f"estimated: {peaks}")
        record = provenance()
        atomic_write(args.whl / PROVENANCE, json.dumps(record, indent=1) + "\n")
        state = "differs from it" if record["differs"] else "is the commit's"
        print(f"provenance: commit {record['commit'][:12]}, the tree {state}, {record['files']} files")
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        print(f"python -m jobs.gpu_run.pack: {e}", file=sys.stderr)
        return 1
    return 0


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


if __name__ == "__main__":
    sys.exit(main())
