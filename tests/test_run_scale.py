"""Scales: launched ranks, tokens per rank, and rank 0 receiving f x the balanced rows."""

import math

import pytest
import torch

from pipeline.bench.work import routing_plans
from pipeline.matrix import WORKLOAD_BY_NAME, WORKLOADS
from pipeline.matrix.scale import Scale, shape_for

CPU = Scale("cpu", 64, 224, 48, 384, 6, 1, 2, "float32", 1, 5, 2)
CI = Scale("ci", 16, 64, 48, 384, 6, 1, 2, "float32", 1, 5, 2)


def received_per_rank(shape, plan) -> list[int]:
    """Rows each rank's experts receive, counted from every source rank's routing (independently of
    the plan's own bookkeeping)."""
    local = shape.layer_experts // shape.ranks
    counts = torch.zeros(shape.ranks, dtype=torch.int64)
    for source in range(shape.ranks):
        idx, weight = plan.for_rank(source)
        assert idx.shape == (shape.tokens, shape.top_k)
        assert torch.allclose(weight.sum(1), torch.ones(shape.tokens))
        counts += torch.bincount(idx.reshape(-1) // local, minlength=shape.ranks)
    return counts.tolist()


@pytest.mark.parametrize("scale", [CPU, CI], ids=lambda s: s.name)
@pytest.mark.parametrize("name", [w.name for w in WORKLOADS if w.kind != "inference"])
def test_rank0_receives_f_times_balanced_rows(scale, name):
    workload = WORKLOAD_BY_NAME[name]
    shape = shape_for(workload, scale)
    balanced = scale.tokens * scale.top_k  # T x K of the nominal tokens per GPU
    for f, plan in zip(workload.layer_loads, routing_plans(shape, seed=3), strict=True):
        got = received_per_rank(shape, plan)
        assert got[0] == round(f * balanced)
        assert sum(got) == shape.ranks * shape.tokens * shape.top_k


@pytest.mark.parametrize(
    "name", ["inference-ep8-f3072-imb2", "training-ep64-f3072-imb2", "training-ep32-f1536"]
)
def test_other_ranks_keep_their_full_scale_load(name):
    workload = WORKLOAD_BY_NAME[name]
    shape = shape_for(workload, CPU)
    (f,) = workload.layer_loads
    (plan,) = routing_plans(shape, seed=0)
    others = received_per_rank(shape, plan)[1:]
    full_scale = (workload.ep - f) / (workload.ep - 1) * CPU.tokens * CPU.top_k
    # T' is the fewest tokens that carry these loads: one token fewer could not.
    assert all(full_scale <= o < full_scale + shape.ranks * shape.top_k for o in others)


def test_full_rank_count_feeds_the_nominal_tokens():
    for workload in WORKLOADS:
        shape = shape_for(workload, Scale("full", 2048, 7168, 1, 384, 6, 1, None, "bfloat16", 10, 5, 30))
        assert (shape.ranks, shape.tokens, shape.layer_experts) == (workload.ep, 2048, 384)
        assert shape.d_ff == workload.d_ff and shape.budget_scale == 1.0


def test_cpu_scale_shrinks_dims_and_keeps_local_experts():
    shape = shape_for(WORKLOAD_BY_NAME["training-ep32-f6144"], CPU)
    assert (shape.d_model, shape.d_ff, shape.ranks, shape.ep) == (224, 128, 2, 32)
    assert shape.layer_experts == 2 * 384 // 32


def test_single_rank_mode_sends_every_row_to_rank_0():
    shape = shape_for(WORKLOAD_BY_NAME["training-ep32-f3072-imb2"], Scale(**{**vars(CPU), "max_ranks": 1}))
    assert (shape.ranks, shape.tokens, shape.tracked_rows) == (1, 128, (128 * 6,))
    assert math.isclose(shape.budget_scale, 0.5)


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        (
            "training-ep64-f3072",
            {"num_experts": 96},
            "cannot hold EP64: num_experts 96 is not a multiple of 64",
        ),
        (
            "training-ep64-f3072",
            {"num_experts": 128},
            r"cannot hold EP64 on 2 rank\(s\): 4 experts < top_k 6",
        ),
        (
            "packing-ep64-profile-a",
            {"num_experts": 256},
            r"load 7.5 .* would need 2880 rows of 3228; allowed: 1076\.\.2152$",
        ),
        ("packing-ep32-profile-a", {"max_ranks": 1}, "unequal layer loads need max_ranks >= 2"),
        ("inference-ep8-f1536", {"d_model": 100}, "d_model 100 must be a multiple of 32"),
        ("inference-ep8-f1536", {"d_ff_divisor": 7}, "d_ff_divisor 7 does not divide d_ff 1536"),
        ("inference-ep8-f1536", {"dtype": "float16"}, "dtype 'float16'; allowed: bfloat16, float32"),
        ("inference-ep8-f1536", {"max_ranks": 0}, "max_ranks must be >= 1"),
    ],
)
def test_shapes_that_cannot_run_are_refused(name, change, message):
    with pytest.raises(ValueError, match=message):
        shape_for(WORKLOAD_BY_NAME[name], Scale(**{**vars(CPU), **change}))
