"""The reduced-order model of one MoE layer: capacity, drops, padding, sparsity and EP all-to-all.

Semantics (each output follows one stated rule):
- Expert load normalized to its mean is Normal(1, load_imbalance); capacity = capacity_factor x
  mean load. Dropped fraction = expected overflow / mean load; padding waste = expected empty slots /
  capacity; slot utilization = 1 - waste.
- Experts are two-matrix FFNs (d_model x d_ff and back, no gate): 2*d_model*d_ff parameters each;
  billions of parameters, decimal GB of weights at elem_bytes per element. One token-slot costs
  2 FLOPs per parameter.
- moe_tflop runs every capacity slot (padding included); the dense equivalent runs every token
  through every expert.
- The all-to-all moves the capacity buffers out and back; only the remote (EP-1)/EP share crosses the
  network. all2all_gb is the total over GPUs; its time is one GPU's share at network_bw_gb_s.
- Compute time is one GPU's share of moe_tflop at compute_tops; step time = compute + all-to-all (no
  overlap). Achieved TFLOP/s per GPU counts useful work only (no padding, no dropped tokens); MFU =
  achieved / compute_tops; the bottleneck is the larger of the two time terms, named as published
  (``expert compute`` or ``all-to-all``).
- sparsity_percent is the published active share of the experts, top_k / num_experts.

The published document's forms: ``format`` describes the run (``T=32768 E64 top-2 d4096 ff14336 bf16
EP8``); profile curves are ``[capacity_factor, percent]`` pairs, expert loads run from the most to the
least loaded expert (quantiles by the approximation the published run used,
:func:`~pipeline.tools.model.normal_load.hastings_quantile`), and the profile repeats the summary a plot of
it needs; the verdict is a class (``<load>-<efficiency>``, e.g. ``balanced-efficient``) followed by
its explanation. Numbers are printed at the published precision where it is known (``PRINTED``):
whole dropped tokens (2228), percentages to two decimals (sparsity 3.12), loads to four (1.6726);
the others unrounded. :func:`evaluate` gives the unrounded values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from pipeline.base.checks import experts_layout, integer, real
from pipeline.tools.model.normal_load import (
    expected_empty,
    expected_overflow,
    hastings_quantile,
    quantile_midpoints,
)

CURVE_POINTS = 48
CURVE_CAPACITY_RANGE = (0.5, 4.0)
LOAD_QUANTILES = 40
BOTTLENECK_COMPUTE = "expert compute"
BOTTLENECK_ALL2ALL = "all-to-all"
# Verdict thresholds: what a reader should act on. The class names the load (balanced while at most
# BALANCED_DROP_PERCENT of routed tokens drop) and the efficiency (efficient from EFFICIENT_MFU_PERCENT
# MFU; below it the class says what bounds the step).
DROP_WARN_PERCENT = 1.0
WASTE_WARN_PERCENT = 20.0
COMM_WARN_PERCENT = 50.0
BALANCED_DROP_PERCENT = 5.0
EFFICIENT_MFU_PERCENT = 50.0
# The element type named in ``format`` by its bytes (the published run: 2.0, "bf16").
ELEMENT_NAMES = {4.0: "fp32", 2.0: "bf16", 1.0: "fp8", 0.5: "fp4"}
# Decimals of the published document's numbers where its precision is known; others stay unrounded.
PRINTED = {
    "dropped_tokens": 0,
    "drop_percent": 2,
    "padding_waste_percent": 2,
    "slot_utilization_percent": 2,
    "sparsity_percent": 2,
    "comm_fraction_percent": 2,
    "mfu_percent": 2,
}
LOAD_DECIMALS = 4
DOCUMENT_KEYS = ("inputs", "outputs", "profile", "model")
# What the model is, in one line: the document's ``model`` key.
MODEL = (
    "reduced-order model of one MoE layer: top-k routing into capacity buffers under a Normal(1, "
    "load_imbalance) expert load (tokens over capacity dropped, empty slots padded), two-matrix expert "
    "FFNs computed on every slot at compute_tops against a dense FFN of the same weights, and the "
    "expert-parallel all-to-all of the buffers' remote share at network_bw_gb_s, added with no overlap"
)
# The summary the published profile carries beside its curves, in its order (capacity_norm: the
# capacity on the loads' scale, in units of the mean load).
PROFILE_SUMMARY = (
    "capacity_norm",
    "num_experts",
    "top_k",
    "sparsity_percent",
    "compute_savings_x",
    "drop_percent",
    "padding_waste_percent",
    "comm_fraction_percent",
    "capacity_factor",
)


@dataclass(frozen=True)
class ModelInputs:
    """The published model's inputs, validated; build with ``from_mapping``."""

    batch_size: int
    seq_length: int
    num_experts: int
    top_k: int
    d_model: int
    d_ff: int
    capacity_factor: float
    load_imbalance: float
    expert_parallel: int
    elem_bytes: float
    network_bw_gb_s: float
    compute_tops: float

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> ModelInputs:
        """Validate a complete mapping of inputs; unknown, missing or bad values raise ValueError."""
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise ValueError(f"unknown input(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
        missing = [name for name in allowed if name not in values]
        if missing:
            raise ValueError(f"missing input(s): {', '.join(missing)}")
        checked: dict[str, int | float] = {}
        for f in fields(cls):
            value = values[f.name]
            if f.type == "int":
                checked[f.name] = integer(f.name, value, low=1)
            else:
                positive = f.name != "load_imbalance"  # a zero spread is a valid (balanced) load
                checked[f.name] = real(f.name, value, low=0.0, strict=positive)
        experts_layout(
            int(checked["num_experts"]),
            int(checked["top_k"]),
            int(checked["expert_parallel"]),
            names=("num_experts", "top_k", "expert_parallel"),
        )
        return cls(**checked)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, int | float]:
        """The inputs as echoed in the answer, in the published order."""
        return asdict(self)


def describe(m: ModelInputs) -> str:
    """The run in one line, as the published ``format``: ``T=32768 E64 top-2 d4096 ff14336 bf16 EP8``."""
    element = ELEMENT_NAMES.get(m.elem_bytes, f"{m.elem_bytes:g}B")
    return (
        f"T={m.batch_size * m.seq_length} E{m.num_experts} top-{m.top_k} d{m.d_model} ff{m.d_ff} "
        f"{element} EP{m.expert_parallel}"
    )


def verdict_class(bottleneck: str, mfu: float, drop: float) -> str:
    """``<load>-<efficiency>``: balanced | imbalanced, then efficient | compute-bound | comm-bound."""
    load = "balanced" if drop <= BALANCED_DROP_PERCENT else "imbalanced"
    if mfu >= EFFICIENT_MFU_PERCENT:
        efficiency = "efficient"
    else:
        efficiency = "compute-bound" if bottleneck == BOTTLENECK_COMPUTE else "comm-bound"
    return f"{load}-{efficiency}"


def _verdict(bottleneck: str, mfu: float, drop: float, waste: float, comm: float) -> str:
    """The class, then one line: what bounds the step, how well it uses the GPU, and what to change."""
    notes = [f"{bottleneck}-bound at {mfu:.1f}% MFU"]
    if drop > DROP_WARN_PERCENT:
        notes.append(f"drops {drop:.2f}% of routed tokens (raise capacity_factor or reduce load_imbalance)")
    if waste > WASTE_WARN_PERCENT:
        notes.append(f"{waste:.1f}% of expert compute is padding (lower capacity_factor)")
    if comm > COMM_WARN_PERCENT:
        notes.append(f"all-to-all is {comm:.1f}% of the step (more network bandwidth or a lower EP)")
    if len(notes) == 1:
        notes.append("capacity fits the load")
    return f"{verdict_class(bottleneck, mfu, drop)}: " + "; ".join(notes)


def evaluate(m: ModelInputs) -> dict[str, object]:
    """The published outputs in the published order, unrounded."""
    tokens = m.batch_size * m.seq_length
    routed = tokens * m.top_k
    mean_load = routed / m.num_experts
    capacity = m.capacity_factor * mean_load
    drop = expected_overflow(m.capacity_factor, m.load_imbalance)
    waste = expected_empty(m.capacity_factor, m.load_imbalance) / m.capacity_factor
    expert_params = 2 * m.d_model * m.d_ff
    flop_per_slot = 2 * expert_params
    moe_tflop = m.num_experts * capacity * flop_per_slot / 1e12
    dense_tflop = tokens * m.num_experts * flop_per_slot / 1e12
    remote = (m.expert_parallel - 1) / m.expert_parallel
    all2all_gb = 2 * m.num_experts * capacity * m.d_model * m.elem_bytes * remote / 1e9
    compute_ms = 1e3 * moe_tflop / m.expert_parallel / m.compute_tops
    all2all_ms = 1e3 * all2all_gb / m.expert_parallel / m.network_bw_gb_s
    step_ms = compute_ms + all2all_ms
    useful_tflop = routed * (1.0 - drop) * flop_per_slot / 1e12
    achieved = useful_tflop / m.expert_parallel / (step_ms / 1e3)
    comm_percent = 100.0 * all2all_ms / step_ms
    bottleneck = BOTTLENECK_COMPUTE if compute_ms >= all2all_ms else BOTTLENECK_ALL2ALL
    mfu = 100.0 * achieved / m.compute_tops
    return {
        "format": describe(m),
        "tokens": tokens,
        "routed_assignments": routed,
        "mean_load_per_expert": mean_load,
        "capacity_per_expert": capacity,
        "dropped_tokens": drop * routed,
        "drop_percent": 100.0 * drop,
        "padding_waste_percent": 100.0 * waste,
        "slot_utilization_percent": 100.0 * (1.0 - waste),
        "total_expert_params_b": m.num_experts * expert_params / 1e9,
        "active_params_b": m.top_k * expert_params / 1e9,
        "sparsity_percent": 100.0 * m.top_k / m.num_experts,
        "expert_weights_gb": m.num_experts * expert_params * m.elem_bytes / 1e9,
        "moe_tflop": moe_tflop,
        "dense_equiv_tflop": dense_tflop,
        "compute_savings_x": tokens / capacity,  # dense / MoE work: the FLOPs per slot cancel
        "all2all_gb": all2all_gb,
        "compute_time_ms": compute_ms,
        "all2all_time_ms": all2all_ms,
        "step_time_ms": step_ms,
        "comm_fraction_percent": comm_percent,
        "bottleneck": bottleneck,
        "achieved_tflops": achieved,
        "mfu_percent": mfu,
        "verdict": _verdict(bottleneck, mfu, 100.0 * drop, 100.0 * waste, comm_percent),
    }


def capacity_grid() -> list[float]:
    """The profile's capacity factors: CURVE_POINTS evenly spaced over CURVE_CAPACITY_RANGE."""
    low, high = CURVE_CAPACITY_RANGE
    return [low + (high - low) * i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]


def printed(outputs: Mapping[str, object]) -> dict[str, object]:
    """The outputs at the published document's precision (``PRINTED``)."""
    return {k: _rounded(v, PRINTED[k]) if k in PRINTED else v for k, v in outputs.items()}


def _rounded(value: object, decimals: int) -> object:
    assert isinstance(value, float)
    return round(value) if decimals == 0 else round(value, decimals)


def profile(m: ModelInputs, outputs: Mapping[str, object]) -> dict[str, object]:
    """Drop and padding waste (percent) against capacity factor as ``[x, y]`` pairs, the load
    distribution's quantile midpoints (most loaded expert first), and the summary beside them, taken
    from ``outputs`` (printed) and the inputs."""
    sigma = m.load_imbalance
    grid = capacity_grid()
    loads = quantile_midpoints(sigma, LOAD_QUANTILES, hastings_quantile)
    given = {
        "capacity_norm": m.capacity_factor,  # capacity / mean load
        "num_experts": m.num_experts,
        "top_k": m.top_k,
        "capacity_factor": m.capacity_factor,
    }
    return {
        "drop_vs_capacity": [[c, 100.0 * expected_overflow(c, sigma)] for c in grid],
        "waste_vs_capacity": [[c, 100.0 * expected_empty(c, sigma) / c] for c in grid],
        "expert_loads": sorted((round(x, LOAD_DECIMALS) for x in loads), reverse=True),
    } | {k: given[k] if k in given else outputs[k] for k in PROFILE_SUMMARY}


def document_inputs(values: Mapping[str, object]) -> Mapping[str, object]:
    """The inputs of ``values``: the inputs object itself, or a whole published document
    (``{"inputs": ..., "outputs": ..., "profile": ...}``) whose ``inputs`` it takes (the rest is what
    the model recomputes)."""
    if "inputs" not in values:
        return values
    stray = sorted(set(values) - set(DOCUMENT_KEYS))
    if stray:
        raise ValueError(
            f"a published document holds only {', '.join(DOCUMENT_KEYS)}; got also {', '.join(stray)}"
        )
    inputs = values["inputs"]
    if not isinstance(inputs, Mapping):
        raise ValueError(f"a published document's inputs must be an object, got {type(inputs).__name__}")
    return inputs


def run(values: Mapping[str, object]) -> dict[str, object]:
    """The model's whole answer in the published document's form: ``{"inputs", "outputs", "profile",
    "model"}`` (``model``: the line that says what the model is). ``values`` is the inputs object or
    a published document."""
    m = ModelInputs.from_mapping(document_inputs(values))
    outputs = printed(evaluate(m))
    return {"inputs": m.as_dict(), "outputs": outputs, "profile": profile(m, outputs), "model": MODEL}
