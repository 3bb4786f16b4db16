"""Routing plans realize the tracked-GPU load exactly; caller routing is validated."""

from __future__ import annotations

import pytest
import torch

from pipeline.moe import routing_plan, validate_routing


def _received(plan) -> torch.Tensor:
    """Rows each rank receives, counted from the plan's expert ids (independent of send_matrix)."""
    local = plan.num_experts // plan.world_size
    got = torch.zeros(plan.world_size, dtype=torch.int64)
    for r in range(plan.world_size):
        idx, _ = plan.for_rank(r)
        got += torch.bincount(idx.flatten() // local, minlength=plan.world_size)
    return got


@pytest.mark.parametrize(
    ("tokens", "experts", "top_k", "world", "factor"),
    [
        (64, 24, 6, 4, 2.0),
        (2048, 384, 6, 8, 2.0),
        (128, 192, 6, 32, 7.5),
        (50, 64, 6, 16, 0.6),
        (40, 12, 3, 1, 1.0),
    ],
)
def test_rank0_receives_factor_times_balanced_rows(tokens, experts, top_k, world, factor) -> None:
    plan = routing_plan(tokens, experts, top_k, world, factor, seed=5)
    got = _received(plan)
    balanced = tokens * top_k
    assert int(got[0]) == round(factor * balanced)
    assert int(got.sum()) == world * balanced
    if world > 1:
        others = got[1:]
        assert int(others.max() - others.min()) <= 1
    assert got.tolist() == plan.received_rows


def test_distinct_experts_weights_and_determinism() -> None:
    plan = routing_plan(256, 48, 6, 4, 2.5, seed=11)
    idx, weight = plan.for_rank(2)
    assert idx.shape == (256, 6) and idx.dtype == torch.int64 and weight.dtype == torch.float32
    assert bool((idx.sort(dim=1).values.diff(dim=1) > 0).all())
    torch.testing.assert_close(weight.sum(dim=1), torch.ones(256))
    again = routing_plan(256, 48, 6, 4, 2.5, seed=11).for_rank(2)
    assert torch.equal(idx, again[0]) and torch.equal(weight, again[1])
    other = routing_plan(256, 48, 6, 4, 2.5, seed=12).for_rank(2)
    assert not torch.equal(idx, other[0])


def test_for_rank_range() -> None:
    with pytest.raises(ValueError, match="rank 4 out of range"):
        routing_plan(8, 8, 2, 4).for_rank(4)


@pytest.mark.parametrize(
    ("idx", "weight", "message"),
    [
        (torch.tensor([[0, 1], [2, 8]]), torch.ones(2, 2), "expert id 8 out of range; allowed: 0..7"),
        (torch.tensor([[0, 1], [-1, 2]]), torch.ones(2, 2), "expert id -1 out of range"),
        (torch.tensor([[0, 1], [3, 3]]), torch.ones(2, 2), "token 1 routes to expert ids \\[3, 3\\]"),
        (torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), torch.ones(2, 2), "topk_idx must be int64"),
        (
            torch.tensor([[0, 1], [2, 3]]),
            torch.ones(2, 2, dtype=torch.float64),
            "topk_weight must be float32",
        ),
        (torch.tensor([[0, 1, 2], [2, 3, 4]]), torch.ones(2, 3), "topk_idx must have shape \\[2, 2\\]"),
        (torch.tensor([[0, 1], [2, 3]]), torch.ones(3, 2), "topk_weight must have shape \\[2, 2\\]"),
    ],
)
def test_validate_routing_names_the_problem(idx, weight, message) -> None:
    with pytest.raises(ValueError, match=message):
        validate_routing(idx, weight, num_tokens=2, num_experts=8, top_k=2)


@pytest.mark.parametrize(("world", "factor"), [(4, 2.0), (8, 7.5), (1, 1.0)])
def test_what_one_rank_receives_is_what_the_sources_route_to_it(world: int, factor: float) -> None:
    """``sent_to`` (what one destination receives, drawing that destination's permutations only) is
    the count of each source's own routing to that destination's experts."""
    plan = routing_plan(96, 48, 6, world, factor, seed=4)
    local = plan.local_experts
    for source in range(world):
        idx, _ = plan.for_rank(source)
        counts = torch.bincount(idx.flatten(), minlength=plan.num_experts).view(world, local)
        for dest in range(world):
            assert torch.equal(plan.sent_to(source, dest), counts[dest]), (source, dest)
