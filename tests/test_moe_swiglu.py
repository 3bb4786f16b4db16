"""The SwiGLU backward, fused (Dist-MoE) and unfused (MoK), against float64 autograd of the forward."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from cutlass_kernels.swiglu_torch import (
    BLOCK_ELEMENTS,
    swiglu_backward,
    swiglu_backward_blocked,
    swiglu_backward_whole,
)
from pipeline.moe.swiglu import (
    FUSED_FORMS,
    backward_form,
    forced_form,
    fused_form,
    kernel_reason,
    swiglu_backward_fused,
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
def test_the_two_fused_forms_agree_bit_for_bit_on_one_thread(
    dtype: torch.dtype, torch_rng: torch.Generator
) -> None:
    """The GPU's whole-tensor form computes what the CPU's blocked pass does, element for element. On
    one thread: with more, ATen splits a contiguous tensor into per-thread chunks whose last few
    elements take its scalar ``exp`` instead of the vector one, so an element at a chunk's edge may
    round one ulp apart (measured: 4 of 1.3e5 float32 elements on an AVX-512 host, none on AVX2)."""
    rows = 2 * BLOCK_ELEMENTS // 96 + 7  # blocks and a ragged last one
    h, da = (
        (3 * torch.randn(rows, 192, generator=torch_rng)).to(dtype),
        torch.randn(rows, 96, generator=torch_rng).to(dtype),
    )
    before = torch.get_num_threads()
    # a CPU rank with the node's cores runs this many threads (at least two: the chunks to compare)
    threads = max(2, os.cpu_count() or 1)
    torch.set_num_threads(1)
    try:
        pairs = list(zip(swiglu_backward_whole(da, h), swiglu_backward_blocked(da, h), strict=True))
        torch.set_num_threads(threads)
        threaded = list(zip(swiglu_backward_whole(da, h), swiglu_backward_blocked(da, h), strict=True))
    finally:
        torch.set_num_threads(before)
    for whole, blocked in pairs:
        assert torch.equal(whole, blocked)
    # with the threads: only elements at the chunks' edges (at most a vector's 16 floats each) may
    # differ, by what one ulp of sigmoid becomes after the slope's cancellation (measured: up to 13
    # elements, 15 eps relative, over 200 seeds; none in bfloat16, whose rounding absorbs it)
    for whole, blocked in threaded:
        differ = whole != blocked
        assert int(differ.sum()) <= 16 * threads, f"{int(differ.sum())} elements differ"
        torch.testing.assert_close(whole, blocked, rtol=1e-5, atol=0)


def test_each_device_has_its_form_and_a_form_can_be_forced() -> None:
    assert fused_form(torch.device("cpu"), torch.bfloat16, 3072) == "blocked"
    with forced_form("whole-tensor"):
        assert fused_form(torch.device("cpu"), torch.bfloat16, 3072) == "whole-tensor"
        gen = torch.Generator().manual_seed(2)
        h, da = torch.randn(30, 64, generator=gen), torch.randn(30, 32, generator=gen)
        assert all(
            torch.equal(a, b)
            for a, b in zip(swiglu_backward_fused(da, h), swiglu_backward_whole(da, h), strict=True)
        )
    assert fused_form(torch.device("cpu"), torch.bfloat16, 3072) == "blocked"
    with pytest.raises(ValueError, match=f"form 'loop'; allowed: {', '.join(FUSED_FORMS)}"):
        with forced_form("loop"):
            pass


needs_dsl = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)


@needs_dsl
@pytest.mark.parametrize(
    ("dtype", "f", "form", "reason"),
    [
        (torch.bfloat16, 3072, "cute-kernel", ""),
        (torch.float32, 3072, "whole-tensor", "the kernel takes bfloat16"),
        (torch.bfloat16, 12, "whole-tensor", "F=12 is not a positive multiple of 8"),
    ],
)
def test_a_gpu_runs_the_kernel_where_it_can_take_the_operands(
    dtype: torch.dtype, f: int, form: str, reason: str
) -> None:
    """On (fake) CUDA operands, as a Hopper GPU would: the kernel where its layout takes them, else the
    whole-tensor form, and why; the form the shard records is the one that runs."""
    from cutlass_kernels.planning import planned_launches

    with FakeTensorMode(), planned_launches("sm_90a") as launches:
        h = torch.empty(40, 2 * f, dtype=dtype, device="cuda")
        da = torch.empty(40, f, dtype=dtype, device="cuda")
        assert reason in kernel_reason(da, h) and bool(kernel_reason(da, h)) == bool(reason)
        assert fused_form(torch.device("cuda", 0), dtype, f) == form
        if form == "cute-kernel":  # the torch form's out= ops need a CUDA build (or the estimate's shim)
            dh, a = swiglu_backward_fused(da, h)
            assert (dh.shape, a.shape, dh.dtype, dh.device.type) == (h.shape, da.shape, dtype, "cuda")
        # a strided dA (a view) is no layout the kernel takes: the torch form runs
        assert kernel_reason(torch.empty(40, 2 * f, dtype=dtype, device="cuda")[:, :f], h)
    kernel = [(x.kernel, x.op, x.out_shape) for x in launches]
    assert kernel == (
        [("swiglu_backward_bfloat16_sm_90a", "swiglu-backward", (40, 2 * f))] if form == "cute-kernel" else []
    )
    assert backward_form(True, torch.device("cuda", 0), dtype, f) == f"fused, {form}"  # outside a plan
    assert backward_form(False, torch.device("cuda", 0), dtype, f) == "unfused"


@needs_dsl
def test_the_kernel_launches_nothing_for_zero_rows_and_cpu_operands_stay_blocked() -> None:
    from cutlass_kernels.planning import planned_launches

    with FakeTensorMode(), planned_launches("sm_100a") as launches:
        h = torch.empty(0, 256, dtype=torch.bfloat16, device="cuda")
        dh, a = swiglu_backward_fused(torch.empty(0, 128, dtype=torch.bfloat16, device="cuda"), h)
        assert dh.shape == (0, 256) and a.shape == (0, 128)
    assert launches == []
    cpu = torch.zeros(4, 16, dtype=torch.bfloat16)
    assert kernel_reason(cpu[:, :8], cpu) == "h is on cpu; the kernel runs on CUDA"


@needs_dsl
def test_pinning_the_torch_kernels_turns_the_swiglu_kernel_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device run's fallback (``CUTLASS_KERNELS_BACKEND=torch``) takes the SwiGLU kernel off too."""
    monkeypatch.setenv("CUTLASS_KERNELS_BACKEND", "torch")
    with FakeTensorMode():
        h = torch.empty(4, 256, dtype=torch.bfloat16, device="cuda")
        assert (
            kernel_reason(torch.empty(4, 128, dtype=torch.bfloat16, device="cuda"), h)
            == "CUTLASS_KERNELS_BACKEND=torch: no CuTe kernels in this process"
        )
    assert fused_form(torch.device("cuda", 0), torch.bfloat16, 128) == "whole-tensor"
