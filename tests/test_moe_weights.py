"""Weights drawn per expert: a rank's own experts (the local form) are the full form's, at every EP
size, and a layer built from either is the same layer."""

from __future__ import annotations

import pytest
import torch

from pipeline.moe import ExpertWeights, MoEConfig, build_layer, routing_plan
from pipeline.tools.ranks import run_ranks
from tests.distributed import refusal

CFG = MoEConfig(d_model=64, d_ff=32, num_experts=8, top_k=2, num_shared=1, dtype=torch.float32)
NAMES = ("w1", "w2", "shared_w1", "shared_w2")


def _both_forms(rank: int, world: int) -> dict[str, torch.Tensor]:
    """This rank's layer built from the full weights and from its local ones: parameters and one
    forward on the same routed tokens."""
    full = build_layer(CFG, ExpertWeights.random(CFG, seed=7))
    mine = ExpertWeights.local(CFG, rank, world, seed=7)
    local = build_layer(CFG, mine)
    assert local.w1.data_ptr() == mine.w1.data_ptr()  # taken as drawn, not copied
    idx, weight = routing_plan(16, CFG.num_experts, CFG.top_k, world, 1.0, seed=3).for_rank(rank)
    x = torch.randn(16, CFG.d_model, generator=torch.Generator().manual_seed(rank))
    out = {
        f"{name}/{form}": getattr(layer, name).detach()
        for name in NAMES
        for form, layer in (("full", full), ("local", local))
    }
    return out | {"y/full": full(x, idx, weight).detach(), "y/local": local(x, idx, weight).detach()}


@pytest.mark.parametrize(
    "world", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)]
)
def test_local_and_full_forms_build_the_same_layer(world: int) -> None:
    ranks = run_ranks(world if world > 1 else 0, _both_forms)
    drawn = ExpertWeights.random(CFG, seed=7)  # here, in another process: an expert's values are its own
    for rank, got in enumerate(ranks):
        for name in (*NAMES, "y"):
            assert torch.equal(got[f"{name}/full"], got[f"{name}/local"]), (world, rank, name)
    for name in ("w1", "w2"):
        assert torch.equal(torch.cat([got[f"{name}/local"] for got in ranks]), getattr(drawn, name))
    for name in ("shared_w1", "shared_w2"):
        assert all(torch.equal(got[f"{name}/local"], getattr(drawn, name)) for got in ranks)


def test_every_expert_draws_alone() -> None:
    """An expert's values do not depend on which others are drawn with it, nor on the layer's other
    seeds; layers and seeds give other values."""
    full = ExpertWeights.random(CFG, seed=7, layer=2)
    last = ExpertWeights.local(CFG, 3, 4, seed=7, layer=2)
    assert torch.equal(last.w1, full.w1[6:]) and last.first == 6 and full.first is None
    assert not torch.equal(ExpertWeights.random(CFG, seed=7, layer=3).w1, full.w1)
    assert not torch.equal(ExpertWeights.random(CFG, seed=8, layer=2).w1, full.w1)
    assert abs(float(full.w1.std()) - CFG.d_model**-0.5) < 0.01  # fan-in scaling
    assert abs(float(full.w2.std()) - CFG.d_ff**-0.5) < 0.02
    # one expert drawn alone, as the correctness gate draws another rank's: its owner's very values
    for e in (0, 5, 7):
        w1, w2 = ExpertWeights.drawn(CFG, range(e, e + 1), seed=7, layer=2)
        assert torch.equal(w1[0], full.w1[e]) and torch.equal(w2[0], full.w2[e])
    bf16 = MoEConfig(d_model=64, d_ff=32, num_experts=8, top_k=2, dtype=torch.bfloat16)
    assert torch.equal(
        ExpertWeights.drawn(bf16, range(3, 4), seed=1)[1][0], ExpertWeights.random(bf16, seed=1).w2[3]
    )


def _wrong_rank(rank: int, world: int) -> str:
    return refusal(lambda: build_layer(CFG, ExpertWeights.local(CFG, (rank + 1) % world, world, seed=0)))


@pytest.mark.slow
def test_local_weights_of_another_rank_are_refused() -> None:
    messages = run_ranks(2, _wrong_rank)
    assert messages[0] == "weights hold experts from 4; rank 0 of 2 owns 0..3", messages
    with pytest.raises(ValueError, match=r"rank 4 out of range; allowed: 0\.\.3"):
        ExpertWeights.local(CFG, 4, 4)
