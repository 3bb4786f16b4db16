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


def _meta(*keys: str) -> Callable[[Shard], Any]:
    def get(shard: Shard) -> Any:
        value: Any = shard.meta
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return get


FIELDS: dict[str, Callable[[Shard], Any]] = {
    "scale": _meta("config", "scale", "name"),
    "device": lambda shard: shard.identity["device"],
    # the timing the scale asked for (iterations per window at least, windows at least this long, the
    # windows of a phase at least this long together); the iterations and windows each execution then
    # ran are measurements of its own (``iterationsPerWindow``, ``windows``)
    "iterations": _meta("config", "scale", "iterations"),
    "min_window_ms": _meta("config", "scale", "min_window_ms"),
    "min_timed_ms": _meta("config", "scale", "min_timed_ms"),
    "git_sha": _meta("provenance", "git_sha"),
    "cutlass_dsl": _meta("provenance", "versions", "cutlass_dsl"),
    "torch": _meta("provenance", "versions", "torch"),
    "cuda": _meta("provenance", "versions", "cuda"),
    "nccl": _meta("provenance", "versions", "nccl"),
    "python": _meta("provenance", "versions", "python"),
    "launcher": _meta("provenance", "launcher"),
    "hosts": _meta("provenance", "hosts"),
    "cuda_graphs": _meta("timing", "cuda_graphs"),
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
        if isinstance(shard.meta.get("started_at"), str):
            started.append(shard.meta["started_at"])
        if isinstance(shard.meta.get("ended_at"), str):
            ended.append(shard.meta["ended_at"])
    return (min(started), max(ended)) if started and ended else None
