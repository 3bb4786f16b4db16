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

Suites. A scale's keys are written for the report's shape (:data:`pipeline.matrix.REFERENCE`), and a
workload of that shape runs them as written (a value they cannot hold exactly is refused). A suite's
workload of another shape is scaled by the same ratios (T x tokens / 2,048, D x d_model / 7,168, E x
num_experts / 384, K x top_k / 6, the shared experts x num_shared, F / d_ff_divisor), each rounded
to the nearest value it can take: tokens, K and the shared experts to an integer (at least 1, 1 and
0), E to a multiple of the EP degree, D and F to a multiple of the MXFP8 block (at least one block).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pipeline.base.bounds import check_bounds
from pipeline.base.vocabulary import DTYPES, MX_BLOCK
from pipeline.matrix import REFERENCE, Execution, Workload, execution_of

# Lower bounds of the timing keys (a scale's and a timing plan's alike).
TIMING_BOUNDS: dict[str, float] = {
    "warmup": 0,
    "windows": 1,
    "iterations": 1,
    "min_window_ms": 0,
    "min_timed_ms": 0,
}


@dataclass(frozen=True)
class TimingPlan:
    """How an execution is timed: ``warmup`` iterations, then ``windows`` windows per phase of
    ``iterations`` iterations each. A scale may ask for windows of at least ``min_window_ms`` and
    for at least ``min_timed_ms`` of windows per phase; :func:`pipeline.bench.timing.calibrated`
    turns the scale's plan into the one that ran (more iterations or windows, never fewer)."""

    warmup: int
    windows: int
    iterations: int
    min_window_ms: float = 0.0
    min_timed_ms: float = 0.0

    def __post_init__(self) -> None:
        check_bounds(self, TIMING_BOUNDS)


@dataclass(frozen=True)
class Scale:
    """One ``conf/scale`` preset (plus the top-level ``max_ranks``), field for field."""

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

    @property
    def timing(self) -> TimingPlan:
        """The timing the scale asks for."""
        return TimingPlan(
            self.warmup, self.windows, self.iterations, float(self.min_window_ms), float(self.min_timed_ms)
        )


@dataclass(frozen=True)
class Shape:
    """The resolved shape of one execution: what the layers hold and each rank is fed."""

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

    def __post_init__(self) -> None:
        counts = ("nominal_tokens", "d_model", "d_ff", "num_experts", "layer_experts", "top_k", "ep", "ranks")
        check_bounds(self, {**dict.fromkeys(counts, 1), "num_shared": 0})
        per_layer = (self.layer_tokens, self.tracked_rows, self.layer_loads)
        if not self.layer_loads or len({len(x) for x in per_layer}) != 1:
            raise ValueError(
                f"layer_tokens, tracked_rows and layer_loads must name the same layers (>= 1), got "
                f"{list(self.layer_tokens)}, {list(self.tracked_rows)}, {list(self.layer_loads)}"
            )
        if not (min(self.layer_tokens) >= 1 and min(self.tracked_rows) >= 0 and min(self.layer_loads) > 0):
            raise ValueError(
                "layer_tokens must be >= 1, tracked_rows >= 0 and layer_loads > 0, got "
                f"{list(self.layer_tokens)}, {list(self.tracked_rows)}, {list(self.layer_loads)}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}; allowed: {', '.join(DTYPES)}")


# Upper bounds of the scale's keys and why: a typo (a digit too many, a key mixed up with another)
# must be refused before it runs for days or exhausts memory. Sizes go to 8x the report's full scale.
LIMITS: dict[str, tuple[float, str]] = {
    "tokens": (16_384, "8x the report's T = 2,048 tokens per GPU"),
    "d_model": (57_344, "8x the report's D = 7,168"),
    "d_ff_divisor": (6_144, "the largest d_ff of the matrix"),
    "num_experts": (3_072, "8x the report's E = 384"),
    "top_k": (48, "8x the report's K = 6"),
    "num_shared": (8, "8x the report's one shared expert"),
    "warmup": (10_000, "untimed iterations before the windows; more only delay the timing"),
    "windows": (1_000, "windows per phase; the scales time 5 to 9, and each window lasts min_window_ms"),
    "iterations": (
        10_000,
        "per window; calibration adds iterations itself until a window lasts min_window_ms",
    ),
    "min_window_ms": (60_000, "one minute per window; windows that long already take hours per execution"),
    "min_timed_ms": (3_600_000, "one hour of windows per phase"),
}
_INTEGERS = (
    *("tokens", "d_model", "d_ff_divisor", "num_experts", "top_k", "num_shared"),
    *("warmup", "windows", "iterations"),
)
_NUMBERS = ("min_window_ms", "min_timed_ms")


def scale_from_config(scale: Mapping[str, Any], max_ranks: int | None) -> Scale:
    """Build a Scale from the ``scale`` config node, with the effective ``max_ranks``; a ValueError
    names a key that is unknown, missing, of the wrong type (``scale.iterations=2.5``) or beyond its
    limit (:data:`LIMITS`, with the reason)."""
    fields = set(Scale.__dataclass_fields__) - {"max_ranks"}
    optional = {"min_window_ms", "min_timed_ms"}
    unknown = sorted(set(scale) - fields - {"max_ranks"})
    missing = sorted(fields - optional - set(scale))
    if unknown or missing:
        raise ValueError(
            f"scale config: unknown keys {unknown}, missing keys {missing}; expected {sorted(fields)}"
        )
    for key in ("name", "dtype"):
        if not isinstance(scale[key], str):
            raise ValueError(f"scale.{key} must be a string, got {scale[key]!r}")
    for key in (*_INTEGERS, *_NUMBERS):
        if key in scale:
            check_number(f"scale.{key}", scale[key], integer=key in _INTEGERS, limit=LIMITS.get(key))
    if max_ranks is not None:
        check_number("max_ranks", max_ranks, integer=True)
    return Scale(**{k: scale[k] for k in fields if k in scale}, max_ranks=max_ranks)


def check_number(key: str, value: object, *, integer: bool, limit: tuple[float, str] | None = None) -> None:
    """``value`` of setting ``key`` is an integer (``integer``) or a finite number, and at most the
    limit; a ValueError names the key, the value and, past the limit, the limit and its reason."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{key} must be {kind}, got {value!r}")
    if integer and not isinstance(value, int):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number, got {value!r}")
    if limit is not None and value > limit[0]:
        raise ValueError(f"{key} must be <= {_count(limit[0])} ({limit[1]}), got {_count(value)}")


def _count(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,g}"


def resolve(cfg: Mapping[str, Any]) -> tuple[Execution, Shape, TimingPlan]:
    """The matrix cell, the shape and the scale's timing plan of a composed config (a ValueError
    names what the matrix or the scale cannot hold)."""
    execution = execution_of(cfg)
    scale = scale_from_config(cfg["scale"], cfg["max_ranks"])
    return execution, shape_for(execution.workload, scale), scale.timing


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
    counts = ("tokens", "d_model", "d_ff_divisor", "num_experts", "top_k")
    check_bounds(
        scale, {**dict.fromkeys(counts, 1), "num_shared": 0, **TIMING_BOUNDS}, f"scale {scale.name}: "
    )
    if scale.max_ranks is not None and scale.max_ranks < 1:
        raise ValueError(f"max_ranks must be >= 1 (or null for ep ranks), got {scale.max_ranks}")
    dims = _dimensions(workload, scale) if workload.shape != REFERENCE else _as_written(workload, scale)
    tokens, d_model, d_ff, num_experts, top_k, num_shared = dims
    ep = workload.ep
    if num_experts % ep:
        raise ValueError(
            f"scale {scale.name} cannot hold EP{ep}: num_experts {num_experts} is not a multiple of {ep}"
        )
    local = num_experts // ep
    ranks = ep if scale.max_ranks is None else min(ep, scale.max_ranks)
    if local * ranks < top_k:
        raise ValueError(
            f"scale {scale.name} cannot hold EP{ep} on {ranks} rank(s): {local * ranks} experts < top_k "
            f"{top_k}; allowed: max_ranks >= {math.ceil(top_k / local)} or more experts"
        )
    for f in workload.layer_loads:
        if not 0 < f <= ep:
            raise ValueError(f"load factor {f} of {workload.name} must lie in (0, {ep}]")
    layer_tokens: list[int] = []
    tracked_rows: list[int] = []
    for f in workload.layer_loads:
        t = tokens_per_rank(tokens, f, ep, ranks)
        rows = t * top_k if ranks == 1 else round(f * tokens * top_k)
        # Each token sends between K - (W-1)*min(K, local) and min(K, local) of its K rows to rank 0.
        most = ranks * t * min(top_k, local)
        least = ranks * t * max(0, top_k - (ranks - 1) * min(top_k, local))
        if not least <= rows <= most:
            raise ValueError(
                f"scale {scale.name} cannot realize load {f} of {workload.name} on {ranks} rank(s): rank 0 "
                f"would need {rows} rows of {ranks * t * top_k}; allowed: {least}..{most}"
            )
        layer_tokens.append(t)
        tracked_rows.append(rows)
    return Shape(
        nominal_tokens=tokens,
        layer_tokens=tuple(layer_tokens),
        tracked_rows=tuple(tracked_rows),
        d_model=d_model,
        d_ff=d_ff,
        num_experts=num_experts,
        layer_experts=local * ranks,
        top_k=top_k,
        num_shared=num_shared,
        ep=ep,
        ranks=ranks,
        layer_loads=workload.layer_loads,
        dtype=scale.dtype,
    )


Dimensions = tuple[int, int, int, int, int, int]  # tokens, d_model, d_ff, num_experts, top_k, num_shared


def _as_written(workload: Workload, scale: Scale) -> Dimensions:
    """A workload of the report's shape at ``scale`` as its keys say; what they cannot hold is refused."""
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
    return scale.tokens, scale.d_model, d_ff, scale.num_experts, scale.top_k, scale.num_shared


def _dimensions(workload: Workload, scale: Scale) -> Dimensions:
    """A workload of another shape at ``scale``: its dimensions by the scale's ratios to the report's
    shape, each rounded to the nearest value it can take (the module docstring)."""

    def ratio(key: str) -> Fraction:
        return Fraction(getattr(workload, key)) * getattr(scale, key) / REFERENCE[key]

    def blocks(value: Fraction) -> int:
        return MX_BLOCK * max(1, _nearest(value / MX_BLOCK))

    ep = workload.ep
    return (
        max(1, _nearest(ratio("tokens"))),
        blocks(ratio("d_model")),
        blocks(Fraction(workload.d_ff, scale.d_ff_divisor)),
        ep * max(1, _nearest(ratio("num_experts") / ep)),
        max(1, _nearest(ratio("top_k"))),
        _nearest(ratio("num_shared")),
    )


def _nearest(value: Fraction) -> int:
    """The integer nearest ``value``, halves up."""
    return math.floor(value + Fraction(1, 2))
