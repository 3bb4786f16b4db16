"""The kept table of full-scale estimates: where it lives, its key, the published columns it gives.

``python -m pipeline.estimate`` writes it (:mod:`pipeline.tools.estimate.table`); the report reads it through
this module alone, so publishing a dataset never imports the estimate's machinery (torch, fake CUDA,
the C++ shim). The table is one JSON object in the cache folder, ``estimates-<fingerprint>.json``: key
``<execution id>|<preset>``, value the estimate's result (:func:`pipeline.tools.estimate.run.estimate`). The
fingerprint digests everything an estimate depends on (the sources of the code path, the scale and
cluster presets, torch's version), so a change to any of them starts a new table. Nothing here imports
torch.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from pipeline import REPO_ROOT
from pipeline.base.gpu_presets import DEFAULT_PRESET, gpu_presets
from pipeline.data.reader import Shard

COLUMNS = ("estimatedPeakGiB", "opsPerIteration")
# What an estimate depends on: the code it runs, the presets it reads and this table's own format.
SOURCES = (
    "cutlass_kernels",
    "pipeline/moe",
    "pipeline/bench",
    "pipeline/matrix",
    "pipeline/tools/estimate",
    "pipeline/base/gpu_presets.py",
    "pipeline/data/estimates.py",
)
PRESETS = ("conf/scale/full.yaml", "conf/cluster")


def cache_dir() -> Path:
    """The folder derived files of the estimate live in (never inside the checkout): ``MOE_BENCH_CACHE``,
    else ``$XDG_CACHE_HOME/moe-bench``, else ``~/.cache/moe-bench``."""
    if root := os.environ.get("MOE_BENCH_CACHE"):
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moe-bench"


def preset_of(cluster: str | None) -> str:
    """The preset a dataset's estimates use: its own cluster when that is a GPU preset, else the
    report's hardware (datasets of the local launcher or of local-slurm's CPU nodes)."""
    return cluster if cluster is not None and cluster in gpu_presets() else DEFAULT_PRESET


def keys_of(shards: Iterable[Shard]) -> dict[str, tuple[str, str]]:
    """Per execution id of ``shards``, the (execution id, preset) of the estimate its row publishes."""
    return {s.execution_id: (s.execution_id, preset_of(s.meta.provenance.cluster)) for s in shards}


def key(execution_id: str, preset: str) -> str:
    """The table's key of one estimate."""
    return f"{execution_id}|{preset}"


def path() -> Path:
    """The kept table of this code, these presets and this torch."""
    return cache_dir() / f"estimates-{fingerprint()}.json"


def read() -> dict[str, Any]:
    """The kept table (empty when there is none, or it cannot be parsed)."""
    try:
        table = json.loads(path().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return table if isinstance(table, dict) else {}


def kept(keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any] | None]:
    """The kept estimate of every (execution id, preset) in ``keys``; None where none is kept."""
    table = read()
    return {(e, p): table.get(key(e, p)) for e, p in keys}


def columns(estimate: dict[str, Any] | None) -> dict[str, Any]:
    """The published columns of one estimate (None where it failed or is missing): the timed steps'
    peak, as ``peakAllocatedGiB`` measures it, and the device ops per timed iteration."""
    if estimate is None or "error" in estimate:
        return dict.fromkeys(COLUMNS)
    return {"estimatedPeakGiB": estimate["timed_peak_gib"], "opsPerIteration": estimate["device_ops"]}


def merge(entries: dict[str, Any]) -> None:
    """Add ``entries`` (key -> result) to the kept table (locked, then an atomic replace: concurrent
    writers keep each other's entries and a reader never sees half a file)."""
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = read() | entries
        with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False) as tmp:
            json.dump(table, tmp, sort_keys=True)
        os.replace(tmp.name, target)


@cache
def fingerprint() -> str:
    """A digest of the sources and presets an estimate depends on, and of torch's version."""
    digest = hashlib.sha256()
    files = [p for name in (*SOURCES, *PRESETS) for p in sorted(_files(REPO_ROOT / name))]
    for file in files:
        digest.update(str(file.relative_to(REPO_ROOT)).encode() + b"\0" + file.read_bytes())
    digest.update(importlib.metadata.version("torch").encode())
    return digest.hexdigest()[:16]


def _files(folder: Path) -> list[Path]:
    if folder.is_file():
        return [folder]
    return [p for p in folder.rglob("*") if p.suffix in (".py", ".cpp", ".yaml")]
