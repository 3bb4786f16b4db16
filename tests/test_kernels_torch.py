"""The torch grouped-GEMM backend against per-group float64 products on fresh random data (ragged and
empty groups, both of its code paths, operands unaligned in one dimension or given as views), and the
dispatch's input errors."""

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
    torch_backend,
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


# (K, N) with exactly one dimension off 16-byte rows in bfloat16 (the first four also in float32): each
# entry point multiplies operands whose aligned and unaligned dimensions sit in different places.
ONE_SIDE_UNALIGNED = [(32, 18), (18, 32), (34, 16), (16, 34), (40, 20), (20, 40), (36, 24), (24, 36)]


def _views(gen: torch.Generator, m: int, k: int, n: int, dtype: torch.dtype, layout: str):
    """a [M, K], dy [M, N], b [G, N, K]: contiguous, or as views (b transposed in memory, a and dy
    column windows of wider buffers, starting 1 element in)."""
    a, dy, b = (torch.randn(*s, generator=gen).to(dtype) for s in ((m, k), (m, n), (5, n, k)))
    if layout == "views":
        a = torch.cat([torch.zeros(m, 1, dtype=dtype), a, torch.zeros(m, 3, dtype=dtype)], 1)[:, 1 : k + 1]
        dy = torch.cat([torch.zeros(m, 1, dtype=dtype), dy], 1)[:, 1:]
        b = b.transpose(1, 2).contiguous().transpose(1, 2)
    return a, dy, b


@pytest.mark.parametrize("k, n", ONE_SIDE_UNALIGNED)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "views"])
def test_entry_points_on_unaligned_operands_match_float64(k: int, n: int, dtype: torch.dtype, layout: str):
    gen = torch.Generator().manual_seed(31 * k + n)
    sizes = [3, 0, 7, 1, 5]  # ragged, with an empty group
    m = sum(sizes)
    a, dy, b = _views(gen, m, k, n, dtype, layout)
    offs = _offs(sizes)

    out = grouped_gemm(a, b, offs, out_dtype=torch.float32, backend="torch")
    dx = grouped_gemm_dgrad(dy, b, offs, out_dtype=torch.float32, backend="torch")
    dw = grouped_gemm_wgrad(dy, a, offs, out_dtype=torch.float32, backend="torch")

    assert out.shape == (m, n) and dx.shape == (m, k) and dw.shape == (5, n, k)
    tol = _tol(dtype, torch.float32)
    for g, (s, e) in enumerate(_bounds(sizes)):
        a64, dy64, b64 = a[s:e].double(), dy[s:e].double(), b[g].double()
        torch.testing.assert_close(out[s:e].double(), a64 @ b64.T, **tol)
        torch.testing.assert_close(dx[s:e].double(), dy64 @ b64, **tol)
        torch.testing.assert_close(dw[g].double(), dy64.T @ a64, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k, n", [*SHAPES, *ONE_SIDE_UNALIGNED, (30, 15)])
def test_layout_rule_never_hands_grouped_mm_what_it_refuses(k: int, n: int, dtype: torch.dtype):
    """Whatever the backend judges ``torch._grouped_mm`` takes, it takes: the operands of all three
    entry points exactly as the backend passes them (b transposed for fprop, dy.T for wgrad)."""
    a, dy, b = _views(torch.Generator().manual_seed(1), 8, k, n, dtype, "contiguous")
    offs = _offs([5, 0, 3, 0, 0])
    passed = {"fprop": (a, b.transpose(1, 2)), "dgrad": (dy, b), "wgrad": (dy.T, a)}
    for operands in passed.values():
        if torch_backend._takes(*operands):
            torch._grouped_mm(*operands, offs=offs)  # raises if the rule were wrong
        else:
            with pytest.raises(RuntimeError, match="16 bytes"):
                torch._grouped_mm(*operands, offs=offs)


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


def test_all_groups_empty_gives_empty_output(torch_rng: torch.Generator):
    a = torch.zeros(0, 16)
    b = torch.randn(3, 8, 16, generator=torch_rng)
    out = grouped_gemm(a, b, torch.zeros(3, dtype=torch.int32), backend="torch")
    assert out.shape == (0, 8)


@pytest.mark.parametrize("backend", ["cuda", "cute", "sm90", ""])
def test_unknown_backend_is_rejected_by_name(backend: str):
    with pytest.raises(ValueError, match=repr(backend)):
        resolve_backend(backend, torch.device("cpu"))


@pytest.mark.parametrize("backend", ["cute-sm90", "cute-sm100"])
def test_cute_backend_on_cpu_is_rejected(backend: str, torch_rng: torch.Generator):
    a, b = torch.randn(4, 16, generator=torch_rng), torch.randn(2, 8, 16, generator=torch_rng)
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
def test_bad_offs_is_rejected(offs: torch.Tensor, torch_rng: torch.Generator):
    a, b = torch.randn(4, 16, generator=torch_rng), torch.randn(2, 8, 16, generator=torch_rng)
    with pytest.raises(ValueError, match="offs"):
        grouped_gemm(a, b, offs, backend="torch")


@pytest.mark.parametrize(
    ("gemm", "a_shape", "b_shape", "dtype", "match"),
    [
        (grouped_gemm, (4, 16), (2, 8, 12), torch.float32, "share K"),
        (grouped_gemm, (4, 16), (2, 8, 16), torch.float16, "float32/bfloat16"),
        (grouped_gemm_dgrad, (4, 7), (2, 8, 16), torch.float32, "share N"),
        (grouped_gemm_wgrad, (4, 8), (5, 16), torch.float32, "share M"),
    ],
    ids=["k", "dtype", "dgrad-n", "wgrad-m"],
)
def test_mismatched_operands_are_rejected(
    gemm,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    dtype: torch.dtype,
    match: str,
    torch_rng: torch.Generator,
):
    a = torch.randn(*a_shape, generator=torch_rng).to(dtype)
    b = torch.randn(*b_shape, generator=torch_rng).to(dtype)
    with pytest.raises(ValueError, match=match):
        gemm(a, b, _offs([2, 2]), backend="torch")
