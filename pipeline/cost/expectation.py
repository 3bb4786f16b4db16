"""The expectation from measured rates: the layer's cost (:func:`pipeline.cost.layer_cost.phase_work`)
fed the kernel rates measured on the device, the kernels of each phase run one after another.

A :class:`KernelRates` table holds what the device run's timing stage measured there: each grouped
GEMM's TFLOP/s by op and shape (the local experts ``groups`` and the projection: ``up`` is GEMM-1, N =
2F over K = D, ``down`` GEMM-2, N = D over K = F; op ``mx`` is the MXFP8 forward as it runs, the
activations' conversion inside it), a dense BF16 GEMM's TFLOP/s (the shared expert's rate) and the HBM
bandwidth of a streaming kernel (every pass of bytes), and a link rate where one was measured. Each
phase's expected time is its FLOPs at its GEMMs' rates, or its bytes at the HBM rate (communication:
its staging there and its link bytes at the link rate). Where the table lacks a rate the work needs
(a shape not timed, communication with no link rate), there is no expectation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.base.checks import choice
from pipeline.base.vocabulary import LAYER_PHASES
from pipeline.cost.layer_cost import LayerShape, phase_work, row_bytes
from pipeline.cost.products import REFERENCE

GEMM_OPS = ("fprop", "dgrad", "wgrad", "mx")
PROJECTIONS = ("up", "down")


@dataclass(frozen=True)
class GemmRate:
    """One grouped GEMM's measured rate: op, layer shape (D, F), local experts, projection."""

    op: str
    d_model: int
    d_ff: int
    groups: int
    projection: str
    tflops: float

    def __post_init__(self) -> None:
        choice("op", self.op, GEMM_OPS)
        choice("projection", self.projection, PROJECTIONS)
        if not self.tflops > 0 or min(self.d_model, self.d_ff, self.groups) < 1:
            raise ValueError(f"a GEMM rate needs positive TFLOP/s and shape, got {self}")


@dataclass(frozen=True)
class KernelRates:
    """Rates measured on one device (``source`` says where and when)."""

    device: str
    source: str
    dense_tflops: float
    hbm_gb_s: float
    link_gb_s: float | None
    gemms: tuple[GemmRate, ...]

    def __post_init__(self) -> None:
        if not self.dense_tflops > 0 or not self.hbm_gb_s > 0 or not (self.link_gb_s or 1) > 0:
            raise ValueError("rates must be positive")

    def tflops(self, op: str, s: LayerShape, projection: str) -> float | None:
        """The rate of ``op`` at ``s``'s GEMM shape, None where it was not measured."""
        groups = s.num_experts // s.ep
        for g in self.gemms:
            if (g.op, g.d_model, g.d_ff, g.groups, g.projection) == (
                op,
                s.d_model,
                s.d_ff,
                groups,
                projection,
            ):
                return g.tflops
        return None


def expected_phases(
    s: LayerShape,
    tokens: Sequence[float],
    rows: Sequence[float],
    rates: KernelRates,
    *,
    dispatch: str = "bf16",
    products: str | None = None,
) -> dict[str, float] | None:
    """Each phase's expected milliseconds in one iteration of a rank fed ``tokens[l]`` token rows whose
    experts receive ``rows[l]`` rows in layer l; ``products`` how the MXFP8 products ran
    (:mod:`pipeline.cost.products`). None where the table lacks a rate the work needs."""
    work = phase_work(s, tokens, rows, dispatch)
    mx = s.precision == "mxfp8"
    if mx and products in (None, REFERENCE):
        return None  # no device rate is the float32 reference's
    forward = "mx" if mx else "fprop"
    rates_of = {
        p: (rates.tflops(op, s, "up"), rates.tflops(op, s, "down"))
        for p, op in (("fprop", forward), ("dgrad", "dgrad"), ("wgrad", "wgrad"))
    }
    hbm = rates.hbm_gb_s * 1e9
    out = dict.fromkeys(LAYER_PHASES, 0.0)
    total_rows = float(sum(rows))
    f, e = s.d_ff, float(s.element_bytes)
    for phase in ("fprop", "dgrad", "wgrad"):
        if work[phase].flops == 0:
            continue
        up, down = rates_of[phase]
        if up is None or down is None:
            return None
        # per row: GEMM-1 4 D F FLOPs (N = 2F), GEMM-2 2 D F (N = D); the same split in each gradient
        flops = work[phase].flops
        out[phase] = 1e3 * (flops * 2 / 3 / (up * 1e12) + flops / 3 / (down * 1e12))
    out["shared"] = 1e3 * work["shared"].flops / (rates.dense_tflops * 1e12)
    inside_mx = total_rows * (f * e + row_bytes(f, "mxfp8")) if mx else 0.0  # the MX op converts A
    for phase in ("swiglu", "permute", "quantize"):
        moved = work[phase].bytes - (inside_mx if phase == "quantize" else 0.0)
        out[phase] = 1e3 * max(moved, 0.0) / hbm
    for phase in ("dispatch", "combine"):
        link = work[phase].link_bytes
        if link and rates.link_gb_s is None:
            return None
        over_links = link / (rates.link_gb_s * 1e9) if link and rates.link_gb_s else 0.0
        out[phase] = 1e3 * (work[phase].bytes / hbm + over_links)
    return out
