"""The SwiGLU backward, fused (Dist-MoE) and unfused (MoK), against float64 autograd of the forward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pipeline.moe.swiglu import (
    BLOCK_ELEMENTS,
    FUSED_FORMS,
    forced_form,
    fused_form,
    swiglu_backward,
    swiglu_backward_blocked,
    swiglu_backward_fused,
    swiglu_backward_whole,
)

TOLERANCE = {torch.float64: 2e-6, torch.float32: 2e-6, torch.bfloat16: 1e-2}  # float32 arithmetic


def _reference(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """d(gate, up) by float64 autograd of A = silu(gate) * up, and A."""
    h64 = h.double().requires_grad_()
    gate, up = h64.chunk(2, dim=-1)
    a = F.silu(gate) * up
    a.backward(da.double())
    return h64.grad, a.detach()


@pytest.mark.parametrize("backward", [swiglu_backward, swiglu_backward_blocked, swiglu_backward_whole])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("rows", "f"),
    [(0, 32), (1, 32), (257, 64), (3 * BLOCK_ELEMENTS // 64 + 5, 64), (40, 4096), (3, BLOCK_ELEMENTS * 2)],
)
def test_matches_float64_autograd(backward, dtype: torch.dtype, rows: int, f: int) -> None:
    gen = torch.Generator().manual_seed(rows * 7 + f)
    h = (3 * torch.randn(rows, 2 * f, generator=gen)).to(dtype)  # gates well into both tails of silu
    da = torch.randn(rows, f, generator=gen).to(dtype)
    dh, a = backward(da, h)
    ref_dh, ref_a = _reference(da, h)
    assert dh.dtype == a.dtype == dtype and dh.shape == h.shape and a.shape == (rows, f)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(dh.double(), ref_dh, rtol=tol, atol=tol * 10)
    torch.testing.assert_close(a.double(), ref_a, rtol=tol, atol=tol * 10)


def test_fused_and_unfused_agree_on_the_same_inputs() -> None:
    gen = torch.Generator().manual_seed(5)
    h, da = torch.randn(1000, 256, generator=gen), torch.randn(1000, 128, generator=gen)
    for got, want in zip(swiglu_backward_fused(da, h), swiglu_backward(da, h), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_fused_leaves_its_inputs_unchanged() -> None:
    gen = torch.Generator().manual_seed(6)
    h, da = torch.randn(300, 64, generator=gen), torch.randn(300, 32, generator=gen)
    h0, da0 = h.clone(), da.clone()
    swiglu_backward_fused(da, h)
    assert torch.equal(h, h0) and torch.equal(da, da0)


@pytest.mark.parametrize("backward", [swiglu_backward, swiglu_backward_fused])
def test_bad_shapes_are_named(backward) -> None:
    with pytest.raises(
        ValueError, match=r"need h \[rows, 2F\] and da \[rows, F\]; got h \[4, 6\] and da \[4, 4\]"
    ):
        backward(torch.zeros(4, 4), torch.zeros(4, 6))
    with pytest.raises(ValueError, match="got h \\[4, 7\\]"):
        backward(torch.zeros(4, 3), torch.zeros(4, 7))


def test_dist_moe_fuses_and_mok_does_not() -> None:
    from pipeline.moe import MoEConfig

    common = {"d_model": 32, "d_ff": 32, "num_experts": 4, "top_k": 2, "precision": "bf16"}
    assert MoEConfig(**common, implementation="dist-moe", pipeline="bf16").fused_swiglu_backward
    assert not MoEConfig(**common, implementation="mok", pipeline="native").fused_swiglu_backward


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_two_fused_forms_agree_bit_for_bit(dtype: torch.dtype) -> None:
    """The GPU's whole-tensor form computes what the CPU's blocked pass does, element for element."""
    gen = torch.Generator().manual_seed(9)
    rows = 2 * BLOCK_ELEMENTS // 96 + 7  # blocks and a ragged last one
    h, da = (
        (3 * torch.randn(rows, 192, generator=gen)).to(dtype),
        torch.randn(rows, 96, generator=gen).to(dtype),
    )
    for whole, blocked in zip(swiglu_backward_whole(da, h), swiglu_backward_blocked(da, h), strict=True):
        assert torch.equal(whole, blocked)


def test_each_device_has_its_form_and_a_form_can_be_forced() -> None:
    assert fused_form(torch.device("cpu")) == "blocked"
    assert fused_form(torch.device("cuda", 0)) == "whole-tensor"  # a GPU's: one call, no Python loop
    with forced_form("whole-tensor"):
        assert fused_form(torch.device("cpu")) == "whole-tensor"
        gen = torch.Generator().manual_seed(2)
        h, da = torch.randn(30, 64, generator=gen), torch.randn(30, 32, generator=gen)
        assert all(
            torch.equal(a, b)
            for a, b in zip(swiglu_backward_fused(da, h), swiglu_backward_whole(da, h), strict=True)
        )
    assert fused_form(torch.device("cpu")) == "blocked"
    with pytest.raises(ValueError, match=f"form 'loop'; allowed: {', '.join(FUSED_FORMS)}"):
        with forced_form("loop"):
            pass
