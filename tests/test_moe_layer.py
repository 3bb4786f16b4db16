"""Both implementations, every pipeline, float32 and bfloat16, on 1, 2 and 4 gloo ranks (and no group),
against the float64 token-repeat reference: outputs, input gradients, expert and shared gradients.
The same checks on a table of shapes whose rows are not 16-byte aligned in a GEMM dimension (the
layout ``torch._grouped_mm`` refuses, which the torch backend must route around in every GEMM of
forward and backward), on 1 and 2 ranks.

Tolerances (normwise relative error, u = unit roundoff of the layer dtype):
- float32: 1e-5 (u = 6e-8, with headroom for reduction order).
- bfloat16: 4u = 2^-6. Inputs and weights are exact in both; each output element passes through about
  four bf16 roundings (GEMM-1 output, activation, GEMM-2 output, weighted sum), each <= u relative.
- MXFP8 against the same math on MXFP8 operand values: a bf16 rounding that lands an operand on the
  other side of an E4M3 rounding boundary moves it by one E4M3 step (2^-3 relative); that happens to a
  fraction ~ u_bf16 / 2^-3 = 2^-5 of elements, which adds about sqrt(2^-5) x 2^-4 ~ 0.011 normwise.
  So bfloat16 MXFP8 cases allow 2^-6 + 0.011 + headroom = 0.04; float32 ones stay at 1e-5 (they see
  the same E4M3 values as the reference to within float32 rounding, which is far from boundaries).
"""

from __future__ import annotations

import pytest
import torch

from pipeline.tools.ranks import run_ranks
from tests.moe_cases import ALL_CASES, DTYPES, UNALIGNED_CASES, Case, run_case

WORLDS = (0, 1, 2, 4)
UNALIGNED_WORLDS = (1, 2)
TENSORS = ("y", "dx", "dw1", "dw2", "dshared_w1", "dshared_w2")


def _all_cases(rank: int, world: int, device: str) -> dict[str, dict]:
    return {
        c.name: run_case(rank, world, c, device if device == "cpu" else f"cuda:{rank}") for c in ALL_CASES
    }


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, int], list[dict]]:
    """Every case on every world size: one spawn of real gloo ranks per world size."""
    return {("gloo", w): run_ranks(w, _all_cases, "cpu") for w in WORLDS}


def _unaligned_cases(rank: int, world: int) -> dict[str, dict]:
    return {c.name: run_case(rank, world, c) for c in UNALIGNED_CASES}


@pytest.fixture(scope="module")
def unaligned_results() -> dict[int, list[dict]]:
    return {w: run_ranks(w, _unaligned_cases) for w in UNALIGNED_WORLDS}


def tolerance(case: Case) -> float:
    if case.dtype == "float32":
        return 1e-5
    return 0.04 if case.precision == "mxfp8" else 2.0**-6


def _check_against_reference(ranks: list[dict], case: Case) -> None:
    for name in TENSORS:
        assert any(res[case.name][name]["ref_norm"] > 0 for res in ranks), f"{name} is zero everywhere"
        for rank, res in enumerate(ranks):
            err = res[case.name][name]
            assert err["rel_fro"] <= tolerance(case), f"rank {rank} {name}: {err} > {tolerance(case)}"


@pytest.mark.slow
@pytest.mark.parametrize("world", WORLDS, ids=lambda w: f"ranks{w}" if w else "nogroup")
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_matches_float64_reference(results, world: int, case: Case) -> None:
    _check_against_reference(results[("gloo", world)], case)


@pytest.mark.slow
@pytest.mark.parametrize("world", UNALIGNED_WORLDS, ids=lambda w: f"ranks{w}")
@pytest.mark.parametrize("case", UNALIGNED_CASES, ids=lambda c: c.name)
def test_unaligned_shapes_match_float64_reference(unaligned_results, world: int, case: Case) -> None:
    _check_against_reference(unaligned_results[world], case)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unaligned_table_has_ten_shapes_per_dtype_and_implementation(dtype: str) -> None:
    for implementation in ("mok", "dist-moe"):
        cases = [c for c in UNALIGNED_CASES if (c.dtype, c.implementation) == (dtype, implementation)]
        assert len({(c.d_model, c.d_ff) for c in cases}) >= 10
        assert {c.scenario for c in cases} == {"plan", "ragged"}


@pytest.mark.slow
@pytest.mark.parametrize("world", (1, 2, 4))
def test_scenarios_exercise_the_hard_cases(results, world: int) -> None:
    """The ragged scenario really has a rank with no tokens and experts with no rows."""
    ranks = results[("gloo", world)]
    ragged = ALL_CASES[1]
    assert ragged.scenario == "ragged"
    if world > 1:
        assert ranks[-1][ragged.name]["tokens"] == 0
        assert (
            ranks[0][ragged.name]["saved_state"].routed_rows
            > ranks[1][ragged.name]["saved_state"].routed_rows
        )
    # experts 3 and 7 never receive rows: exactly zero weight gradients; every other expert has rows
    norms = torch.cat([res[ragged.name]["expert_grad_norms"] for res in ranks])
    assert norms[[3, 7]].tolist() == [0.0, 0.0]
    assert bool((norms[[0, 1, 2, 4, 5, 6]] > 0).all())


@pytest.mark.slow
@pytest.mark.parametrize("world", (1, 2, 4))
def test_mxfp8_error_bound_against_unquantized_math(results, world: int) -> None:
    """Outputs of MXFP8 cases against the unquantized float64 layer. Rounding x, W1, W2 and the
    activation to E4M3 (relative error <= u: 2^-4 for exact scales; for fast-math scales the top of a
    block may saturate, <= 1/7) perturbs the routed output to first order by <= 3u times the magnitude
    envelope of tests/moe_cases._envelope; bfloat16 rounding adds <= 4 u_bf16 of it."""
    for res in results[("gloo", world)]:
        for case in ALL_CASES:
            if case.precision != "mxfp8":
                continue
            r = res[case.name]["y_vs_unquantized"]
            u = 2.0**-4 if case.implementation == "mok" else 1 / 7
            bound = (3 * u + (4 * 2.0**-8 if case.dtype == "bfloat16" else 1e-6)) * r["envelope"] + 1e-6
            assert bool((r["diff"] <= bound).all()), case.name


@pytest.mark.slow
@pytest.mark.parametrize("world", (1, 2, 4))
def test_saved_state_rows_add_up(results, world: int) -> None:
    for res in results[("gloo", world)]:
        for case in ALL_CASES:
            s = res[case.name]["saved_state"]
            assert s.retained_rows + s.recomputed_rows == s.routed_rows


def _each_case(rank: int, world: int, device: str) -> dict[str, dict | str]:
    """Every case on this rank, a case that raises kept as its error text: the other cases still run."""
    out: dict[str, dict | str] = {}
    for c in ALL_CASES:
        try:
            out[c.name] = run_case(rank, world, c, f"{device}:{rank}")
        except Exception as e:
            out[c.name] = f"{type(e).__name__}: {e}"
    return out


@pytest.fixture(scope="module")
def nccl_results() -> dict[str, dict | str]:
    """Every case on one NCCL rank in one spawn: CUDA, NCCL and each kernel's compile paid once."""
    return run_ranks(1, _each_case, "cuda", backend="nccl")[0]


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU for NCCL")
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_nccl_one_rank(nccl_results, case: Case) -> None:
    res = nccl_results[case.name]
    assert not isinstance(res, str), res
    for name in TENSORS:
        assert res[name]["rel_fro"] <= tolerance(case), (name, res[name])
