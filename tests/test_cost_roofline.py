"""The speed of light of the layer (pipeline/cost/roofline.py), against the bytes and FLOPs of seed
003's cases counted by hand at the presets' datasheet peaks."""

from __future__ import annotations

import pytest

from pipeline.base.gpu_presets import gpu_preset
from pipeline.cost import LayerShape, roofline

D, F, E, K = 8192, 2048, 256, 8


def seed_003(tokens: int, **change: object) -> LayerShape:
    fields = {"kind": "inference", "tokens": tokens, "d_model": D, "d_ff": F, "num_experts": E, "top_k": K}
    fields |= {"ep": 1, "precision": "bf16", "layer_loads": (1.0,), "num_shared": 0, "element_bytes": 2}
    return LayerShape(**{**fields, **change})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tokens", "preset", "bound"), [(1024, "h200", "memory"), (16384, "h200", "compute")]
)
def test_a_case_is_its_weights_tokens_and_routing_bytes_or_its_flops_at_the_peaks(tokens, preset, bound):
    weights = E * (2 * F * D + D * F) * 2  # every expert's W1 and W2 in BF16, streamed once
    moved = weights + 2 * tokens * D * 2 + tokens * K * (8 + 4)  # tokens in and out, the routing
    flops = 6 * tokens * K * D * F
    gpu = gpu_preset(preset)
    memory_ms = moved / (gpu.peak("hbm_tb_s") * 1e12) * 1e3
    compute_ms = flops / (gpu.peak("bf16_tflops") * 1e12) * 1e3
    got = roofline(seed_003(tokens), preset)
    assert (got.bytes, got.flops) == (pytest.approx(moved, rel=1e-12), pytest.approx(flops, rel=1e-12))
    assert got.ms == pytest.approx(max(memory_ms, compute_ms), rel=1e-12) and got.bound == bound
    assert got.memory_ms == pytest.approx(memory_ms) and got.compute_ms == pytest.approx(compute_ms)


def test_what_else_a_layer_must_do_adds_to_it():
    base = roofline(seed_003(4096), "gb300")
    shared = roofline(seed_003(4096, num_shared=1), "gb300")
    assert shared.bytes - base.bytes == pytest.approx(3 * F * D * 2)  # its weights, once
    assert shared.flops - base.flops == pytest.approx(6 * 4096 * D * F)
    ep8 = roofline(seed_003(4096, ep=8), "gb300")  # an eighth of the experts, rows exchanged
    rows = 4096 * K
    assert ep8.bytes == pytest.approx(base.bytes - E * 7 / 8 * 3 * F * D * 2 + 2 * rows * D * 2 * 7 / 8)
    mx = roofline(seed_003(4096, precision="mxfp8"), "gb300")  # one byte and a scale per 32
    assert base.bytes - mx.bytes == pytest.approx(E * 3 * F * D * (2 - 33 / 32))
    training = roofline(seed_003(4096, kind="training"), "gb300")
    assert (training.flops, training.ms) == (pytest.approx(3 * base.flops), pytest.approx(3 * base.ms))
    hot = roofline(seed_003(4096, ep=8, layer_loads=(2.0,)), "gb300")
    assert hot.flops == pytest.approx(2 * ep8.flops)  # the busiest GPU's rows
