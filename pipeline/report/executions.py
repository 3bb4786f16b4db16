"""One published row per execution: identity, reduced times, rates and the model's prediction.

Rates use the slowest-GPU combined iteration time (``iterationMS``) and the shape the execution ran
(``d_model``, ``d_ff`` of its scale; the matrix's nominal ``d_ff`` stays the identity column). The HBM
rate is the analytical logical byte model over that time, not measured traffic; the prediction is
empty when no hardware preset matches the recorded device (e.g. CPU runs). The sanity columns are the
execution's correctness gate (:mod:`pipeline.bench.sanity`): worst normwise error, its tolerance and
the verdict; empty for shards written before the gate existed.
"""

from __future__ import annotations

from typing import Any

from pipeline import model
from pipeline.data.reader import Shard
from pipeline.metrics import phase_ms, tera_per_second, useful_tflops_per_gpu

GIB = 2**30
# Measured metrics besides the iteration time (pairs publish each as a Dist-MoE / MoK ratio).
METRICS = (
    "forwardMS",
    "backwardMS",
    "usefulTFLOPsPerGPU",
    "hbmModelTBs",
    "nvlinkTxGBs",
    "nvlinkRxGBs",
    "peakAllocatedGiB",
)
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
    "device",
    "attempt",
    "job_id",
    "predictedMS",
    "measuredOverPredicted",
    "sanityMaxError",
    "sanityTolerance",
    "sanityPassed",
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
    if hardware is not None:
        dispatch = "mxfp8" if ident["pipeline"] == "fp8-dispatch" else "bf16"
        predicted = model.predicted_ms(layer, hardware, dispatch=dispatch)
    flops = (ident["kind"], tokens, shape["d_model"], shape["d_ff"], shape["top_k"])
    nvlink = shard.meta.get("nvlink") or {}
    peak = (shard.meta.get("memory") or {}).get("peak_allocated_bytes")
    sanity = shard.meta.get("sanity") or {}  # shards written before the correctness gate have none
    return {
        **{k: ident[k] for k in COLUMNS if k in ident},
        "iterationMS": ms,
        "forwardMS": times.get("forward"),
        "backwardMS": times.get("backward"),
        "usefulTFLOPsPerGPU": useful_tflops_per_gpu(*flops, ms),
        "hbmModelTBs": tera_per_second(model.iteration_bytes(layer), ms),
        "nvlinkTxGBs": _scaled(nvlink.get("tx_bytes_per_s"), 1e9),
        "nvlinkRxGBs": _scaled(nvlink.get("rx_bytes_per_s"), 1e9),
        "peakAllocatedGiB": _scaled(peak, GIB),
        "predictedMS": predicted,
        "measuredOverPredicted": None if predicted is None else ms / predicted,
        "sanityMaxError": sanity.get("max_error"),
        "sanityTolerance": sanity.get("tolerance"),
        "sanityPassed": sanity.get("passed"),
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
    )


def report_tokens(shape: dict[str, Any]) -> int:
    """T of the report's formulas: tokens per GPU of the nominal EP-wide cluster (``nominal_tokens``;
    runs on fewer ranks than EP feed each launched rank T'_l tokens in layer l, ``layer_tokens``)."""
    return shape["nominal_tokens"]


def _scaled(value: float | None, unit: float) -> float | None:
    return None if value is None else value / unit
