"""Scales: how a workload of the matrix becomes the concrete shape one execution runs.

``scale=full`` is the report's shape. Smaller scales shrink T, D and F (``tokens``, ``d_model``,
``d_ff_divisor``) but keep E and K, so every rank still holds E/ep local experts and the per-rank
grouped GEMMs keep the full-scale structure in miniature. ``max_ranks`` caps the ranks launched:
``ranks = min(ep, max_ranks)`` and the layer then has (E/ep) * ranks experts.

Tokens per rank with fewer ranks than the EP degree. At full scale (W = ep ranks of T tokens) the
tracked GPU (rank 0) receives f*T*K routed rows and every other rank (ep - f)/(ep - 1) * T*K. With
W < ep launched ranks we keep those per-rank loads and feed every rank

    T' = ceil(T * (f + (W - 1) * (ep - f) / (ep - 1)) / W)

tokens, the fewest whose W*T'*K rows cover them; T' = T when W = ep. Packing computes it per layer
(``layer_tokens``: T'_l from f_l), so in every layer rank 0 receives exactly ``round(f_l*T*K)`` rows
(``tracked_rows``) and each other rank its full-scale share, up to the rounding of T'_l. With one rank
(the single-GPU mode) every row is rank 0's: T'_l = round(f_l*T), and rank 0 receives T'_l*K rows.

The layers size their activation budgets for the nominal T (``MoEConfig.budget_tokens``) whatever
T'_l a forward carries, so the default factors (MoK 2.5, Dist-MoE 2.5 and scratch 8, in units of
T x K) keep their full-scale row counts, and the saved-state factors they report are in the same units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from pipeline.matrix import Workload, execution_of
from pipeline.vocabulary import DTYPES, MX_BLOCK


@dataclass(frozen=True)
class Scale:
    """One ``conf/scale`` preset (plus the top-level ``max_ranks``)."""

    name: str
    tokens: int
    d_model: int
    d_ff_divisor: int
    num_experts: int
    top_k: int
    num_shared: int
    max_ranks: int | None
    dtype: str
    warmup: int
    windows: int
    iterations: int
    min_window_ms: float = 0.0  # iterations per window rise until a combined window lasts this long
    min_timed_ms: float = 0.0  # windows rise until the combined windows add up to this long


@dataclass(frozen=True)
class Shape:
    """The resolved shape of one execution; ``metadata()`` is the shard's ``shape`` object."""

    nominal_tokens: int  # T of the scale
    layer_tokens: tuple[int, ...]  # T'_l fed to every launched rank, per timed layer
    tracked_rows: tuple[int, ...]
    d_model: int
    d_ff: int
    num_experts: int
    layer_experts: int
    top_k: int
    num_shared: int
    ep: int
    ranks: int
    layer_loads: tuple[float, ...]
    dtype: str
    warmup: int
    windows: int  # per phase: the scale's, or more where ``min_timed_ms`` asked for them
    iterations: int  # per window: the scale's, or more where ``min_window_ms`` asked for them
    min_window_ms: float = 0.0
    min_timed_ms: float = 0.0

    def metadata(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def scale_from_config(scale: dict[str, Any], max_ranks: int | None) -> Scale:
    """Build a Scale from the ``scale`` config node, with the effective ``max_ranks``."""
    fields = set(Scale.__dataclass_fields__) - {"max_ranks"}
    optional = {"min_window_ms", "min_timed_ms"}
    unknown = sorted(set(scale) - fields - {"max_ranks"})
    missing = sorted(fields - optional - set(scale))
    if unknown or missing:
        raise ValueError(
            f"scale config: unknown keys {unknown}, missing keys {missing}; expected {sorted(fields)}"
        )
    return Scale(**{k: scale[k] for k in fields if k in scale}, max_ranks=max_ranks)


def shape_of(cfg: Mapping[str, Any]) -> Shape:
    """Resolved shape of a composed config (raises ValueError when the scale cannot hold it)."""
    return shape_for(execution_of(cfg).workload, scale_from_config(dict(cfg["scale"]), cfg["max_ranks"]))


def tokens_per_rank(tokens: int, load: float, ep: int, ranks: int) -> int:
    """T' of the module docstring (exact rational arithmetic: no off-by-one from float rounding)."""
    f = Fraction(str(load))
    if ranks == 1:
        return max(1, round(f * tokens))
    others = (ranks - 1) * (ep - f) / (ep - 1)
    return math.ceil(tokens * (f + others) / ranks)


def shape_for(workload: Workload, scale: Scale) -> Shape:
    """Resolve and check the shape; every problem is a ValueError naming the value and what is allowed."""
    if scale.dtype not in DTYPES:
        raise ValueError(f"scale {scale.name}: dtype {scale.dtype!r}; allowed: {', '.join(DTYPES)}")
    counts = ("tokens", "d_model", "d_ff_divisor", "num_experts", "top_k", "num_shared", "windows")
    lowest = {**dict.fromkeys((*counts, "iterations"), 1), "warmup": 0, "min_window_ms": 0, "min_timed_ms": 0}
    for key, bound in lowest.items():
        if not getattr(scale, key) >= bound:  # ``not >=``: a NaN is refused too
            raise ValueError(f"scale {scale.name}: {key} must be >= {bound}, got {getattr(scale, key)}")
    if scale.max_ranks is not None and scale.max_ranks < 1:
        raise ValueError(f"max_ranks must be >= 1 (or null for ep ranks), got {scale.max_ranks}")
    if workload.d_ff % scale.d_ff_divisor:
        raise ValueError(
            f"scale {scale.name}: d_ff_divisor {scale.d_ff_divisor} does not divide d_ff {workload.d_ff}"
        )
    d_ff = workload.d_ff // scale.d_ff_divisor
    for key, value in (("d_model", scale.d_model), ("d_ff", d_ff)):
        if value % MX_BLOCK:
            raise ValueError(
                f"scale {scale.name}: {key} {value} must be a multiple of {MX_BLOCK} (MXFP8 blocks)"
            )
    ep = workload.ep
    if scale.num_experts % ep:
        raise ValueError(
            f"scale {scale.name} cannot hold EP{ep}: num_experts {scale.num_experts} "
            f"is not a multiple of {ep}"
        )
    local = scale.num_experts // ep
    ranks = ep if scale.max_ranks is None else min(ep, scale.max_ranks)
    if local * ranks < scale.top_k:
        raise ValueError(
            f"scale {scale.name} cannot hold EP{ep} on {ranks} rank(s): {local * ranks} experts < top_k "
            f"{scale.top_k}; allowed: max_ranks >= {math.ceil(scale.top_k / local)} or more experts"
        )
    for f in workload.layer_loads:
        if not 0 < f <= ep:
            raise ValueError(f"load factor {f} of {workload.name} must lie in (0, {ep}]")
    layer_tokens: list[int] = []
    tracked_rows: list[int] = []
    for f in workload.layer_loads:
        t = tokens_per_rank(scale.tokens, f, ep, ranks)
        rows = t * scale.top_k if ranks == 1 else round(f * scale.tokens * scale.top_k)
        # Each token sends between K - (W-1)*min(K, local) and min(K, local) of its K rows to rank 0.
        most = ranks * t * min(scale.top_k, local)
        least = ranks * t * max(0, scale.top_k - (ranks - 1) * min(scale.top_k, local))
        if not least <= rows <= most:
            raise ValueError(
                f"scale {scale.name} cannot realize load {f} of {workload.name} on {ranks} rank(s): rank 0 "
                f"would need {rows} rows of {ranks * t * scale.top_k}; allowed: {least}..{most}"
            )
        layer_tokens.append(t)
        tracked_rows.append(rows)
    return Shape(
        nominal_tokens=scale.tokens,
        layer_tokens=tuple(layer_tokens),
        tracked_rows=tuple(tracked_rows),
        d_model=scale.d_model,
        d_ff=d_ff,
        num_experts=scale.num_experts,
        layer_experts=local * ranks,
        top_k=scale.top_k,
        num_shared=scale.num_shared,
        ep=ep,
        ranks=ranks,
        layer_loads=workload.layer_loads,
        dtype=scale.dtype,
        warmup=scale.warmup,
        windows=scale.windows,
        iterations=scale.iterations,
        min_window_ms=float(scale.min_window_ms),
        min_timed_ms=float(scale.min_timed_ms),
    )
