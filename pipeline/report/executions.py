"""One published row per execution: identity, reduced times, rates, the model's prediction and what
ran (scale, shape run beside the nominal one, windows, clock, CUDA graphs, seed, code version).

Rates use the slowest-GPU combined iteration time (``iterationMS``) and the shape the execution ran
(``d_model``, ``d_ff`` of its scale; the matrix's nominal ``d_ff`` stays the identity column). The HBM
rate is the analytical logical byte model of the cluster-average GPU (the convention of useful
TFLOP/s) over that time, not measured traffic; the prediction is
empty when no hardware preset matches the recorded device (e.g. CPU runs), and so are the %SOL columns:
each rate over its peak in that preset (``conf/cluster/<name>.yaml``, read by
:mod:`pipeline.base.gpu_presets`).
The sanity columns are the execution's correctness gate (:mod:`pipeline.bench.sanity`): worst normwise
error, its tolerance and the verdict; empty for shards written before the gate existed. Every column of
what a shard's schema version did not record (the collective, kernels, contention and emulation copies
before version 3) is empty, never filled in. The estimate columns are read from the kept table
(:mod:`pipeline.data.estimates`), never computed here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict

from pipeline import cost
from pipeline.base.gpu_presets import GpuPreset, gpu_preset
from pipeline.base.metrics import SlowestRank, phases, tera_per_second, useful_tflops_per_gpu
from pipeline.base.vocabulary import DTYPE_BYTES, WORK_MULTIPLE
from pipeline.data import estimates as kept_table
from pipeline.data.reader import Shard
from pipeline.matrix.scale import Shape
from pipeline.report.publish import Row, optional_number

GIB = 2**30
# Measured metrics besides the iteration time.
METRICS = (
    "forwardMS",
    "backwardMS",
    "usefulTFLOPsPerGPU",
    "hbmModelTBs",
    "nvlinkTxGBs",
    "nvlinkRxGBs",
    "peakAllocatedGiB",
)
# Pairs publish these as Dist-MoE / MoK ratios. Not the HBM model rate: its ratio is the speedup times
# the ratio of two analytical byte counts, so it adds nothing a reader cannot form from those.
RATIO_METRICS = tuple(m for m in METRICS if m != "hbmModelTBs")
# Each rate as a percentage of its peak in the device's preset (speed of light): useful TFLOP/s over the
# dense tensor peak of the precision, the HBM model's TB/s over the HBM peak, NVLink GB/s over the
# per-direction link peak.
SOL_COLUMNS = ("usefulSOLPct", "hbmModelSOLPct", "nvlinkTxSOLPct", "nvlinkRxSOLPct")
# What ran, beside the nominal identity columns (docs/dataset.md defines each with its unit).
RUN_COLUMNS = (
    "windowMinMS",
    "windowMaxMS",
    "scale",
    "tokens",
    "tokens_run",
    "d_model",
    "d_ff_run",
    "experts",
    "experts_run",
    "top_k",
    "shared_experts",
    "imbalance",
    "windows",
    "iterationsPerWindow",
    "workMultiple",
    "dtype",
    "collective",
    "gemm",
    "clock",
    "cudaGraphs",
    "cudaGraphsReason",
    "cpuWaitShare",
    "oversubscribed",
    "emulationCopiesGiB",
    "seed",
    "git_sha",
)
# The execution's GPU path at full scale on fake tensors (pipeline.estimate), on the dataset's preset.
ESTIMATE_COLUMNS = kept_table.COLUMNS
COLUMNS = (
    "execution_id",
    "workload_id",
    "kind",
    "ep",
    "ranks",
    "d_ff",
    "profile",
    "precision",
    "implementation",
    "pipeline",
    "iterationMS",
    *METRICS,
    "hbmModelBytes",
    "device",
    "attempt",
    "job_id",
    "predictedMS",
    "measuredOverPredicted",
    *SOL_COLUMNS,
    "sanityMaxError",
    "sanityTolerance",
    "sanityPassed",
    *RUN_COLUMNS,
    *ESTIMATE_COLUMNS,
)


def execution_row(shard: Shard, reduced: dict[str, SlowestRank] | None = None) -> Row:
    """The published row of one shard (``None`` where a value does not exist, e.g. no NVLink on CPU);
    ``reduced``: its ``metrics.phases``, where the caller needs them too."""
    ident, meta = shard.identity, shard.meta
    if reduced is None:
        reduced = phases(shard.phase, shard.rank, shard.window_ms, shard.iterations)
    ms = reduced["combined"].ms
    tokens = meta.shape.nominal_tokens
    layer = layer_shape(ident.kind, ident.precision, meta.shape)
    hardware = cost.hardware_for_device(ident.device)
    predicted = None
    dispatch = "mxfp8" if ident.pipeline == "fp8-dispatch" else "bf16"
    if hardware is not None:
        predicted = cost.predicted_ms(layer, hardware, dispatch=dispatch)
    flops = (ident.kind, tokens, meta.shape.d_model, meta.shape.d_ff, meta.shape.top_k)
    hbm_bytes = cost.iteration_bytes(layer, dispatch)
    rates: Row = {
        "usefulTFLOPsPerGPU": useful_tflops_per_gpu(*flops, ms, meta.shape.num_shared),
        "hbmModelTBs": tera_per_second(hbm_bytes, ms),
        "nvlinkTxGBs": _scaled(meta.nvlink.tx_bytes_per_s, 1e9),
        "nvlinkRxGBs": _scaled(meta.nvlink.rx_bytes_per_s, 1e9),
    }
    return {
        **{k: v for k, v in asdict(ident).items() if k in COLUMNS},
        "iterationMS": ms,
        "forwardMS": reduced["forward"].ms if "forward" in reduced else None,
        "backwardMS": reduced["backward"].ms if "backward" in reduced else None,
        **rates,
        "peakAllocatedGiB": _scaled(meta.memory.peak_allocated_bytes, GIB),
        "hbmModelBytes": hbm_bytes,
        "predictedMS": predicted,
        "measuredOverPredicted": None if predicted is None else ms / predicted,
        **sol_columns(rates, ident.precision, None if hardware is None else gpu_preset(hardware)),
        "sanityMaxError": None if meta.sanity is None else meta.sanity.max_error,
        "sanityTolerance": None if meta.sanity is None else meta.sanity.tolerance,
        "sanityPassed": None if meta.sanity is None else meta.sanity.passed,
        **what_ran(shard, reduced["combined"]),
    }


def sol_columns(rates: Row, precision: str, gpu: GpuPreset | None) -> Row:
    """The %SOL columns of a row's rates on ``gpu`` (the device's preset; None: no preset, all empty):
    each rate as a percentage of its peak. MXFP8 work is held to the FP8 peak, whatever products the
    kernel formed."""
    if gpu is None:
        return dict.fromkeys(SOL_COLUMNS)
    peaks = {
        "usefulSOLPct": ("usefulTFLOPsPerGPU", gpu.tensor_tflops(precision)),
        "hbmModelSOLPct": ("hbmModelTBs", gpu.peak("hbm_tb_s")),
        "nvlinkTxSOLPct": ("nvlinkTxGBs", gpu.peak("nvlink_gb_s")),
        "nvlinkRxSOLPct": ("nvlinkRxGBs", gpu.peak("nvlink_gb_s")),
    }
    return {column: _percent(optional_number(rates, rate), peak) for column, (rate, peak) in peaks.items()}


def _percent(value: float | None, peak: float) -> float | None:
    return None if value is None else 100 * value / peak


def what_ran(shard: Shard, combined: SlowestRank) -> Row:
    """The run columns of one shard: the combined phase's slowest-rank window spread, the scale and
    shape that ran, how it was timed and the code and seed that ran it."""
    meta, shape, emulation = shard.meta, shard.meta.shape, shard.meta.memory.emulation
    low, high = combined.spread
    loads = shape.layer_loads
    return {
        "windowMinMS": low,
        "windowMaxMS": high,
        "scale": (meta.config.get("scale") or {}).get("name"),
        "tokens": shape.nominal_tokens,
        "tokens_run": max(shape.layer_tokens),
        "d_model": shape.d_model,
        "d_ff_run": shape.d_ff,
        "experts": shape.num_experts,
        "experts_run": shape.layer_experts,
        "top_k": shape.top_k,
        "shared_experts": shape.num_shared,
        "imbalance": sum(loads) / len(loads),
        "windows": meta.timing.plan.windows,
        "iterationsPerWindow": meta.timing.plan.iterations,
        "workMultiple": WORK_MULTIPLE[shard.identity.kind],
        "dtype": shape.dtype,
        "collective": meta.provenance.collective,
        "gemm": None if meta.kernels is None else meta.kernels.gemm,
        "clock": meta.timing.clock,
        "cudaGraphs": meta.timing.cuda_graphs,
        "cudaGraphsReason": meta.timing.cuda_graphs_reason,
        "cpuWaitShare": meta.contention.cpu_wait_share,
        "oversubscribed": meta.contention.oversubscribed,
        "emulationCopiesGiB": None if emulation is None else emulation.total / GIB,
        "seed": meta.config.get("seed"),
        "git_sha": meta.provenance.git_sha,
    }


def layer_shape(kind: str, precision: str, shape: Shape) -> cost.LayerShape:
    """The model's shape of the layer a shard measured, at the report's T: tokens per GPU of the
    nominal EP-wide cluster (``nominal_tokens``; runs on fewer ranks than EP feed each launched rank
    T'_l tokens in layer l, ``layer_tokens``)."""
    s = shape
    return cost.LayerShape(
        kind, s.nominal_tokens, s.d_model, s.d_ff, s.num_experts, s.top_k, s.ep, precision, s.layer_loads,
        s.num_shared, DTYPE_BYTES[s.dtype],
    )  # fmt: skip


def _scaled(value: float | None, unit: float) -> float | None:
    return None if value is None else value / unit


def estimated_columns(shards: Iterable[Shard]) -> dict[str, Row]:
    """Per execution id, its estimate columns from the kept table (:mod:`pipeline.data.estimates`): at
    full scale on the shard's cluster preset, or the report's hardware where the dataset ran on none;
    empty where the table lacks it (``python -m pipeline.estimate --dataset DIR`` computes those)."""
    keys = kept_table.keys_of(shards)
    found = kept_table.kept(keys.values())
    return {e: kept_table.columns(found[k]) for e, k in keys.items()}
