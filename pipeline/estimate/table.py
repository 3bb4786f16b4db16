"""The published estimate columns, computed once per (code, execution, preset) and kept.

Publishing a dataset needs the estimate of each of its executions on its cluster preset; running them
takes seconds each, so results are kept in the cache folder (:func:`pipeline.estimate.fake_cuda.
cache_dir`) under a fingerprint of everything they depend on: the sources of the code path (layers,
kernels' dispatch, execution, matrix, estimate), the scale and cluster presets, and torch's version.
Changing any of them computes afresh; aggregating the same dataset again reads the table. Nothing here
imports torch: only the workers do, when something is missing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from pipeline import REPO_ROOT
from pipeline.estimate.fake_cuda import cache_dir
from pipeline.estimate.jobs import Job
from pipeline.estimate.presets import DEFAULT_PRESET, Preset

GPU_PRESETS = ("gb300", "h200")
COLUMNS = ("estimatedPeakGiB", "opsPerIteration")
# What an estimate depends on: the code it runs and the presets it reads.
SOURCES = ("cutlass_kernels", "pipeline/moe", "pipeline/bench", "pipeline/matrix", "pipeline/estimate")
PRESETS = ("conf/scale/full.yaml", "conf/cluster")


def preset_of(cluster: str | None) -> str:
    """The preset a dataset's estimates use: its own cluster when that is a GPU preset, else the
    report's hardware (datasets of the local launcher or of local-slurm's CPU nodes)."""
    return cluster if cluster in GPU_PRESETS else DEFAULT_PRESET


def columns(estimate: dict[str, Any] | None) -> dict[str, Any]:
    """The published columns of one estimate (None where it failed or is missing): the timed steps'
    peak, as ``peakAllocatedGiB`` measures it, and the device ops per timed iteration."""
    if estimate is None or "error" in estimate:
        return dict.fromkeys(COLUMNS)
    return {"estimatedPeakGiB": estimate["timed_peak_gib"], "opsPerIteration": estimate["device_ops"]}


def estimates(keys: Iterable[tuple[str, str]], workers: int | None = None) -> dict[tuple[str, str], dict]:
    """The estimate of every (execution id, preset name) in ``keys``, from the kept table, computing
    (and keeping) the missing ones."""
    wanted = sorted(set(keys))
    table = _read(_path())
    missing = [k for k in wanted if "|".join(k) not in table]
    if missing:
        from pipeline.estimate.pool import run_jobs  # spawns workers; only when something is missing

        presets = {name: Preset.named(name) for _, name in missing}
        jobs = [Job(e, presets[p]) for e, p in missing]
        results = run_jobs(jobs, workers)
        keep(jobs, results)
        table |= {f"{e}|{p}": r for (e, p), r in zip(missing, results, strict=True)}
    return {k: table["|".join(k)] for k in wanted}


def keep(jobs: list[Job], results: list[dict[str, Any]]) -> None:
    """Keep the results of the jobs that are what a dataset publishes (the default seed and full
    scale, the GPU's own SwiGLU form) and succeeded."""
    published = {
        f"{job.execution}|{job.preset.name}": result
        for job, result in zip(jobs, results, strict=True)
        if job == Job(job.execution, job.preset) and "error" not in result
    }
    if published:
        _merge(_path(), published)


def _path() -> Path:
    return cache_dir() / f"estimates-{fingerprint()}.json"


@cache
def fingerprint() -> str:
    """A digest of the sources and presets an estimate depends on, and of torch's version."""
    digest = hashlib.sha256()
    files = [p for name in (*SOURCES, *PRESETS) for p in sorted(_files(REPO_ROOT / name))]
    for path in files:
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    digest.update(_torch_version().encode())
    return digest.hexdigest()[:16]


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return [p for p in path.rglob("*") if p.suffix in (".py", ".cpp", ".yaml")]


def _torch_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("torch")


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _merge(path: Path, entries: dict[str, Any]) -> None:
    """Add ``entries`` to the kept table (locked, then an atomic replace: concurrent publishers keep
    each other's entries and a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = _read(path) | entries
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as tmp:
            json.dump(table, tmp, sort_keys=True)
        os.replace(tmp.name, path)
