"""What ran: the settings and provenance that the shards of a dataset record, with how many
executions recorded each value.

``SETTINGS`` are the ones two datasets must share for their times to be comparable (the comparison
lists any that differ): the scale's timing request among them, not the iterations per window each
execution calibrated to (they vary from run to run by design); the rest describe the run. A value a
shard does not record reads ``unknown``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from pipeline.data.reader import Shard

UNKNOWN = "unknown"
SETTINGS = ("scale", "device", "iterations", "min_window_ms", "min_timed_ms", "git_sha", "cutlass_dsl")


def _scale(key: str) -> Callable[[Shard], Any]:
    """A key of the scale the shard's config composed: the scale's request, not what calibration made
    of it."""
    return lambda shard: (shard.meta.config.get("scale") or {}).get(key)


FIELDS: dict[str, Callable[[Shard], Any]] = {
    "scale": _scale("name"),
    "device": lambda shard: shard.identity.device,
    # the timing the scale asked for (iterations per window at least, windows at least this long, the
    # windows of a phase at least this long together); the iterations and windows each execution then
    # ran are measurements of its own (``iterationsPerWindow``, ``windows``)
    "iterations": _scale("iterations"),
    "min_window_ms": _scale("min_window_ms"),
    "min_timed_ms": _scale("min_timed_ms"),
    "git_sha": lambda shard: shard.meta.provenance.git_sha,
    "cutlass_dsl": lambda shard: shard.meta.provenance.versions.cutlass_dsl,
    "torch": lambda shard: shard.meta.provenance.versions.torch,
    "cuda": lambda shard: shard.meta.provenance.versions.cuda,
    "nccl": lambda shard: shard.meta.provenance.versions.nccl,
    "python": lambda shard: shard.meta.provenance.versions.python,
    "backend": lambda shard: shard.meta.provenance.backend,
    "collective": lambda shard: shard.meta.provenance.collective,
    "gemm": lambda shard: shard.meta.kernels.gemm,
    "hosts": lambda shard: shard.meta.provenance.hosts,
    "cuda_graphs": lambda shard: shard.meta.timing.cuda_graphs,
}


def value_text(value: Any) -> str:
    """One recorded value as published text: lists joined by spaces, absent values ``unknown``."""
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return " ".join(value_text(v) for v in value) or UNKNOWN
    return str(value)


def describe(shards: Iterable[Shard]) -> dict[str, dict[str, int]]:
    """Per field of ``FIELDS``: each distinct recorded value (as text) -> how many shards hold it."""
    tally: dict[str, Counter[str]] = {name: Counter() for name in FIELDS}
    for shard in shards:
        for name, get in FIELDS.items():
            tally[name][value_text(get(shard))] += 1
    return {name: dict(sorted(counts.items())) for name, counts in tally.items()}


def time_span(shards: Iterable[Shard]) -> tuple[str, str] | None:
    """Earliest ``started_at`` and latest ``ended_at`` (ISO-8601 strings), or ``None`` if unrecorded."""
    started, ended = [], []
    for shard in shards:
        started.append(shard.meta.started_at)
        ended.append(shard.meta.ended_at)
    return (min(started), max(ended)) if started and ended else None
