"""Seed 003's naive formulation (pipeline/bench/naive.py) and the gate's ``case`` check built on it.

The formulation is checked against a token-by-token float64 sum written here (y[t] = sum_k w[t,k]
FFN_{idx[t,k]}(x[t])); the real layer's forward of seeded tokens, with experts left without tokens,
ragged groups and an overloaded rank, is checked against the formulation on one rank and on two gloo
ranks (where a rank draws the other rank's experts again from their seeds); and a layer that
computes wrongly is caught.
"""

from __future__ import annotations

import pytest
import torch

from pipeline.bench.naive import case_error, naive_forward
from pipeline.bench.sanity import tolerance
from pipeline.moe import ExpertWeights, MoEConfig, build_layer
from pipeline.tools.ranks import run_ranks

D, F, E, K, T = 64, 32, 8, 3, 40
EMPTY = (3, 7)  # experts no token is routed to


def config(implementation: str = "dist-moe", pipeline: str = "bf16", precision: str = "bf16") -> MoEConfig:
    return MoEConfig(
        d_model=D, d_ff=F, num_experts=E, top_k=K, num_shared=0, implementation=implementation,
        pipeline=pipeline, precision=precision, dtype=torch.float32,
    )  # fmt: skip


def routing(gen: torch.Generator, tokens: int, favoured: range) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct experts per token, none to :data:`EMPTY`, ``favoured`` ones four times as likely
    (ragged groups, an overloaded rank); softmax weights."""
    probs = torch.ones(E, dtype=torch.float64)
    probs[list(favoured)] = 4.0
    probs[list(EMPTY)] = 0.0
    idx = torch.stack([torch.multinomial(probs, K, generator=gen) for _ in range(tokens)])
    return idx, torch.softmax(torch.randn(tokens, K, generator=gen), dim=-1)


def token_by_token(x, idx, weight, w1, w2) -> torch.Tensor:
    """y[t] = sum_k w[t,k] W2_e (silu(W1g_e x[t]) * W1u_e x[t]), e = idx[t,k], one token at a time."""
    y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(idx.shape[1]):
            e = int(idx[t, k])
            h = w1[e].double() @ x[t].double()
            y[t] += float(weight[t, k]) * (w2[e].double() @ (torch.nn.functional.silu(h[:F]) * h[F:]))
    return y


def test_the_formulation_is_the_sum_over_a_tokens_experts(torch_rng):
    x = torch.randn(T, D, generator=torch_rng)
    idx, weight = routing(torch_rng, T, range(0, 2))
    w = ExpertWeights.random(config(), seed=int(torch.randint(0, 1000, (1,), generator=torch_rng)))
    shared = (w.shared_w1, w.shared_w2)  # none: seed 003's layer has no shared expert
    got = naive_forward(x, idx, weight, lambda e: (w.w1[e], w.w2[e]), shared)
    want = token_by_token(x, idx, weight, w.w1, w.w2)
    assert torch.linalg.vector_norm(got - want) <= 1e-12 * torch.linalg.vector_norm(want)
    assert all(not (idx == e).any() for e in EMPTY)  # the case has experts without a token


def test_the_layer_matches_the_formulation_and_a_wrong_layer_does_not(torch_rng, monkeypatch):
    cfg = config()
    layer = build_layer(cfg, ExpertWeights.random(cfg, seed=5))
    x = torch.randn(T, D, generator=torch_rng)
    idx, weight = routing(torch_rng, T, range(0, 2))
    tol = tolerance(cfg.dtype, cfg.precision, 32 * K * F)
    assert case_error(layer, x, idx, weight, seed=5) <= tol

    import pipeline.moe.layer as layer_module

    combine = layer_module.combine
    monkeypatch.setattr(layer_module, "combine", lambda *a, **k: combine(*a, **k) * (1 + 1e-3))
    assert case_error(layer, x, idx, weight, seed=5) > tol


@pytest.mark.parametrize(("precision", "pipeline"), [("mxfp8", "fp8-dispatch")])
def test_mxfp8_operands_take_the_values_the_layer_quantizes_them_to(torch_rng, precision, pipeline):
    cfg = config(precision=precision, pipeline=pipeline)
    layer = build_layer(cfg, ExpertWeights.random(cfg, seed=9))
    x = torch.randn(T, D, generator=torch_rng)
    idx, weight = routing(torch_rng, T, range(4, 6))
    assert case_error(layer, x, idx, weight, seed=9) <= tolerance(cfg.dtype, precision, 32 * K * F)


def _two_ranks(rank: int, world: int) -> tuple[float, float]:
    """Rank r's case error, its tokens routed mostly to rank 0's experts, then again once rank 1's
    weights are no longer the drawn ones, which rank 0's reference, drawing them again, must catch."""
    cfg = config()
    layer = build_layer(cfg, ExpertWeights.local(cfg, rank, world, seed=11))
    gen = torch.Generator().manual_seed(300 + rank)
    x = torch.randn(T + 8 * rank, D, generator=gen)
    idx, weight = routing(gen, T + 8 * rank, range(0, E // world))
    clean = case_error(layer, x, idx, weight, seed=11)
    if rank == 1:
        with torch.no_grad():
            layer.w1.mul_(1.01)
    return clean, case_error(layer, x, idx, weight, seed=11)


@pytest.mark.slow
def test_on_two_ranks_each_checks_its_tokens_against_experts_drawn_again():
    tol = tolerance(torch.float32, "bf16", 32 * K * F)
    (clean0, corrupt0), (clean1, _) = run_ranks(2, _two_ranks)
    assert max(clean0, clean1) <= tol
    assert corrupt0 > tol  # rank 0's tokens through rank 1's experts
