"""The phase account as published: each phase's time in the profiled iteration of the execution's
slowest rank, its %SOL against the peak of what ran, and the expectation from measured kernel rates.

The shard holds every rank's account (:class:`pipeline.data.meta.Account`); the row publishes the
rank whose timed median is the published ``iterationMS`` (the slowest), so ``profiledMS`` (per
iteration of its profiled run, at most a window's iterations, whose mean is nearest that median) and
the timed iteration are of one rank, and ``profiledOverTimed`` says how far they differ. A phase's %SOL is
its time at the peaks (its useful FLOPs at the tensor peak of the product that ran, its logical bytes
at the HBM peak, its bytes across ranks at the link peak, the share that leaves the rank's NVLink
domain at the inter-node link's, as the speed of light takes them; the largest of these) over its measured
time: empty where no preset is the device, where the preset has no peak for what ran (the float32
reference) and for a phase of no time. Communication that did not run (one rank) has no time, work
or %SOL: its cells are empty, not zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline import cost
from pipeline.base.gpu_presets import GpuPreset, Span
from pipeline.base.metrics import SlowestRank
from pipeline.base.vocabulary import COMMUNICATION_PHASES, LAYER_PHASES
from pipeline.cost import products
from pipeline.data.reader import Shard
from pipeline.report.publish import Row

UNCLAIMED_COLUMN = "phaseUnclaimedMS"


def phase_column(phase: str, unit: str) -> str:
    """``phaseFpropMS``, ``phaseSwigluSOLPct``: a layer phase's published column."""
    return f"phase{phase.capitalize()}{unit}"


PHASE_MS = (*(phase_column(p, "MS") for p in LAYER_PHASES), UNCLAIMED_COLUMN)
PHASE_SOL = tuple(phase_column(p, "SOLPct") for p in LAYER_PHASES if p != "other")
COLUMNS = ("profiledMS", "profiledOverTimed", *PHASE_MS, *PHASE_SOL)


@dataclass(frozen=True)
class Peaks:
    """The peaks a row's work is held to on its device's preset: the routed GEMMs' product as it ran
    and the layer dtype's (TFLOP/s), HBM (TB/s) and one link direction (GB/s); None: no such peak. Of
    the bytes across ranks the share ``crossing`` leaves the NVLink domain, over the inter-node link
    (``inter_node`` GB/s per GPU and direction), both links at once."""

    routed: float | None
    dense: float | None
    hbm: float | None
    link: float | None
    inter_node: float | None = None
    crossing: float = 0.0

    @classmethod
    def of(
        cls, gpu: GpuPreset | None, precision: str, gemm: str | None, dtype: str, span: Span | None = None
    ) -> Peaks | None:
        """The peaks of ``gpu`` (None: no preset is the device, so none), its ranks placed as ``span``
        (None: in one NVLink domain)."""
        if gpu is None:
            return None

        def peak(name: str | None) -> float | None:
            return None if name is None else gpu.peak(name)

        routed = peak(products.routed_peak(precision, gemm, dtype))
        dense = peak(products.dense_peak(dtype))
        crossing = 0.0 if span is None else cost.inter_node_share(span)
        inter_node = None if span is None else span.inter_node_gb_s
        return cls(routed, dense, gpu.peak("hbm_tb_s"), gpu.peak("nvlink_gb_s"), inter_node, crossing)

    def link_s(self, amount: float) -> float | None:
        """Seconds of ``amount`` bytes across ranks: the share inside the NVLink domain at the link
        peak, the rest at the inter-node link's, at once; None without the peak either needs."""
        if not self.link or (self.crossing and not self.inter_node):
            return None
        within = amount * (1 - self.crossing) / (self.link * 1e9)
        return max(within, amount * self.crossing / (self.inter_node * 1e9)) if self.inter_node else within

    def sol_ms(self, work: cost.PhaseWork) -> float | None:
        """``work``'s milliseconds at these peaks: the largest of its FLOPs, bytes and link bytes each
        at its peak; None where one of them has no peak."""
        parts = []
        if work.flops:
            tensor = self.routed if work.tensor == "routed" else self.dense
            if tensor is None:
                return None
            parts.append(work.flops / (tensor * 1e12))
        if work.bytes:
            if not self.hbm:
                return None
            parts.append(work.bytes / (self.hbm * 1e12))
        if work.link_bytes:
            seconds = self.link_s(work.link_bytes)
            if seconds is None:
                return None
            parts.append(seconds)
        return 1e3 * max(parts) if parts else None


@dataclass(frozen=True)
class PhaseEntry:
    """One phase of a published account: its measured ms (None: communication that did not run), its
    work (useful FLOPs, logical HBM bytes, bytes across ranks), %SOL and expected ms (None: none)."""

    phase: str
    ms: float | None
    flops: float
    bytes: float
    link_bytes: float
    sol_pct: float | None
    expected_ms: float | None


@dataclass(frozen=True)
class PhaseAccount:
    """An execution's account in the published JSON: of its slowest rank (``rank``), the profiled
    iteration (per iteration of the run ``first``, ``length`` of the ``iterations`` profiled, their
    spans ``spans_ms``) nearest the timed one, beside it, each phase and the unclaimed time (which add
    up to ``profiled_ms``), on a GPU the kernels and how many were named, and the kept profiles."""

    execution_id: str
    rank: int
    iterations: int
    spans_ms: tuple[float, ...]  # every profiled iteration's
    first: int  # the accounted run of them, whose mean span (profiled_ms) is nearest timed_ms
    length: int
    profiled_ms: float
    timed_ms: float
    unclaimed_ms: float
    kernels: int | None
    named_kernels: int | None
    phases: tuple[PhaseEntry, ...]
    traces: tuple[str, ...]


def accounted(
    shard: Shard,
    combined: SlowestRank,
    layer: cost.LayerShape,
    peaks: Peaks | None,
    expected: Mapping[str, float] | None,
    traces: tuple[str, ...] = (),
) -> tuple[Row, PhaseAccount | None]:
    """The account columns of a row and its JSON record (None where the shard has no account of its
    slowest rank: empty cells)."""
    acc = shard.meta.account.of(combined.rank)
    if acc is None:
        return dict.fromkeys(COLUMNS), None
    ran = shard.meta.shape.ranks > 1
    dispatch = "mxfp8" if shard.identity.pipeline == "fp8-dispatch" else "bf16"
    work = cost.phase_work(layer, shard.meta.shape.layer_tokens, acc.routed_rows, dispatch)
    entries = []
    for p in LAYER_PHASES:
        silent = p in COMMUNICATION_PHASES and not ran
        ms = None if silent else acc.phases[p]
        sol = None if peaks is None or silent or p == "other" else peaks.sol_ms(work[p])
        entries.append(
            PhaseEntry(
                phase=p,
                ms=ms,
                flops=work[p].flops,
                bytes=work[p].bytes,
                link_bytes=work[p].link_bytes,
                sol_pct=None if sol is None or not ms else 100 * sol / ms,
                expected_ms=None if expected is None or silent else expected[p],
            )
        )
    row: Row = {
        "profiledMS": acc.profiled_ms,
        "profiledOverTimed": acc.profiled_ms / combined.ms,
        **{phase_column(e.phase, "MS"): e.ms for e in entries},
        UNCLAIMED_COLUMN: acc.unclaimed_ms,
        **{phase_column(e.phase, "SOLPct"): e.sol_pct for e in entries if e.phase != "other"},
    }
    record = PhaseAccount(
        execution_id=shard.execution_id,
        rank=acc.rank,
        iterations=acc.iterations,
        spans_ms=acc.spans_ms,
        first=acc.first,
        length=acc.length,
        profiled_ms=acc.profiled_ms,
        timed_ms=combined.ms,
        unclaimed_ms=acc.unclaimed_ms,
        kernels=acc.kernels,
        named_kernels=acc.named_kernels,
        phases=tuple(entries),
        traces=traces,
    )
    return row, record
