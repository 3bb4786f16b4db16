"""Logical byte model, useful work and predicted time of the project's layer."""

from __future__ import annotations

import re

import pytest

from pipeline.cost import (
    HARDWARE,
    GemmRate,
    KernelRates,
    LayerShape,
    expected_phases,
    hardware_for_device,
    iteration_bytes,
    phase_work,
    speed_of_light,
    speed_of_light_ms,
)
from pipeline.cost.layer_cost import forward_bytes, forward_terms
from pipeline.cost.speed_of_light import inter_node_share
from pipeline.matrix import WORKLOADS

SMALL = dict(tokens=4, d_model=64, d_ff=32, num_experts=8, top_k=2, ep=2)


def test_bf16_forward_bytes_by_hand():
    # Cluster-average GPU: R = 1.0 x 4 tokens x top-2 = 8 routed rows, 4 local experts, BF16 (2 B).
    terms = {
        "dispatch_gather": 4 * 64 * 2 + 8 * 128,  # read T token rows, write R send rows
        "dispatch_all_to_all": 8 * 128 * 4,  # send read, receive write, regroup read + write
        "quantize_rows": 0,
        "gemm1": 8 * 128 + 4 * (64 * 64 * 2) + 8 * 64 * 2,  # rows, W1 [2F, D] sets, 2F-wide output
        "swiglu": 8 * (64 * 2 + 32 * 2),
        "quantize_activation": 0,
        "gemm2": 8 * 64 + 4 * (64 * 32 * 2) + 8 * 128,
        "combine": 2 * 8 * 128 + 8 * 128 + 4 * 64 * 4,  # staging, scatter-add into float32 tokens
        "shared_expert": (4 * 128 + 64 * 64 * 2 + 4 * 128) + 4 * 3 * 64 + (4 * 64 + 64 * 32 * 2 + 4 * 128),
    }
    shape = LayerShape("inference", **SMALL, precision="bf16", layer_loads=[1.0])
    assert forward_terms(shape, 1.0) == terms
    assert sum(terms.values()) == 78848
    assert iteration_bytes(shape) == 78848
    assert iteration_bytes(LayerShape("training", **SMALL, precision="bf16", layer_loads=[1.0])) == 3 * 78848


def test_mxfp8_forward_bytes_by_hand():
    # MXFP8 operand row of 64 along K: 64 B + 2 scale bytes; of 32: 32 B + 1. Outputs stay in BF16.
    bf16_wire = 4 * 128 + 8 * 128 + 8 * 128 * 4
    rest = (
        8 * 66 + 4 * 64 * 66 + 8 * 128  # GEMM-1
        + 8 * 192  # SwiGLU
        + 8 * (64 + 33)  # activation quantized
        + 8 * 33 + 4 * 64 * 33 + 8 * 128  # GEMM-2
        + 4096  # combine
        + 14848  # the shared expert stays BF16
    )  # fmt: skip
    shape = LayerShape("inference", **SMALL, precision="mxfp8", layer_loads=[1.0])
    assert iteration_bytes(shape, "bf16") == bf16_wire + 8 * (128 + 66) + rest == 56624  # rows quantized
    fp8_wire = 4 * 128 + 8 * 66 + 8 * 66 * 4  # rows travel (and arrive) in MXFP8
    assert iteration_bytes(shape, "mxfp8") == fp8_wire + rest == 52592


def test_one_convention_the_cluster_average_gpu():
    """Bytes are the average GPU's, as useful TFLOP/s counts: the tracked load does not change them;
    packing counts 3x forward for each layer."""
    one = iteration_bytes(LayerShape("training", **SMALL, precision="bf16", layer_loads=[1.0]))
    assert iteration_bytes(LayerShape("training", **SMALL, precision="bf16", layer_loads=[2.0])) == one
    packing = LayerShape("packing", **SMALL, precision="bf16", layer_loads=[2.0, 0.5, 1.5])
    assert iteration_bytes(packing) == 3 * one
    # the hot GPU's forward, which the prediction uses, moves more
    assert forward_bytes(packing, 2.0) > forward_bytes(packing, 1.0) > forward_bytes(packing, 0.5)
    fp32 = LayerShape("training", **SMALL, precision="bf16", layer_loads=[1.0], element_bytes=4)
    assert iteration_bytes(fp32) > one


def test_speed_of_light_parts_by_hand_on_h200():
    hw = HARDWARE["h200"]
    t, d, f, e, k, ep = 2048, 7168, 3072, 384, 6, 8
    p = speed_of_light(LayerShape("inference", t, d, f, e, k, ep, "bf16", [1.0]), hardware="h200")
    gemm_s = 6 * t * k * d * f / (hw.peak("bf16_tflops") * 1e12) + 6 * t * d * f / (
        hw.peak("bf16_tflops") * 1e12
    )
    assert p.gemm_ms == pytest.approx(1e3 * gemm_s, rel=1e-12)
    hbm_s = iteration_bytes(LayerShape("inference", t, d, f, e, k, ep, "bf16", [1.0])) / (
        hw.peak("hbm_tb_s") * 1e12
    )
    assert p.hbm_ms == pytest.approx(1e3 * hbm_s, rel=1e-12)
    # dispatch (BF16) + combine (BF16) of the remote 7/8 of T*K rows of D values, one direction.
    a2a_s = t * k * 7 / 8 * d * (2 + 2) / (hw.peak("nvlink_gb_s") * 1e9)
    assert p.all_to_all_ms == pytest.approx(1e3 * a2a_s, rel=1e-12)
    assert p.total_ms == pytest.approx(max(p.gemm_ms, p.hbm_ms) + p.all_to_all_ms, rel=1e-12)
    assert speed_of_light_ms(LayerShape("inference", t, d, f, e, k, ep, "bf16", [1.0])) == p.total_ms


def test_rows_that_leave_the_nvlink_domain_take_the_inter_node_link():
    """EP32 on h200 spans 4 nodes of one 8-GPU NVLink domain each: of a rank's 31 remote destinations 24
    are on other nodes, whose rows take InfiniBand (50 GB/s) while the other 7 take NVLink (450 GB/s), at
    once; on gb300 the same group stays in one NVLink domain."""
    hw = HARDWARE["h200"]
    t, d, f, e, k, ep = 2048, 7168, 3072, 384, 6, 32
    p = speed_of_light(LayerShape("inference", t, d, f, e, k, ep, "bf16", [1.0]), hardware="h200")
    remote = t * k * 31 / 32 * d * (2 + 2)
    nvlink_s = remote * 7 / 31 / (hw.peak("nvlink_gb_s") * 1e9)
    inter_node_s = remote * 24 / 31 / (hw.link("inter_node_gb_s") * 1e9)
    assert hw.link("inter_node_gb_s") == 50 and inter_node_s > nvlink_s
    assert p.all_to_all_ms == pytest.approx(1e3 * inter_node_s, rel=1e-12)
    assert inter_node_share(hw.span(ep)) == 24 / 31 and inter_node_share(hw.span(8)) == 0.0
    gb300 = speed_of_light(LayerShape("inference", t, d, f, e, k, 64, "bf16", [1.0]), hardware="gb300")
    assert inter_node_share(HARDWARE["gb300"].span(64)) == 0.0
    assert gb300.all_to_all_ms == pytest.approx(
        1e3 * t * k * 63 / 64 * d * 4 / (HARDWARE["gb300"].peak("nvlink_gb_s") * 1e9), rel=1e-12
    )


def test_mxfp8_runs_routed_gemms_at_fp8_rate_and_fp8_dispatch_shrinks_the_wire():
    hw = HARDWARE["gb300"]
    t, d, f, e, k, ep = 2048, 7168, 3072, 384, 6, 32
    p = speed_of_light(
        LayerShape("training", t, d, f, e, k, ep, "mxfp8", [1.0]), hardware="gb300", dispatch="mxfp8"
    )
    gemm_s = 3 * (
        6 * t * k * d * f / (hw.peak("fp8_tflops") * 1e12) + 6 * t * d * f / (hw.peak("bf16_tflops") * 1e12)
    )
    assert p.gemm_ms == pytest.approx(1e3 * gemm_s, rel=1e-12)
    # forward: FP8 dispatch (7168 + 224 scale bytes) + BF16 combine; backward: two BF16 all-to-alls.
    a2a_s = t * k * 31 / 32 * ((d + d // 32) + 2 * d + 2 * 2 * d) / (hw.peak("nvlink_gb_s") * 1e9)
    assert p.all_to_all_ms == pytest.approx(1e3 * a2a_s, rel=1e-12)


def test_busiest_rank_sets_the_layer_time():
    # In EP2 a tracked load of 0.5 leaves 1.5 on the other rank: the same layer time as 1.5 here.
    args = ("inference", 64, 128, 64, 4, 2, 2, "bf16")
    assert speed_of_light_ms(LayerShape(*args, [0.5])) == pytest.approx(
        speed_of_light_ms(LayerShape(*args, [1.5])), rel=1e-12
    )
    assert speed_of_light_ms(LayerShape(*args, [2.0])) > speed_of_light_ms(LayerShape(*args, [1.5]))


def test_every_matrix_workload_has_bytes_and_a_speed_of_light():
    for w in WORKLOADS:
        for precision in ("bf16", "mxfp8"):
            args = (w.kind, 2048, 7168, w.d_ff, 384, 6, w.ep, precision, w.layer_loads)
            assert iteration_bytes(LayerShape(*args)) > 0
            assert (
                0
                < speed_of_light_ms(LayerShape(*args), hardware="gb300")
                < speed_of_light_ms(LayerShape(*args), hardware="h200")
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
        speed_of_light_ms(LayerShape(**args), **options)


def test_one_rank_moves_no_rows_between_ranks_and_two_move_half():
    """Communication that did not run is not predicted or counted: one launched rank stages nothing
    and sends nothing; two launched ranks of EP8 send the other's half, not 7/8."""
    t, d, f, e, k, ep = 2048, 7168, 3072, 384, 6, 8
    one = LayerShape("training", t, d, f, e, k, ep, "bf16", [1.0], ranks=1)
    two = LayerShape("training", t, d, f, e, k, ep, "bf16", [1.0], ranks=2)
    every = LayerShape("training", t, d, f, e, k, ep, "bf16", [1.0])
    assert speed_of_light(one).all_to_all_ms == 0.0
    assert forward_terms(one, 1.0)["dispatch_all_to_all"] == 0.0
    assert forward_terms(one, 1.0)["combine"] == t * k * d * 2 + t * d * 4.0  # the scatter-add only
    assert speed_of_light(two).all_to_all_ms == pytest.approx(
        speed_of_light(every).all_to_all_ms * (1 / 2) / (7 / 8)
    )
    assert iteration_bytes(one) < iteration_bytes(two) == iteration_bytes(every)
    work = phase_work(one, [t], [t * k])
    assert work["dispatch"].bytes == work["dispatch"].link_bytes == work["combine"].link_bytes == 0.0
    with pytest.raises(ValueError, match="ranks must be at most ep=8"):
        LayerShape("training", t, d, f, e, k, ep, "bf16", [1.0], ranks=9)


def test_phase_work_by_hand():
    """Each phase's FLOPs and bytes of one training layer, rank fed T = 4 tokens receiving R = 6 rows,
    4 local experts, BF16 (2 B), two ranks (half the rows are another's)."""
    s = LayerShape("training", **SMALL, precision="bf16", layer_loads=[1.0])
    t, r, d, f, sets = 4, 6, 64, 32, 4
    work = phase_work(s, [t], [r])
    assert work["fprop"].flops == work["dgrad"].flops == work["wgrad"].flops == 6 * r * d * f
    assert work["shared"].flops == 6 * t * d * f + 12 * t * d * f
    assert work["fprop"].bytes == (r * d * 2 + sets * 2 * f * d * 2 + r * 2 * f * 2) + (
        r * f * 2 + sets * d * f * 2 + r * d * 2
    )
    assert work["swiglu"].bytes == r * 3 * f * 2 + 6 * r * f * 2  # forward 2F in, F out; backward 6F
    assert work["dispatch"].link_bytes == r * d * 2 / 2 + r * d * 2 / 2  # forward rows, backward grads
    assert work["dispatch"].bytes == 4 * r * d * 2 + 4 * r * d * 2
    assert work["combine"].bytes == 2 * r * d * 2 + 2 * r * d * 2
    assert work["permute"].bytes == (t * d * 2 + r * d * 2 + r * d * 2 + t * d * 4) + (
        2 * r * d * 2 + t * d * 6
    )
    assert work["quantize"].bytes == 0 and work["other"] == work["other"].__class__()
    # the forward phases are the byte model's forward passes, split by phase
    forward = phase_work(LayerShape("inference", **SMALL, precision="mxfp8", layer_loads=[1.0]), [4], [8])
    one = LayerShape("inference", **SMALL, precision="mxfp8", layer_loads=[1.0])
    assert sum(w.bytes for w in forward.values()) == pytest.approx(forward_bytes(one, 1.0), rel=1e-12)


def test_the_speed_of_light_holds_emulated_mxfp8_to_the_bf16_peak():
    hw = HARDWARE["h200"]
    s = LayerShape("inference", 2048, 7168, 3072, 384, 6, 8, "mxfp8", [1.0], ranks=1)
    native = speed_of_light(s, "h200")
    emulated = speed_of_light(s, "h200", routed_tflops=hw.peak("bf16_tflops"))
    routed = 6 * 2048 * 6 * 7168 * 3072
    assert emulated.gemm_ms - native.gemm_ms == pytest.approx(
        1e3 * routed * (1 / (hw.peak("bf16_tflops") * 1e12) - 1 / (hw.peak("fp8_tflops") * 1e12)), rel=1e-9
    )


def test_the_expectation_feeds_the_cost_measured_rates_by_hand():
    """Each phase at the measured rates: GEMM-1's FLOPs (two thirds) at the up shape's rate and GEMM-2's
    at the down shape's, the shared expert at the dense rate, bytes at the HBM rate; one rank, so no
    communication; a shape not measured has no expectation."""
    s = LayerShape("training", 8, 64, 32, 8, 2, 2, "bf16", [1.0], ranks=1)
    rates = KernelRates(
        "GPU", "by hand", dense_tflops=2.0, hbm_gb_s=500.0, link_gb_s=None,
        gemms=tuple(
            GemmRate(op, 64, 32, 4, projection, rate)
            for op, (up, down) in {"fprop": (1.0, 0.5), "dgrad": (0.8, 0.4), "wgrad": (0.25, 0.2)}.items()
            for projection, rate in (("up", up), ("down", down))
        ),
    )  # fmt: skip
    t, r = 8, 20
    got = expected_phases(s, [t], [r], rates)
    assert got is not None
    flops = 6 * r * 64 * 32
    for phase, (up, down) in {"fprop": (1.0, 0.5), "dgrad": (0.8, 0.4), "wgrad": (0.25, 0.2)}.items():
        assert got[phase] == pytest.approx(1e3 * (flops * 2 / 3 / (up * 1e12) + flops / 3 / (down * 1e12)))
    work = phase_work(s, [t], [r])
    assert got["shared"] == pytest.approx(1e3 * work["shared"].flops / 2e12)
    assert got["swiglu"] == pytest.approx(1e3 * work["swiglu"].bytes / 500e9)
    assert got["dispatch"] == got["combine"] == 0.0 and got["other"] == 0.0
    assert (
        expected_phases(LayerShape("training", 8, 64, 64, 8, 2, 2, "bf16", [1.0], ranks=1), [t], [r], rates)
        is None
    )
    # rows that cross to another rank need a measured link rate
    assert expected_phases(LayerShape("training", 8, 64, 32, 8, 2, 2, "bf16", [1.0]), [t], [r], rates) is None
