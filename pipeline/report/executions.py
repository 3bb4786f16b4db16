"""One published row per execution: identity, reduced times, rates, the model's prediction and what
ran (scale, shape run beside the nominal one, windows, clock, CUDA graphs, seed, code version).

Rates use the slowest-GPU combined iteration time (``iterationMS``) and the shape the execution ran
(``d_model``, ``d_ff`` of its scale; the matrix's nominal ``d_ff`` stays the identity column). The HBM
rate is the analytical logical byte model of the cluster-average GPU (the convention of useful
TFLOP/s) over that time, not measured traffic; the prediction is
empty when no hardware preset matches the recorded device (e.g. CPU runs). The sanity columns are the
execution's correctness gate (:mod:`pipeline.bench.sanity`): worst normwise error, its tolerance and
the verdict; empty for shards written before the gate existed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline import model
from pipeline.data.reader import Shard
from pipeline.estimate import table
from pipeline.metrics import phase_ms, slowest_rank_spread, tera_per_second, useful_tflops_per_gpu
from pipeline.vocabulary import DTYPE_BYTES, WORK_MULTIPLE

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
    "clock",
    "cudaGraphs",
    "cudaGraphsReason",
    "seed",
    "git_sha",
)
# The execution's GPU path at full scale on fake tensors (pipeline.estimate), on the dataset's preset.
ESTIMATE_COLUMNS = table.COLUMNS
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
    "sanityMaxError",
    "sanityTolerance",
    "sanityPassed",
    *RUN_COLUMNS,
    *ESTIMATE_COLUMNS,
)


def execution_row(shard: Shard) -> dict[str, Any]:
    """The published row of one shard (``None`` where a value does not exist, e.g. no NVLink on CPU)."""
    ident, shape = shard.identity, shard.meta["shape"]
    times = phase_ms(shard.phase, shard.rank, shard.window_ms, shard.iterations)
    ms = times["combined"]
    tokens = report_tokens(shape)
    layer = layer_shape(ident, shape)
    hardware = model.hardware_for_device(ident["device"])
    predicted = None
    dispatch = "mxfp8" if ident["pipeline"] == "fp8-dispatch" else "bf16"
    if hardware is not None:
        predicted = model.predicted_ms(layer, hardware, dispatch=dispatch)
    flops = (ident["kind"], tokens, shape["d_model"], shape["d_ff"], shape["top_k"])
    hbm_bytes = model.iteration_bytes(layer, dispatch)
    nvlink = shard.meta.get("nvlink") or {}
    peak = (shard.meta.get("memory") or {}).get("peak_allocated_bytes")
    sanity = shard.meta.get("sanity") or {}  # shards written before the correctness gate have none
    return {
        **{k: ident[k] for k in COLUMNS if k in ident},
        "iterationMS": ms,
        "forwardMS": times.get("forward"),
        "backwardMS": times.get("backward"),
        "usefulTFLOPsPerGPU": useful_tflops_per_gpu(*flops, ms),
        "hbmModelTBs": tera_per_second(hbm_bytes, ms),
        "nvlinkTxGBs": _scaled(nvlink.get("tx_bytes_per_s"), 1e9),
        "nvlinkRxGBs": _scaled(nvlink.get("rx_bytes_per_s"), 1e9),
        "peakAllocatedGiB": _scaled(peak, GIB),
        "hbmModelBytes": hbm_bytes,
        "predictedMS": predicted,
        "measuredOverPredicted": None if predicted is None else ms / predicted,
        "sanityMaxError": sanity.get("max_error"),
        "sanityTolerance": sanity.get("tolerance"),
        "sanityPassed": sanity.get("passed"),
        **what_ran(shard),
    }


def what_ran(shard: Shard) -> dict[str, Any]:
    """The run columns of one shard: the combined phase's slowest-rank window spread, the scale and
    shape that ran, how it was timed and the code and seed that ran it."""
    meta, shape = shard.meta, shard.meta["shape"]
    combined = shard.phase == "combined"
    low, high = slowest_rank_spread(
        shard.rank[combined], shard.window_ms[combined], shard.iterations[combined]
    )
    config, timing = meta.get("config") or {}, meta.get("timing") or {}
    loads = shape["layer_loads"]
    return {
        "windowMinMS": low,
        "windowMaxMS": high,
        "scale": (config.get("scale") or {}).get("name"),
        "tokens": report_tokens(shape),
        "tokens_run": max(shape["layer_tokens"]),
        "d_model": shape["d_model"],
        "d_ff_run": shape["d_ff"],
        "experts": shape["num_experts"],
        "experts_run": shape["layer_experts"],
        "top_k": shape["top_k"],
        "shared_experts": shape["num_shared"],
        "imbalance": sum(loads) / len(loads),
        "windows": shape["windows"],
        "iterationsPerWindow": shape["iterations"],
        "workMultiple": WORK_MULTIPLE[shard.identity["kind"]],
        "dtype": shape.get("dtype"),
        "clock": timing.get("clock"),
        "cudaGraphs": timing.get("cuda_graphs"),
        "cudaGraphsReason": timing.get("cuda_graphs_reason"),
        "seed": config.get("seed"),
        "git_sha": (meta.get("provenance") or {}).get("git_sha"),
    }


def layer_shape(identity: dict[str, Any], shape: dict[str, Any]) -> model.LayerShape:
    """The model's shape of the layer a shard measured, at the report's T (see :func:`report_tokens`)."""
    return model.LayerShape(
        kind=identity["kind"],
        tokens=report_tokens(shape),
        d_model=shape["d_model"],
        d_ff=shape["d_ff"],
        num_experts=shape["num_experts"],
        top_k=shape["top_k"],
        ep=shape["ep"],
        precision=identity["precision"],
        layer_loads=tuple(shape["layer_loads"]),
        num_shared=shape["num_shared"],
        element_bytes=DTYPE_BYTES[shape["dtype"]],
    )


def report_tokens(shape: dict[str, Any]) -> int:
    """T of the report's formulas: tokens per GPU of the nominal EP-wide cluster (``nominal_tokens``;
    runs on fewer ranks than EP feed each launched rank T'_l tokens in layer l, ``layer_tokens``)."""
    return shape["nominal_tokens"]


def _scaled(value: float | None, unit: float) -> float | None:
    return None if value is None else value / unit


def estimated_columns(shards: Iterable[Shard]) -> dict[str, dict[str, Any]]:
    """Per execution id, its estimate columns (:mod:`pipeline.estimate.table`): at full scale on the
    shard's cluster preset, or the report's hardware where the dataset ran on none."""
    preset = {s.identity["execution_id"]: table.preset_of(_cluster(s)) for s in shards}
    found = table.estimates(preset.items())
    return {e: table.columns(found[(e, p)]) for e, p in preset.items()}


def _cluster(shard: Shard) -> str | None:
    return (shard.meta.get("provenance") or {}).get("cluster")
