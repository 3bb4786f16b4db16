"""Logical byte model, useful work and predicted time of the project's layer."""

from __future__ import annotations

import random
import re

import pytest
import torch

from pipeline.matrix import WORKLOADS
from pipeline.model import HARDWARE, LayerShape, hardware_for_device, iteration_bytes, predict, predicted_ms

SMALL = dict(tokens=4, d_model=64, d_ff=32, num_experts=8, top_k=2, ep=2)


def test_bf16_forward_bytes_by_hand():
    # 8 routed rows (1.0 x 4 tokens x top-2), 4 local experts, one shared expert over 4 tokens.
    # Per row: x 64*2 + activation written 32*2 + read 32*2 + output 64*2 = 384 B.
    # Per weight set: (2*32*64 + 64*32) elements * 2 B = 12288 B.
    routed = 8 * 384 + 4 * 12288
    shared = 4 * 384 + 1 * 12288
    assert routed + shared == 66048
    assert iteration_bytes(LayerShape("inference", **SMALL, precision="bf16", layer_loads=[1.0])) == 66048
    assert iteration_bytes(LayerShape("training", **SMALL, precision="bf16", layer_loads=[1.0])) == 3 * 66048


def test_mxfp8_forward_bytes_by_hand():
    # MXFP8 row of 64 along K: 64 B + 2 scale bytes; of 32: 32 B + 1 scale byte. Output stays BF16.
    routed = 8 * (66 + 33 + 33 + 128) + 4 * (2 * 32 * 66 + 64 * 33)
    shared = 4 * 384 + 12288  # the shared expert stays BF16
    assert routed + shared == 41248
    assert iteration_bytes(LayerShape("inference", **SMALL, precision="mxfp8", layer_loads=[1.0])) == 41248


def test_packing_sums_three_forwards_per_layer_by_hand():
    # load 2.0 -> 16 routed rows, load 0.5 -> 4 routed rows; weights and shared expert as above.
    layer_hot = 16 * 384 + 4 * 12288 + 4 * 384 + 12288
    layer_cold = 4 * 384 + 4 * 12288 + 4 * 384 + 12288
    want = 3 * (layer_hot + layer_cold)
    assert want == 400896
    assert iteration_bytes(LayerShape("packing", **SMALL, precision="bf16", layer_loads=[2.0, 0.5])) == want


def _tensor_bytes(shape: tuple[int, ...], precision: str, *, k_dim: int) -> int:
    """Bytes of a real tensor layout: BF16, or E4M3 values + E8M0 scales per 32 along ``k_dim``."""
    if precision == "bf16":
        return torch.empty(shape, dtype=torch.bfloat16, device="meta").nbytes
    scales = list(shape)
    scales[k_dim] = -(-shape[k_dim] // 32)
    values = torch.empty(shape, dtype=torch.float8_e4m3fn, device="meta").nbytes
    return values + torch.empty(scales, dtype=torch.float8_e8m0fnu, device="meta").nbytes


@pytest.mark.parametrize("precision", ["bf16", "mxfp8"])
def test_bytes_match_tensor_layouts_on_random_shapes(precision):
    rng = random.Random(7)
    for _ in range(20):
        ep = rng.choice([1, 2, 4, 8])
        experts = ep * rng.randint(1, 6)
        t, d, f, k = 4 * rng.randint(1, 75), rng.randint(1, 200), rng.randint(1, 200), rng.randint(1, experts)
        load = rng.randint(0, 4 * ep) / 4  # quarters of 4*n tokens keep routed rows integral
        rows = int(load * t * k)
        local = experts // ep
        routed = (
            _tensor_bytes((rows, d), precision, k_dim=1)  # dispatched input rows
            + _tensor_bytes((local, 2 * f, d), precision, k_dim=2)  # W1 gate + up
            + 2 * _tensor_bytes((rows, f), precision, k_dim=1)  # activation written, read
            + _tensor_bytes((local, d, f), precision, k_dim=2)  # W2
            + _tensor_bytes((rows, d), "bf16", k_dim=1)  # expert output rows
        )
        shared = (
            2 * _tensor_bytes((t, d), "bf16", k_dim=1)
            + 2 * _tensor_bytes((t, f), "bf16", k_dim=1)
            + _tensor_bytes((2 * f, d), "bf16", k_dim=1)
            + _tensor_bytes((d, f), "bf16", k_dim=1)
        )
        got = iteration_bytes(LayerShape("inference", t, d, f, experts, k, ep, precision, [load]))
        assert got == pytest.approx(routed + shared, rel=1e-12), (t, d, f, experts, k, ep, load)


def test_prediction_parts_by_hand_on_h200():
    hw = HARDWARE["h200"]
    t, d, f, e, k, ep = 2048, 7168, 3072, 384, 6, 8
    p = predict(LayerShape("inference", t, d, f, e, k, ep, "bf16", [1.0]), hardware="h200")
    gemm_s = 6 * t * k * d * f / (hw.bf16_tflops * 1e12) + 6 * t * d * f / (hw.bf16_tflops * 1e12)
    assert p.gemm_ms == pytest.approx(1e3 * gemm_s, rel=1e-12)
    hbm_s = iteration_bytes(LayerShape("inference", t, d, f, e, k, ep, "bf16", [1.0])) / (hw.hbm_tb_s * 1e12)
    assert p.hbm_ms == pytest.approx(1e3 * hbm_s, rel=1e-12)
    # dispatch (BF16) + combine (BF16) of the remote 7/8 of T*K rows of D values, one direction.
    a2a_s = t * k * 7 / 8 * d * (2 + 2) / (hw.nvlink_gb_s * 1e9)
    assert p.all_to_all_ms == pytest.approx(1e3 * a2a_s, rel=1e-12)
    assert p.total_ms == pytest.approx(max(p.gemm_ms, p.hbm_ms) + p.all_to_all_ms, rel=1e-12)
    assert predicted_ms(LayerShape("inference", t, d, f, e, k, ep, "bf16", [1.0])) == p.total_ms


def test_mxfp8_runs_routed_gemms_at_fp8_rate_and_fp8_dispatch_shrinks_the_wire():
    hw = HARDWARE["gb300"]
    t, d, f, e, k, ep = 2048, 7168, 3072, 384, 6, 32
    p = predict(LayerShape("training", t, d, f, e, k, ep, "mxfp8", [1.0]), hardware="gb300", dispatch="mxfp8")
    gemm_s = 3 * (6 * t * k * d * f / (hw.fp8_tflops * 1e12) + 6 * t * d * f / (hw.bf16_tflops * 1e12))
    assert p.gemm_ms == pytest.approx(1e3 * gemm_s, rel=1e-12)
    # forward: FP8 dispatch (7168 + 224 scale bytes) + BF16 combine; backward: two BF16 all-to-alls.
    a2a_s = t * k * 31 / 32 * ((d + d // 32) + 2 * d + 2 * 2 * d) / (hw.nvlink_gb_s * 1e9)
    assert p.all_to_all_ms == pytest.approx(1e3 * a2a_s, rel=1e-12)


def test_busiest_rank_sets_the_layer_time():
    # In EP2 a tracked load of 0.5 leaves 1.5 on the other rank: the same layer time as 1.5 here.
    args = ("inference", 64, 128, 64, 4, 2, 2, "bf16")
    assert predicted_ms(LayerShape(*args, [0.5])) == pytest.approx(
        predicted_ms(LayerShape(*args, [1.5])), rel=1e-12
    )
    assert predicted_ms(LayerShape(*args, [2.0])) > predicted_ms(LayerShape(*args, [1.5]))


def test_every_matrix_workload_has_bytes_and_a_prediction():
    for w in WORKLOADS:
        for precision in ("bf16", "mxfp8"):
            args = (w.kind, 2048, 7168, w.d_ff, 384, 6, w.ep, precision, w.layer_loads)
            assert iteration_bytes(LayerShape(*args)) > 0
            assert (
                0
                < predicted_ms(LayerShape(*args), hardware="gb300")
                < predicted_ms(LayerShape(*args), hardware="h200")
            )


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA GB300", "gb300"),
        ("cpu", None),
        ("NVIDIA H100 80GB HBM3", None),
        ("NVIDIA H200 NVL", None),
    ],
)
def test_hardware_for_device(name, key):
    assert hardware_for_device(name) == key


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"tokens": 0}, "tokens"),
        ({"d_model": -1}, "d_model"),
        ({"d_ff": 2.5}, "d_ff"),
        ({"top_k": 9}, "top_k"),
        ({"ep": 3}, "ep"),
        ({"precision": "fp16"}, "precision"),
        ({"kind": "decode"}, "kind"),
        ({"layer_loads": [1.0, 1.0]}, "layer_loads"),
        ({"layer_loads": [3.0]}, "layer_loads[0]"),
        ({"layer_loads": [-0.5]}, "layer_loads[0]"),
        ({"num_shared": -1}, "num_shared"),
        ({"hardware": "tpu"}, "hardware"),
        ({"dispatch": "fp4"}, "dispatch"),
    ],
)
def test_bad_inputs_name_the_input(change, named):
    args = dict(kind="inference", **SMALL, precision="bf16", layer_loads=[1.0]) | change
    options = {key: args.pop(key) for key in ("hardware", "dispatch") if key in args}
    with pytest.raises(ValueError, match=re.escape(named)):
        predicted_ms(LayerShape(**args), **options)
