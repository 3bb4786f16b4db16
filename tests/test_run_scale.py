"""Scales: launched ranks, tokens per rank per layer, and rank 0 receiving f x the balanced rows."""

import math

import pytest
import torch

from pipeline.bench.work import build_work, routing_plans
from pipeline.matrix import VARIANT_BY_NAME, WORKLOAD_BY_NAME, WORKLOADS, Execution
from pipeline.matrix.scale import Scale, shape_for

CPU = Scale("cpu", 64, 224, 48, 384, 6, 1, 2, "float32", 1, 5, 2)
CI = Scale("ci", 16, 64, 48, 384, 6, 1, 2, "float32", 1, 5, 2)


def received_per_rank(shape, layer, plan) -> list[int]:
    """Rows each rank's experts receive in one layer, counted from every source rank's routing
    (independently of the plan's own bookkeeping)."""
    local = shape.layer_experts // shape.ranks
    tokens = shape.layer_tokens[layer]
    counts = torch.zeros(shape.ranks, dtype=torch.int64)
    for source in range(shape.ranks):
        idx, weight = plan.for_rank(source)
        assert idx.shape == (tokens, shape.top_k)
        assert torch.allclose(weight.sum(1), torch.ones(tokens))
        counts += torch.bincount(idx.reshape(-1) // local, minlength=shape.ranks)
    return counts.tolist()


@pytest.mark.parametrize("scale", [CPU, CI], ids=lambda s: s.name)
@pytest.mark.parametrize("name", [w.name for w in WORKLOADS if w.kind != "inference"])
def test_rank0_receives_f_times_balanced_rows(scale, name):
    workload = WORKLOAD_BY_NAME[name]
    shape = shape_for(workload, scale)
    balanced = scale.tokens * scale.top_k  # T x K of the nominal tokens per GPU
    assert len(shape.layer_tokens) == len(workload.layer_loads)
    for layer, (f, plan) in enumerate(zip(workload.layer_loads, routing_plans(shape, seed=3), strict=True)):
        got = received_per_rank(shape, layer, plan)
        assert got[0] == round(f * balanced)
        assert sum(got) == shape.ranks * shape.layer_tokens[layer] * shape.top_k


@pytest.mark.parametrize(
    "name",
    [
        "inference-ep8-f3072-imb2.0",
        "training-ep64-f3072-imb2.0",
        "training-ep32-f1536",
        "packing-ep32-f3072-profile-a",
        "packing-ep64-f3072-profile-b",
    ],
)
def test_other_ranks_keep_their_full_scale_load_in_every_layer(name):
    workload = WORKLOAD_BY_NAME[name]
    shape = shape_for(workload, CPU)
    assert shape.ranks == 2
    balanced = CPU.tokens * CPU.top_k
    for layer, (f, plan) in enumerate(zip(workload.layer_loads, routing_plans(shape, seed=0), strict=True)):
        rank0, *others = received_per_rank(shape, layer, plan)
        assert rank0 == round(f * balanced)
        full_scale = (workload.ep - f) / (workload.ep - 1) * balanced
        # T'_l is the fewest tokens that carry these loads (one token fewer could not); rank 0's rows
        # are f*T*K rounded to a whole row.
        assert all(full_scale - 0.5 <= o < full_scale + shape.ranks * shape.top_k for o in others), (
            layer,
            f,
            others,
            full_scale,
        )


def test_packing_tokens_follow_each_layer_load():
    """Profile A on 2 ranks: each layer gets its own T'_l, so the cool layers are not fed the tokens
    of the 7.5x layer (which left rank 1 with ~2.6x rank 0's rows over the ten layers)."""
    workload = WORKLOAD_BY_NAME["packing-ep32-f3072-profile-a"]
    shape = shape_for(workload, CPU)
    assert shape.layer_tokens[0] == max(shape.layer_tokens) > 4 * CPU.tokens
    assert shape.layer_tokens[3] < 2 * CPU.tokens  # the 0.6x layer
    received = [received_per_rank(shape, i, p) for i, p in enumerate(routing_plans(shape, seed=1))]
    rank0, rank1 = (sum(r[k] for r in received) for k in (0, 1))
    full_scale = sum((32 - f) / 31 for f in workload.layer_loads) * CPU.tokens * CPU.top_k
    assert rank0 == sum(round(f * CPU.tokens * CPU.top_k) for f in workload.layer_loads)
    assert full_scale - 5 <= rank1 < full_scale + 10 * shape.ranks * shape.top_k
    assert rank1 < 0.5 * rank0  # the tracked rank is the hot one, as at full scale


def test_full_rank_count_feeds_the_nominal_tokens():
    for workload in WORKLOADS:
        shape = shape_for(workload, Scale("full", 2048, 7168, 1, 384, 6, 1, None, "bfloat16", 10, 5, 30))
        assert (shape.ranks, shape.layer_experts) == (workload.ep, 384)
        assert shape.layer_tokens == (2048,) * len(workload.layer_loads) and shape.d_ff == workload.d_ff


def test_cpu_scale_shrinks_dims_and_keeps_local_experts():
    shape = shape_for(WORKLOAD_BY_NAME["training-ep32-f6144"], CPU)
    assert (shape.d_model, shape.d_ff, shape.ranks, shape.ep) == (224, 128, 2, 32)
    assert shape.layer_experts == 2 * 384 // 32


def test_single_rank_mode_sends_every_row_to_rank_0():
    shape = shape_for(WORKLOAD_BY_NAME["training-ep32-f3072-imb2.0"], Scale(**{**vars(CPU), "max_ranks": 1}))
    assert (shape.ranks, shape.layer_tokens, shape.tracked_rows) == (1, (128,), (128 * 6,))


@pytest.mark.parametrize("scale", [CPU, CI], ids=lambda s: s.name)
def test_single_rank_mode_runs_packing_profiles(scale):
    workload = WORKLOAD_BY_NAME["packing-ep32-f3072-profile-b"]
    shape = shape_for(workload, Scale(**{**vars(scale), "max_ranks": 1}))
    tokens = tuple(round(f * scale.tokens) for f in workload.layer_loads)
    assert (shape.ranks, shape.layer_tokens) == (1, tokens)
    assert shape.tracked_rows == tuple(t * scale.top_k for t in tokens)
    for layer, plan in enumerate(routing_plans(shape, seed=2)):
        assert received_per_rank(shape, layer, plan) == [tokens[layer] * scale.top_k]


def test_layers_size_budgets_for_the_nominal_tokens():
    """One rank, profile B at ci: every layer takes its own T'_l rows, and MoK's budget stays
    2.5 x T x K rounded up to a power of two (256 rows of T x K = 96), the factor reported as is."""
    execution = Execution(WORKLOAD_BY_NAME["packing-ep32-f3072-profile-b"], VARIANT_BY_NAME["mok-bf16"])
    shape = shape_for(execution.workload, Scale(**{**vars(CI), "max_ranks": 1}))
    work = build_work(execution, shape, rank=0, device=torch.device("cpu"), seed=0)
    assert [x.shape[0] for x in work.xs] == list(shape.layer_tokens)
    assert work.grads is not None and [g.shape[0] for g in work.grads] == list(shape.layer_tokens)
    states = work.saved_state()
    assert [s.routed_rows for s in states] == list(shape.tracked_rows)
    assert {s.budget_rows for s in states} == {256}
    assert all(math.isclose(s.factor, 256 / 96) for s in states)
    assert [s.recomputed_rows for s in states] == [max(0, r - 256) for r in shape.tracked_rows]


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
            "packing-ep64-f3072-profile-a",
            {"num_experts": 256},
            r"load 7.5 .* would need 2880 rows of 3228; allowed: 1076\.\.2152$",
        ),
        ("inference-ep8-f1536", {"d_model": 100}, "d_model 100 must be a multiple of 32"),
        ("inference-ep8-f1536", {"d_ff_divisor": 7}, "d_ff_divisor 7 does not divide d_ff 1536"),
        ("inference-ep8-f1536", {"dtype": "float16"}, "dtype 'float16'; allowed: bfloat16, float32"),
        ("inference-ep8-f1536", {"max_ranks": 0}, "max_ranks must be >= 1"),
    ],
)
def test_shapes_that_cannot_run_are_refused(name, change, message):
    with pytest.raises(ValueError, match=message):
        shape_for(WORKLOAD_BY_NAME[name], Scale(**{**vars(CPU), **change}))
