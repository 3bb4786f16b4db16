"""The speed-of-light time of the project's layer: its iteration at a hardware preset's datasheet
peaks, a bound no run reaches, not a prediction of what one takes (beside it stand the expectation
from measured kernel rates, :mod:`pipeline.cost.expectation`, and the measured phase account).

Per timed layer: a roofline of GEMM time (routed GEMMs at the peak of the product that ran, shared
experts at the BF16 rate) against HBM time (the logical byte model), plus the all-to-all with no
overlap: over NVLink inside the rank's NVLink domain, over the inter-node link for the rows that leave
it (both at once, the slower sets the time; :func:`inter_node_share`), the ranks placed in order at the
ranks per node an execution measured, or the preset's where none was measured. The all-to-all synchronizes
every layer, so each layer takes as long as its busiest rank: the tracked GPU at load f, or any other
rank at (EP - f) / (EP - 1) when f < 1.

All-to-all per forward: dispatch sends the remote share (ranks-1)/ranks of the busiest rank's routed
rows at the wire precision, combine returns them in BF16; a backward adds two BF16 all-to-alls of the
same rows (output gradients out, input gradients back). Links run both directions at once, so the
receive side of the busiest rank sets the time. Communication that does not run (one launched rank)
takes no time.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.base.checks import choice
from pipeline.base.gpu_presets import Span
from pipeline.base.vocabulary import PRECISIONS
from pipeline.cost.hardware import Hardware, preset
from pipeline.cost.layer_cost import LayerShape, forward_bytes, row_bytes


@dataclass(frozen=True)
class SpeedOfLight:
    """Milliseconds of one iteration at the peaks and their parts (summed over the timed layers)."""

    gemm_ms: float  # GEMM time at peak tensor rates
    hbm_ms: float  # logical bytes at peak HBM bandwidth
    roofline_ms: float  # sum over layers of max(GEMM, HBM) per layer
    all_to_all_ms: float  # dispatch + combine (+ backward) over NVLink and the inter-node link

    @property
    def total_ms(self) -> float:
        """No overlap: compute-or-memory time plus communication time."""
        return self.roofline_ms + self.all_to_all_ms


def busiest_load(load: float, ep: int) -> float:
    """Load factor of the busiest rank when the tracked rank has ``load`` and the rest split evenly."""
    return load if ep == 1 else max(load, (ep - load) / (ep - 1))


def inter_node_share(span: Span) -> float:
    """The share of a rank's remote rows that leave its NVLink domain when its rows go to every other
    rank alike: (ranks - ranks in its domain) / (ranks - 1)."""
    return 0.0 if span.ranks == 1 else (span.ranks - span.domain_ranks) / (span.ranks - 1)


def _layer(
    s: LayerShape, load: float, hw: Hardware, dispatch: str, routed_tflops: float, crossing: float
) -> tuple[float, float, float]:
    """(GEMM s, HBM s, all-to-all s) of one timed layer at the busiest rank's load."""
    g = busiest_load(load, s.ep)
    passes = s.forward_equivalents
    per_row = 6.0 * s.d_model * s.d_ff
    gemm = per_row * g * s.tokens * s.top_k / (routed_tflops * 1e12)
    gemm += per_row * s.num_shared * s.tokens / (hw.peak("bf16_tflops") * 1e12)
    hbm = forward_bytes(s, g, dispatch) / (hw.peak("hbm_tb_s") * 1e12)
    remote_rows = g * s.tokens * s.top_k * s.remote_share
    wire = row_bytes(s.d_model, dispatch) + row_bytes(s.d_model, "bf16")
    if passes > 1:
        wire += 2 * row_bytes(s.d_model, "bf16")
    nvlink = remote_rows * (1 - crossing) * wire / (hw.peak("nvlink_gb_s") * 1e9)
    inter_node = remote_rows * crossing * wire / (hw.link("inter_node_gb_s") * 1e9)
    return passes * gemm, passes * hbm, max(nvlink, inter_node)


def speed_of_light(
    s: LayerShape,
    hardware: str = "h200",
    *,
    dispatch: str = "bf16",
    routed_tflops: float | None = None,
    ranks_per_node: int | None = None,
) -> SpeedOfLight:
    """The iteration at the peaks, and its parts; ``dispatch`` is the wire precision of the dispatch
    all-to-all ("mxfp8" for an FP8-payload pipeline, else "bf16"); ``routed_tflops`` the peak of the
    routed GEMMs' product as it ran (default: the precision's tensor peak); ``ranks_per_node`` the
    placement an execution measured (default: the preset's)."""
    hw = preset(hardware)
    choice("dispatch", dispatch, PRECISIONS)
    tflops = hw.tensor_tflops(s.precision) if routed_tflops is None else routed_tflops
    crossing = inter_node_share(hw.span(s.ranks, ranks_per_node))
    parts = [_layer(s, load, hw, dispatch, tflops, crossing) for load in s.layer_loads]
    return SpeedOfLight(
        gemm_ms=1e3 * sum(p[0] for p in parts),
        hbm_ms=1e3 * sum(p[1] for p in parts),
        roofline_ms=1e3 * sum(max(p[0], p[1]) for p in parts),
        all_to_all_ms=1e3 * sum(p[2] for p in parts),
    )


def speed_of_light_ms(
    s: LayerShape,
    hardware: str = "h200",
    *,
    dispatch: str = "bf16",
    routed_tflops: float | None = None,
    ranks_per_node: int | None = None,
) -> float:
    """The iteration's milliseconds at the peaks on the tracked GPU (see the module docstring)."""
    light = speed_of_light(
        s, hardware, dispatch=dispatch, routed_tflops=routed_tflops, ranks_per_node=ranks_per_node
    )
    return light.total_ms
