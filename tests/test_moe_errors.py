"""Bad input raises ValueError naming the value and what is allowed."""

from __future__ import annotations

import pytest
import torch

from pipeline.moe import ExpertWeights, MoEConfig, build_layer
from pipeline.tools.ranks import run_ranks
from tests.distributed import refusal

BASE = dict(d_model=64, d_ff=32, num_experts=8, top_k=2, dtype=torch.float32)
CASES = torch.Generator().manual_seed(0)  # the parametrized inputs' values, drawn once at collection


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(top_k=9), "top_k=9 exceeds num_experts=8; allowed: 1..8"),
        (dict(d_model=0), "d_model must be a positive int, got 0"),
        (
            dict(implementation="megablocks"),
            "implementation 'megablocks' is not allowed; allowed: mok, dist-moe",
        ),
        (dict(precision="fp4"), "precision 'fp4' is not allowed; allowed: bf16, mxfp8"),
        (
            dict(implementation="mok", pipeline="fp8-dispatch"),
            "pipeline 'fp8-dispatch' does not exist for mok bf16",
        ),
        (
            dict(implementation="dist-moe", precision="mxfp8", pipeline="bf16"),
            "allowed: fp8-dispatch, bf16-dispatch",
        ),
        (dict(dtype=torch.float16), "dtype torch.float16 is not allowed"),
        (dict(precision="mxfp8", d_model=48), "divisible by 32"),
        (dict(activation_factor=0.0), "activation_factor must be > 0"),
    ],
)
def test_config_errors(overrides, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MoEConfig(**{**BASE, **overrides})


def _layer():
    cfg = MoEConfig(**BASE)
    return build_layer(cfg, ExpertWeights.random(cfg))


@pytest.mark.parametrize(
    ("x", "idx", "message"),
    [
        (
            torch.randn(4, 63, generator=CASES),
            torch.tensor([[0, 1]] * 4),
            r"x must have shape \[T, 64\], got \[4, 63\]",
        ),
        (
            torch.randn(4, 64, dtype=torch.float64, generator=CASES),
            torch.tensor([[0, 1]] * 4),
            "x has dtype torch.float64",
        ),
        (
            torch.randn(4, 64, generator=CASES),
            torch.tensor([[0, 8]] * 4),
            "expert id 8 out of range; allowed: 0..7",
        ),
        (
            torch.randn(4, 64, generator=CASES),
            torch.tensor([[5, 5]] * 4),
            "token 0 routes to expert ids \\[5, 5\\]",
        ),
    ],
)
def test_forward_errors(x, idx, message) -> None:
    with pytest.raises(ValueError, match=message):
        _layer()(x, idx, torch.full((4, 2), 0.5))


def test_weights_must_match_config() -> None:
    cfg = MoEConfig(**BASE)
    w = ExpertWeights.random(MoEConfig(**{**BASE, "d_ff": 64}))
    with pytest.raises(ValueError, match=r"weights.w1 must be torch.float32 of shape \[8, 64, 64\]"):
        build_layer(cfg, w)


def _build_with_odd_experts(rank: int, world: int) -> str:
    cfg = MoEConfig(**{**BASE, "num_experts": 6})
    return refusal(lambda: build_layer(cfg, ExpertWeights.random(cfg)))


@pytest.mark.slow
def test_experts_must_divide_over_ranks() -> None:
    messages = run_ranks(4, _build_with_odd_experts)
    assert all("num_experts=6 is not divisible by 4 ranks" in m for m in messages), messages


def test_routing_is_revalidated_when_it_changes(torch_rng: torch.Generator) -> None:
    """A reused routing tensor skips re-planning; an in-place edit (new version) is validated again."""
    layer = _layer()
    x, idx, weight = (
        torch.randn(4, 64, generator=torch_rng),
        torch.tensor([[0, 1]] * 4),
        torch.full((4, 2), 0.5),
    )
    y = layer(x, idx, weight)
    torch.testing.assert_close(layer(x, idx, weight), y)
    idx[2, 1] = 0
    with pytest.raises(ValueError, match="token 2 routes to expert ids \\[0, 0\\]"):
        layer(x, idx, weight)
