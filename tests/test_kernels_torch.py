"""The torch grouped-GEMM backend against per-group float64 products on fresh random data (ragged and
empty groups, both of its code paths), and the dispatch's input errors."""

from __future__ import annotations

import pytest
import torch

from cutlass_kernels import (
    grouped_gemm,
    grouped_gemm_dgrad,
    grouped_gemm_mx,
    grouped_gemm_wgrad,
    quantize_mx,
    resolve_backend,
)

# (64, 48): 16-byte aligned rows, the torch._grouped_mm path; (20, 12): unaligned bf16 rows, the
# per-group loop path.
SHAPES = [(64, 48), (20, 12)]
DTYPES = [torch.float32, torch.bfloat16]


def _offs(sizes: list[int]) -> torch.Tensor:
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32)


def _random_sizes(gen: torch.Generator, groups: int) -> list[int]:
    sizes = torch.randint(0, 9, (groups,), generator=gen).tolist()
    sizes[int(torch.randint(0, groups, (1,), generator=gen))] = 0  # at least one empty group
    return sizes


def _bounds(sizes: list[int]) -> list[tuple[int, int]]:
    ends = torch.tensor(sizes).cumsum(0).tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


def _tol(dtype: torch.dtype, out_dtype: torch.dtype) -> dict[str, float]:
    low = torch.bfloat16 in (dtype, out_dtype)
    return {"rtol": 1e-2, "atol": 1e-2} if low else {"rtol": 1e-5, "atol": 1e-5}


@pytest.mark.parametrize("k, n", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", DTYPES)
def test_grouped_gemm_and_dgrad_match_float64(k: int, n: int, dtype: torch.dtype, out_dtype: torch.dtype):
    gen = torch.Generator().manual_seed(k * 100 + n)
    sizes = _random_sizes(gen, 5)
    m = sum(sizes)
    a = torch.randn(m, k, generator=gen).to(dtype)
    dy = torch.randn(m, n, generator=gen).to(dtype)
    b = torch.randn(5, n, k, generator=gen).to(dtype)
    offs = _offs(sizes)

    out = grouped_gemm(a, b, offs, out_dtype=out_dtype, backend="torch")
    dx = grouped_gemm_dgrad(dy, b, offs, out_dtype=out_dtype, backend="torch")

    assert out.dtype == out_dtype and out.shape == (m, n)
    assert dx.dtype == out_dtype and dx.shape == (m, k)
    for g, (s, e) in enumerate(_bounds(sizes)):
        ref = a[s:e].double() @ b[g].double().T
        torch.testing.assert_close(out[s:e].double(), ref, **_tol(dtype, out_dtype))
        ref_dx = dy[s:e].double() @ b[g].double()
        torch.testing.assert_close(dx[s:e].double(), ref_dx, **_tol(dtype, out_dtype))


@pytest.mark.parametrize("k, n", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_wgrad_matches_float64_and_zeroes_empty_groups(k: int, n: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(7 * k + n)
    sizes = _random_sizes(gen, 6)
    m = sum(sizes)
    dy = torch.randn(m, n, generator=gen).to(dtype)
    x = torch.randn(m, k, generator=gen).to(dtype)

    dw = grouped_gemm_wgrad(dy, x, _offs(sizes), out_dtype=torch.float32, backend="torch")

    assert dw.shape == (6, n, k)
    for g, (s, e) in enumerate(_bounds(sizes)):
        ref = dy[s:e].double().T @ x[s:e].double()
        torch.testing.assert_close(dw[g].double(), ref, **_tol(dtype, torch.float32))
        if s == e:
            assert not dw[g].any()


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_mx_form_matches_dequantized_float64(mode: str):
    gen = torch.Generator().manual_seed(11)
    sizes = _random_sizes(gen, 4)
    m, k, n = sum(sizes), 64, 24
    a = quantize_mx(torch.randn(m, k, generator=gen) * 3, mode)
    b = quantize_mx(torch.randn(4, n, k, generator=gen) / 5, mode)

    out = grouped_gemm_mx(a, b, _offs(sizes), out_dtype=torch.float32, backend="torch")

    a64 = a.data.double().unflatten(-1, (-1, 32)) * torch.exp2(a.scale.double() - 127).unsqueeze(-1)
    b64 = b.data.double().unflatten(-1, (-1, 32)) * torch.exp2(b.scale.double() - 127).unsqueeze(-1)
    a64, b64 = a64.flatten(-2), b64.flatten(-2)
    for g, (s, e) in enumerate(_bounds(sizes)):
        torch.testing.assert_close(out[s:e].double(), a64[s:e] @ b64[g].T, rtol=1e-5, atol=1e-5)


def test_all_groups_empty_gives_empty_output():
    a = torch.zeros(0, 16)
    b = torch.randn(3, 8, 16)
    out = grouped_gemm(a, b, torch.zeros(3, dtype=torch.int32), backend="torch")
    assert out.shape == (0, 8)


@pytest.mark.parametrize("backend", ["cuda", "cute", "sm90", ""])
def test_unknown_backend_is_rejected_by_name(backend: str):
    with pytest.raises(ValueError, match=repr(backend)):
        resolve_backend(backend, torch.device("cpu"))


@pytest.mark.parametrize("backend", ["cute-sm90", "cute-sm100"])
def test_cute_backend_on_cpu_is_rejected(backend: str):
    a, b = torch.randn(4, 16), torch.randn(2, 8, 16)
    with pytest.raises(ValueError, match=backend):
        grouped_gemm(a, b, _offs([2, 2]), backend=backend)


def test_auto_on_cpu_is_torch():
    assert resolve_backend("auto", torch.device("cpu")) == "torch"


@pytest.mark.parametrize(
    "offs",
    [
        torch.tensor([2, 4], dtype=torch.int64),  # wrong dtype
        torch.tensor([4], dtype=torch.int32),  # one entry per group is required
        torch.tensor([[2, 4]], dtype=torch.int32),  # not 1-d
    ],
)
def test_bad_offs_is_rejected(offs: torch.Tensor):
    a, b = torch.randn(4, 16), torch.randn(2, 8, 16)
    with pytest.raises(ValueError, match="offs"):
        grouped_gemm(a, b, offs, backend="torch")


def test_mismatched_operands_are_rejected():
    offs = _offs([2, 2])
    with pytest.raises(ValueError, match="share K"):
        grouped_gemm(torch.randn(4, 16), torch.randn(2, 8, 12), offs, backend="torch")
    with pytest.raises(ValueError, match="float32/bfloat16"):
        grouped_gemm(torch.randn(4, 16).half(), torch.randn(2, 8, 16).half(), offs, backend="torch")
    with pytest.raises(ValueError, match="share N"):
        grouped_gemm_dgrad(torch.randn(4, 7), torch.randn(2, 8, 16), offs, backend="torch")
    with pytest.raises(ValueError, match="share M"):
        grouped_gemm_wgrad(torch.randn(4, 8), torch.randn(5, 16), offs, backend="torch")
