"""One published row per execution: identity, reduced times, rates, the speed of light and the
expectation beside the measurement, the phase account and what ran (scale, shape run beside the
nominal one, windows, clock, CUDA graphs, communication, MXFP8 products, seed, code version).

Rates use the slowest-GPU combined iteration time (``iterationMS``) and the shape the execution ran
(``d_model``, ``d_ff`` of its scale; the matrix's nominal ``d_ff`` stays the identity column). The HBM
rate is the analytical logical byte model of the cluster-average GPU (the convention of useful
TFLOP/s) over that time, not measured traffic, counting communication only where it ran. The speed of
light (the layer at the datasheet peaks, its ranks placed on nodes as the shard measured them, else as
the preset places them) is empty when no hardware preset matches the recorded device
(e.g. CPU runs), and so are the %SOL columns: each rate over the peak of what ran in that preset
(``conf/cluster/<name>.yaml``, read by :mod:`pipeline.base.gpu_presets`; MXFP8 emulated on BF16 tensor
cores is held to the BF16 peak). NVLink is empty, not zero, where no rows crossed between ranks. The
expectation is the layer's cost at the dataset's measured kernel rates (:mod:`pipeline.data.rates`),
empty without them.
The sanity columns are the execution's correctness gate (:mod:`pipeline.bench.sanity`): worst normwise
error, its tolerance and the verdict, and the routed rows of its slices that crossed ranks among all it
checked; empty for shards written before the gate existed (the row counts, before metadata version 7).
Every column of what a shard's schema version did not record (the collective, kernels, contention and
emulation copies before version 3) is empty, never filled in. The estimate columns are read from the
kept table (:mod:`pipeline.data.estimates`), never computed here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict

from pipeline import cost
from pipeline.base.gpu_presets import gpu_preset
from pipeline.base.metrics import SlowestRank, phases, tera_per_second, useful_tflops_per_gpu
from pipeline.base.vocabulary import DTYPE_BYTES, WORK_MULTIPLE
from pipeline.cost import products
from pipeline.data import estimates as kept_table
from pipeline.data.reader import Shard
from pipeline.matrix.scale import Shape
from pipeline.report import accounts, communication
from pipeline.report.accounts import Peaks, PhaseAccount
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
# dense tensor peak of the product that ran, the HBM model's TB/s over the HBM peak, NVLink GB/s over
# the per-direction link peak.
SOL_COLUMNS = ("usefulSOLPct", "hbmModelSOLPct", "nvlinkTxSOLPct", "nvlinkRxSOLPct")
# The layer at the datasheet peaks (and its %SOL: that time over the measured one), and at the
# device's measured kernel rates.
MODEL_COLUMNS = ("speedOfLightMS", "layerSOLPct", "expectedMS", "measuredOverExpected")
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
    "communication",
    "gemm",
    "mxfp8Products",
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
    *MODEL_COLUMNS,
    *SOL_COLUMNS,
    "sanityMaxError",
    "sanityTolerance",
    "sanityPassed",
    "sanityCrossedRows",
    "sanitySliceRows",
    *RUN_COLUMNS,
    *ESTIMATE_COLUMNS,
    *accounts.COLUMNS,
)


def execution_row(
    shard: Shard,
    reduced: dict[str, SlowestRank] | None = None,
    rates: cost.KernelRates | None = None,
    traces: tuple[str, ...] = (),
) -> Row:
    """The published row of one shard (``None`` where a value does not exist, e.g. no NVLink on CPU);
    ``reduced``: its ``metrics.phases``, where the caller needs them too; ``rates``: the dataset's
    measured kernel rates (the expectation's, used where they are the row's device's)."""
    return execution(shard, reduced, rates, traces)[0]


def execution(
    shard: Shard,
    reduced: dict[str, SlowestRank] | None = None,
    rates: cost.KernelRates | None = None,
    traces: tuple[str, ...] = (),
) -> tuple[Row, PhaseAccount | None]:
    """:func:`execution_row` and the execution's phase account for the JSON (None: none recorded)."""
    ident, meta = shard.identity, shard.meta
    if reduced is None:
        reduced = phases(shard.phase, shard.rank, shard.window_ms, shard.iterations)
    ms = reduced["combined"].ms
    tokens = meta.shape.nominal_tokens
    layer = layer_shape(ident.kind, ident.precision, meta.shape)
    hardware = cost.hardware_for_device(ident.device)
    gemm = None if meta.kernels is None else meta.kernels.gemm
    where = communication.placement(shard)  # the ranks per node measured, else the preset's
    peaks = Peaks.of(
        None if hardware is None else gpu_preset(hardware),
        ident.precision,
        gemm,
        meta.shape.dtype,
        where.span,
    )
    dispatch = "mxfp8" if ident.pipeline == "fp8-dispatch" else "bf16"
    light = None
    if hardware is not None and peaks is not None and peaks.routed is not None:
        light = cost.speed_of_light_ms(
            layer,
            hardware,
            dispatch=dispatch,
            routed_tflops=peaks.routed,
            ranks_per_node=where.ranks_per_node,
        )
    expected = _expected(shard, layer, rates, gemm, dispatch, reduced["combined"])
    flops = (ident.kind, tokens, meta.shape.d_model, meta.shape.d_ff, meta.shape.top_k)
    hbm_bytes = cost.iteration_bytes(layer, dispatch)
    crossed = communication.ran(shard)
    rates_row: Row = {
        "usefulTFLOPsPerGPU": useful_tflops_per_gpu(*flops, ms, meta.shape.num_shared),
        "hbmModelTBs": tera_per_second(hbm_bytes, ms),
        "nvlinkTxGBs": _scaled(meta.nvlink.tx_bytes_per_s, 1e9) if crossed else None,
        "nvlinkRxGBs": _scaled(meta.nvlink.rx_bytes_per_s, 1e9) if crossed else None,
    }
    account_row, account = accounts.accounted(shard, reduced["combined"], layer, peaks, expected, traces)
    expected_ms = None if expected is None else sum(expected.values())
    row: Row = {
        **{k: v for k, v in asdict(ident).items() if k in COLUMNS},
        "iterationMS": ms,
        "forwardMS": reduced["forward"].ms if "forward" in reduced else None,
        "backwardMS": reduced["backward"].ms if "backward" in reduced else None,
        **rates_row,
        "peakAllocatedGiB": _scaled(meta.memory.peak_allocated_bytes, GIB),
        "hbmModelBytes": hbm_bytes,
        "speedOfLightMS": light,
        "layerSOLPct": None if light is None else 100 * light / ms,
        "expectedMS": expected_ms,
        "measuredOverExpected": None if expected_ms is None else ms / expected_ms,
        **sol_columns(rates_row, peaks),
        "sanityMaxError": None if meta.sanity is None else meta.sanity.max_error,
        "sanityTolerance": None if meta.sanity is None else meta.sanity.tolerance,
        "sanityPassed": None if meta.sanity is None else meta.sanity.passed,
        "sanityCrossedRows": None if meta.sanity is None else meta.sanity.crossed_rows,
        "sanitySliceRows": None if meta.sanity is None else meta.sanity.slice_rows,
        **what_ran(shard, reduced["combined"]),
        **account_row,
    }
    return row, account


def _expected(
    shard: Shard,
    layer: cost.LayerShape,
    rates: cost.KernelRates | None,
    gemm: str | None,
    dispatch: str,
    combined: SlowestRank,
) -> dict[str, float] | None:
    """Each phase at the measured rates, for the rank the row publishes (its routed rows as its account
    recorded them, else rank 0's); None without rates of this device."""
    if rates is None or rates.device != shard.identity.device:
        return None
    shape = shard.meta.shape
    acc = shard.meta.account.of(combined.rank)
    rows = shape.tracked_rows if acc is None else acc.routed_rows
    ran = products.mxfp8_products(layer.precision, gemm)
    return cost.expected_phases(layer, shape.layer_tokens, rows, rates, dispatch=dispatch, products=ran)


def sol_columns(rates: Row, peaks: Peaks | None) -> Row:
    """The %SOL columns of a row's rates at ``peaks`` (the device's preset; None: no preset, all
    empty): each rate as a percentage of its peak, useful work at the peak of the product that ran."""
    if peaks is None:
        return dict.fromkeys(SOL_COLUMNS)
    held = {
        "usefulSOLPct": ("usefulTFLOPsPerGPU", peaks.routed),
        "hbmModelSOLPct": ("hbmModelTBs", peaks.hbm),
        "nvlinkTxSOLPct": ("nvlinkTxGBs", peaks.link),
        "nvlinkRxSOLPct": ("nvlinkRxGBs", peaks.link),
    }
    return {column: _percent(optional_number(rates, rate), peak) for column, (rate, peak) in held.items()}


def _percent(value: float | None, peak: float | None) -> float | None:
    return None if value is None or peak is None else 100 * value / peak


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
        "communication": communication.of_shard(shard),
        "gemm": None if meta.kernels is None else meta.kernels.gemm,
        "mxfp8Products": products.mxfp8_products(
            shard.identity.precision, None if meta.kernels is None else meta.kernels.gemm
        ),
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
        s.num_shared, DTYPE_BYTES[s.dtype], s.ranks,
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
