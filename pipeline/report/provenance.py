"""What ran: the settings and provenance that the shards of a dataset record, with how many
executions recorded each value.

The settings come first: the dataset's comparable ones (:mod:`pipeline.data.comparable`, named as the
command line sets them), read from each shard's composed config, the scale's timing request among
them, not the iterations per window each execution calibrated to (they vary from run to run by
design). ``SETTINGS`` are those two datasets must share for their times to be comparable (the
comparison lists any that differ): the comparable ones, the device, the git sha, the DSL's version;
the rest describe the run. A value known to be absent reads ``none`` (CUDA, NCCL and the driver on a CPU
run, a DSL that is not installed); one that could have been recorded and was not reads ``unknown``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from pipeline.cost.products import mxfp8_products
from pipeline.data.comparable import KEYS, Comparable, text
from pipeline.data.reader import Shard
from pipeline.report.communication import of_shard

UNKNOWN = "unknown"
ABSENT = "none"  # known not to exist (no CUDA on a CPU run), as against not recorded
SETTINGS = (*KEYS, "device", "git_sha", "cutlass_dsl")


def _on_gpu(shard: Shard, value: Any) -> Any:
    """A GPU component's recorded value; ``none`` on a CPU run, where it does not exist."""
    return ABSENT if value is None and shard.identity.device == "cpu" else value


def _gemm(shard: Shard) -> str | None:
    return None if shard.meta.kernels is None else shard.meta.kernels.gemm


FIELDS: dict[str, Callable[[Shard], Any]] = {
    "device": lambda shard: shard.identity.device,
    "git_sha": lambda shard: shard.meta.provenance.git_sha,
    "cutlass_dsl": lambda shard: _on_gpu(shard, shard.meta.provenance.versions.cutlass_dsl),
    "torch": lambda shard: shard.meta.provenance.versions.torch,
    "cuda": lambda shard: _on_gpu(shard, shard.meta.provenance.versions.cuda),
    "nccl": lambda shard: _on_gpu(shard, shard.meta.provenance.versions.nccl),
    "driver": lambda shard: _on_gpu(shard, shard.meta.provenance.versions.driver),
    "python": lambda shard: shard.meta.provenance.versions.python,
    "backend": lambda shard: shard.meta.provenance.backend,
    "collective": lambda shard: shard.meta.provenance.collective,
    "communication": of_shard,
    "gemm": _gemm,
    "mxfp8_products": lambda shard: (
        ABSENT
        if shard.identity.precision == "bf16"
        else mxfp8_products(shard.identity.precision, _gemm(shard))
    ),
    "hosts": lambda shard: shard.meta.provenance.hosts,
    "cuda_graphs": lambda shard: shard.meta.timing.cuda_graphs,
}  # after the comparable settings (``KEYS``), which come from the composed config


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
    """Per comparable setting (``KEYS``), then per field of ``FIELDS``: each distinct recorded value
    (as text; a recorded null reads ``null``) -> how many shards hold it."""
    tally: dict[str, Counter[str]] = {name: Counter() for name in (*KEYS, *FIELDS)}
    for shard in shards:
        values = Comparable.of_config(shard.meta.config).values
        for key in KEYS:
            tally[key][value_text(text(values[key]) if key in values else None)] += 1
        for name, get in FIELDS.items():
            tally[name][value_text(get(shard))] += 1
    return {name: dict(sorted(counts.items())) for name, counts in tally.items()}


def mixed(shards: Iterable[Shard]) -> dict[str, dict[str, int]]:
    """The comparable settings that differ between ``shards`` (a dataset from before intents fixed
    them): key -> each value -> how many shards hold it."""
    described = describe(shards)
    return {key: described[key] for key in KEYS if len(described[key]) > 1}


def mixed_text(settings: dict[str, dict[str, int]]) -> str:
    """``scale: ci (1), full (14); seed: 0 (14), 1 (1)``."""
    return "; ".join(f"{k}: {', '.join(f'{v} ({n})' for v, n in c.items())}" for k, c in settings.items())


def conditions_line(shards: Iterable[Shard]) -> str:
    """The conditions in one line: device, ranks and what crossed between them, scale and dtype, the
    grouped GEMM and how MXFP8 products ran (each distinct value, with its executions where several)."""
    shards = list(shards)

    def values(get: Callable[[Shard], Any]) -> str:
        counts = Counter(value_text(get(s)) for s in shards)
        if len(counts) == 1:
            return next(iter(counts))
        return ", ".join(f"{v} ({n})" for v, n in sorted(counts.items()))

    scale = values(lambda s: (s.meta.config.get("scale") or {}).get("name"))
    mxfp8 = [s for s in shards if s.identity.precision == "mxfp8"]
    products = (
        "none ran"
        if not mxfp8
        else ", ".join(
            f"{v} ({n})" if len(c) > 1 else v
            for c in [Counter(value_text(FIELDS["mxfp8_products"](s)) for s in mxfp8)]
            for v, n in sorted(c.items())
        )
    )
    graphs = values(lambda s: "yes" if s.meta.timing.cuda_graphs else "no")
    return (
        f"Conditions: device {values(FIELDS['device'])}; communication {values(of_shard)}; scale={scale} "
        f"with {values(lambda s: s.meta.shape.dtype)} layers; grouped GEMM {values(_gemm)}; MXFP8 "
        f"products {products}; CUDA graphs {graphs}; {len(shards)} executions."
    )


def time_span(shards: Iterable[Shard]) -> tuple[str, str] | None:
    """Earliest ``started_at`` and latest ``ended_at`` (ISO-8601 strings), or ``None`` if unrecorded."""
    started, ended = [], []
    for shard in shards:
        started.append(shard.meta.started_at)
        ended.append(shard.meta.ended_at)
    return (min(started), max(ended)) if started and ended else None
