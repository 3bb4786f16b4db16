"""The speed of light of the project's layer: the least time its work can take on one GPU at the
device's datasheet peaks, the roofline that seed 003's records measure their %SOL against.

What one layer forward must do on the busiest GPU (load g of the balanced T x K routed rows, as
:func:`pipeline.cost.speed_of_light.busiest_load` takes it) and nothing more:

- **bytes**: its experts' weights streamed once (E/EP routed experts of W1 [2F, D] and W2 [D, F],
  in the layer dtype, or MXFP8 with one scale byte per 32 along K; the S shared experts' in the layer
  dtype), its T tokens read once and its T outputs written once (the layer dtype), the routing read
  once (an int64 index and a float32 weight per routed row), and, across EP ranks, the rows it
  receives from the others and returns to them (written by the links, read once; returned once);
- **FLOPs**: 6 g T K D F for the routed experts (three GEMMs, 2 FLOPs per multiply-add) at the dense
  tensor peak of the precision, 6 T S D F for the shared ones at the BF16 peak.

The layer's time is the larger of its compute time and its memory time, summed over the timed layers;
a backward counts 3x the forward (the report's coarse model, as the byte model). Neither padding nor
the intermediate activations (a fused kernel keeps them on chip) nor communication time is in it: it
is a bound no implementation beats, tighter than the layer's speed of light
(:mod:`pipeline.cost.speed_of_light`), which counts the implementation's passes over memory and its
communication.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.base.gpu_presets import GpuPreset
from pipeline.cost.hardware import preset
from pipeline.cost.layer_cost import LayerShape, row_bytes
from pipeline.cost.speed_of_light import busiest_load

ROUTING_BYTES = 8 + 4  # per routed row: an int64 expert index and a float32 weight


@dataclass(frozen=True)
class Roofline:
    """The speed of light of one timed iteration and what bounds it (summed over the timed layers)."""

    flops: float
    bytes: float
    compute_ms: float  # FLOPs at the tensor peaks
    memory_ms: float  # bytes at the HBM peak
    ms: float  # sum over layers of max(compute, memory)

    @property
    def bound(self) -> str:
        """``compute`` or ``memory``: what bounds the iteration."""
        return "compute" if self.compute_ms >= self.memory_ms else "memory"


def forward_bytes(s: LayerShape, load: float) -> float:
    """The bytes one layer forward must move on a GPU whose routed rows are ``load`` x T x K."""
    d, f, e = s.d_model, s.d_ff, float(s.element_bytes)
    rows = load * s.tokens * s.top_k
    weight = e if s.precision == "bf16" else row_bytes(d, s.precision) / d  # bytes per weight element
    routed = s.num_experts / s.ep * 3 * f * d * weight
    shared = s.num_shared * 3 * f * d * e
    tokens = 2 * s.tokens * d * e
    exchanged = 2 * rows * d * e * (s.ep - 1) / s.ep
    return routed + shared + tokens + rows * ROUTING_BYTES + exchanged


def forward_flops(s: LayerShape, load: float) -> tuple[float, float]:
    """(routed, shared) FLOPs of one layer forward on a GPU whose routed rows are ``load`` x T x K."""
    per_row = 6.0 * s.d_model * s.d_ff
    return per_row * load * s.tokens * s.top_k, per_row * s.num_shared * s.tokens


def roofline(s: LayerShape, hardware: str | GpuPreset) -> Roofline:
    """The roofline of one timed iteration of ``s`` on ``hardware`` (a preset or its name)."""
    hw = preset(hardware) if isinstance(hardware, str) else hardware
    flops = moved = compute = memory = total = 0.0
    for load in s.layer_loads:
        g = busiest_load(load, s.ep)
        routed, shared = (s.forward_equivalents * x for x in forward_flops(s, g))
        layer_bytes = s.forward_equivalents * forward_bytes(s, g)
        layer_compute = 1e3 * (
            routed / (hw.tensor_tflops(s.precision) * 1e12) + shared / (hw.peak("bf16_tflops") * 1e12)
        )
        layer_memory = 1e3 * layer_bytes / (hw.peak("hbm_tb_s") * 1e12)
        flops, moved = flops + routed + shared, moved + layer_bytes
        compute, memory = compute + layer_compute, memory + layer_memory
        total += max(layer_compute, layer_memory)
    return Roofline(flops=flops, bytes=moved, compute_ms=compute, memory_ms=memory, ms=total)
