"""The fused SwiGLU backward kernel without a GPU: it compiles for sm_90a and sm_100a (with every
kernel of the arch: the session's ``compiled_kernels``) into PTX with 128-bit global accesses only
and no spills; the wrapper refuses, with the reason, what the kernel cannot take and only plans
under fake tensors; and the host logic of the device checks (byte count, grid, tolerance, the
correctness check passing an FP32 form and failing planted faults, the timing records) runs on the
CPU."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)

ARCHES = ("sm_90a", "sm_100a")
PTXAS = shutil.which("ptxas") or "/usr/local/bin/ptxas"
CPU = torch.device("cpu")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHES)
def test_ptx_has_only_128_bit_global_accesses_and_the_launch_bound(arch: str, compiled_kernels):
    from cutlass_kernels import swiglu_kernel as k

    kernels = compiled_kernels(arch)
    ptx = (kernels / f"swiglu_backward_bfloat16_{arch}.ptx").read_text()
    assert f".target {arch}" in ptx
    assert (kernels / f"swiglu_backward_bfloat16_{arch}.cubin").stat().st_size > 0
    accesses = re.findall(r"\b(ld|st)\.global(\.\S+)?\s", ptx)
    # per row of a thread: the dA, gate and up vectors in, the dgate, dup and A vectors out
    assert sorted(op + suffix for op, suffix in accesses) == sorted(
        ["ld.v4.b32"] * 3 * k.ROWS_PER_THREAD + ["st.v4.b32"] * 3 * k.ROWS_PER_THREAD
    )
    elements = k.VEC * k.ROWS_PER_THREAD
    assert ptx.count("ex2.approx.ftz.f32") == elements and ptx.count("rcp.approx.ftz.f32") == elements
    assert ptx.count("cvt.rn.bf16x2.f32") == 3 * elements // 2  # three outputs, two per conversion
    assert f".minnctapersm {k.CTAS_PER_SM}" in ptx and f".reqntid {k.THREADS}, 1, 1" in ptx
    assert ".local" not in ptx and ".shared" not in ptx


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHES)
def test_ptxas_reports_no_spill_within_the_launch_bound(arch: str, compiled_kernels, tmp_path: Path):
    from cutlass_kernels import swiglu_kernel as k

    kernels = compiled_kernels(arch)
    if not Path(PTXAS).exists():
        pytest.skip("ptxas is not installed")
    info = subprocess.run(
        [PTXAS, f"-arch={arch}", "-v", str(kernels / f"swiglu_backward_bfloat16_{arch}.ptx")]
        + ["-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert info.returncode == 0, info.stderr[-2000:]
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in info.stderr
    registers = int(re.search(r"Used (\d+) registers", info.stderr).group(1))
    assert registers <= 65536 // (k.THREADS * k.CTAS_PER_SM)


def test_compile_refuses_an_unknown_arch():
    from cutlass_kernels.swiglu_kernel import compile_kernel

    with pytest.raises(ValueError, match="sm_80"):
        compile_kernel("sm_80")


# ------------------------------------------------------------------------------------ wrapper


def _operands(
    gen: torch.Generator, rows: int, f: int, dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(rows, f, generator=gen).to(dtype), torch.randn(rows, 2 * f, generator=gen).to(dtype)


def test_wrapper_names_what_the_kernel_cannot_take(torch_rng: torch.Generator):
    from cutlass_kernels.swiglu_kernel import layout_reason, swiglu_backward, unsupported_reason

    da, h = _operands(torch_rng, 5, 96)
    assert layout_reason(da, h) == ""
    assert "h [rows, 2F]" in layout_reason(da, h[:, :100])
    assert "h [rows, 2F]" in layout_reason(da[:4], h)
    assert "float32" in layout_reason(*_operands(torch_rng, 5, 96, torch.float32))
    assert "F=36" in layout_reason(*_operands(torch_rng, 5, 36))  # a multiple of 4, not of 8
    wide_da, wide_h = _operands(torch_rng, 5, 192)
    assert "da is not contiguous" in layout_reason(wide_da[:, ::2], h)
    assert "h is not contiguous" in layout_reason(da, wide_h[:, ::2])
    offset_da = torch.empty(5 * 96 + 1, dtype=torch.bfloat16)[1:].view(5, 96)  # contiguous, 2 bytes in
    assert "16-byte aligned offset" in layout_reason(offset_da, h)
    assert "CUDA" in unsupported_reason(da, h)  # layout fine, device not
    with pytest.raises(ValueError, match="CUDA"):
        swiglu_backward(da, h)
    with pytest.raises(ValueError, match="F=36"):
        swiglu_backward(*_operands(torch_rng, 5, 36))


def test_under_fake_tensors_the_wrapper_only_allocates_its_outputs():
    from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

    from cutlass_kernels.swiglu_kernel import swiglu_backward

    with FakeTensorMode():
        da, h = (
            torch.empty(300_000, 3072, dtype=torch.bfloat16),
            torch.empty(300_000, 6144, dtype=torch.bfloat16),
        )
        dh, a = swiglu_backward(da, h)  # no GPU, no compile, no launch: the outputs alone
        assert is_fake(dh) and is_fake(a)
        assert (dh.shape, a.shape, dh.dtype, a.dtype) == (h.shape, da.shape, torch.bfloat16, torch.bfloat16)
        with pytest.raises(ValueError, match="F=12"):
            swiglu_backward(
                torch.empty(4, 12, dtype=torch.bfloat16), torch.empty(4, 24, dtype=torch.bfloat16)
            )


def test_bytes_moved_are_the_four_tensors(torch_rng: torch.Generator):
    from cutlass_kernels.swiglu_kernel import bytes_moved

    da, h = _operands(torch_rng, 7, 24)
    assert bytes_moved(7, 24) == 2 * (da.nbytes + h.nbytes)  # read dA and H, write A and dH
    assert bytes_moved(283_853, 3072) == 2 * 283_853 * 6 * 3072


def test_grid_is_the_launch_bound_residency_over_the_column_tiles():
    from cutlass_kernels.swiglu_kernel import CTAS_PER_SM, TILE_COLS, TILE_ROWS, grid_row_ctas

    for sms in (132, 148):
        for rows, f in ((12_288, 3072), (283_853, 3072), (283_853, 6144), (12_288, 1536)):
            col_tiles = -(-f // TILE_COLS)
            row_ctas = grid_row_ctas(rows, f, sms)
            assert col_tiles * row_ctas <= sms * CTAS_PER_SM < col_tiles * (row_ctas + 1)
    assert grid_row_ctas(12_288, 3072, 132) == 44  # 24 column tiles x 44 = 1056 = 132 SMs x 8
    assert grid_row_ctas(17, 96, 132) == 2  # no more than the row tiles
    assert grid_row_ctas(1, 8, 132) == 1
    assert grid_row_ctas(100 * TILE_ROWS, 300 * TILE_COLS, 4) == 1  # wider than the GPU: at least one


# ------------------------------------------------------------------------ device checks' host logic


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_correctness_check_passes_the_blocked_fp32_form(tmp_path: Path):
    from cutlass_kernels.swiglu_check import DRY_CASES, Subject, correctness, writer
    from cutlass_kernels.swiglu_torch import swiglu_backward, swiglu_backward_blocked

    out = tmp_path / "results.jsonl"
    assert correctness(out, Subject(swiglu_backward, CPU, writer(swiglu_backward_blocked)), DRY_CASES) == 0
    records = _records(out)
    assert [(r["rows"], r["f"]) for r in records] == list(DRY_CASES)
    for r in records:
        assert r["status"] == "pass" and r["unwritten"] == 0 and r["guard_written"] == 0
        assert set(r["excess"]) == set(r["torch_form_excess"]) == {"dgate", "dup", "a"}
        assert max(r["torch_form_excess"].values()) <= 1  # the tolerance admits an FP32 computation


def _wrong_slope(da, h, dh, a):
    """silu'(g) taken as s: the classic SwiGLU backward mistake."""
    f = da.shape[1]
    g, up, d = h[:, :f].float(), h[:, f:].float(), da.float()
    s = torch.sigmoid(g)
    dh.copy_(torch.cat([d * up * s, d * g * s], dim=1))
    a.copy_(g * s * up)


def _last_row_unwritten(da, h, dh, a):
    from cutlass_kernels.swiglu_torch import swiglu_backward

    out_dh, out_a = swiglu_backward(da, h)
    dh[:-1], a[:-1] = out_dh[:-1], out_a[:-1]


def _row_past_the_end(da, h, dh, a):
    from cutlass_kernels.swiglu_check import writer
    from cutlass_kernels.swiglu_torch import swiglu_backward

    writer(swiglu_backward)(da, h, dh, a)
    past = torch.as_strided(dh, (1, dh.shape[1]), dh.stride(), dh.storage_offset() + dh.numel())
    past.copy_(dh[-1:])


@pytest.mark.parametrize(
    "fault, shows",
    [(_wrong_slope, "excess"), (_last_row_unwritten, "unwritten"), (_row_past_the_end, "guard_written")],
)
def test_correctness_check_fails_planted_faults(fault: Callable, shows: str, tmp_path: Path):
    from cutlass_kernels.swiglu_check import Subject, correctness
    from cutlass_kernels.swiglu_torch import swiglu_backward

    out = tmp_path / "results.jsonl"
    assert correctness(out, Subject(swiglu_backward, CPU, fault), ((17, 96),)) == 1
    (record,) = _records(out)
    assert record["status"] == "fail"
    if shows == "excess":
        assert record["excess"]["dgate"] > 100 and record["excess"]["dup"] <= 1
    else:
        assert record[shows] > 0


def test_a_case_that_raises_is_recorded_and_the_rest_run(tmp_path: Path):
    from cutlass_kernels.swiglu_check import Subject, correctness, writer
    from cutlass_kernels.swiglu_torch import swiglu_backward

    def refuses_wide(da, h, dh, a):
        if da.shape[1] > 100:
            raise ValueError("too wide")
        writer(swiglu_backward)(da, h, dh, a)

    out = tmp_path / "results.jsonl"
    assert correctness(out, Subject(swiglu_backward, CPU, refuses_wide), ((3, 128), (3, 64))) == 1
    failed, passed = _records(out)
    assert failed["status"] == "fail" and "too wide" in failed["error"] and passed["status"] == "pass"


def test_tolerance_admits_one_bf16_rounding_apart_and_not_two():
    from cutlass_kernels.swiglu_check import excess

    exact = torch.tensor([1.5, -3.25, 1000.0, 0.0], dtype=torch.float64)
    magnitude = exact.abs()
    ulp = torch.tensor([2.0**-7, 2.0**-6, 4.0, 0.0], dtype=torch.float64)  # BF16 spacing at each
    assert excess(exact.bfloat16(), exact, magnitude) == 0
    assert excess((exact + ulp).bfloat16(), exact, magnitude) <= 1
    assert excess((exact + 2 * ulp).bfloat16(), exact, magnitude) > 1
    assert excess(torch.tensor([float("nan"), 0, 0, 0]).bfloat16(), exact, magnitude) == float("inf")


def test_inputs_hold_saturated_zero_and_negative_gates():
    from cutlass_kernels.swiglu_check import inputs

    da, h = inputs(256, 64, torch.Generator().manual_seed(3), CPU)
    assert (da.shape, h.shape, da.dtype, h.dtype) == ((256, 64), (256, 128), torch.bfloat16, torch.bfloat16)
    gate = h[:, :64].float()
    assert 0.08 < float((gate.abs() > 20).float().mean()) < 0.16
    assert float((gate.abs() > 87.5).float().mean()) > 0.01  # past FP32's exp range
    assert float((gate == 0).float().mean()) > 0.04 and float((da == 0).float().mean()) > 0.03
    assert float((gate < -20).float().mean()) > 0.04 and float((gate < 0).float().mean()) > 0.4


def test_timing_records_the_fraction_of_the_faster_probe_and_the_goal(tmp_path: Path):
    from cutlass_kernels.swiglu_check import Subject, bandwidth_record, timing, writer
    from cutlass_kernels.swiglu_torch import swiglu_backward, swiglu_backward_blocked

    ms = {"kernel": [2.0, 2.2, 9.0], "torch_form": [8.0, 8.0], "copy": [1.8, 1.7, 1.9], "add": [2.0]}
    record = bandwidth_record(1000, 3072, ms)
    moved = 2 * 1000 * 6 * 3072
    assert record["bytes"] == moved
    assert record["gb_per_s"]["kernel"] == pytest.approx(moved / 2.2e-3 / 1e9)
    assert record["hbm_gb_per_s"] == pytest.approx(moved / 1.8e-3 / 1e9)  # the copy, faster than the add
    assert record["frac_of_hbm"] == pytest.approx(1.8 / 2.2) and record["status"] == "pass"
    assert record["speedup_vs_torch_form"] == pytest.approx(8.0 / 2.2)
    assert record["ms"]["kernel"] == {"min": 2.0, "median": 2.2, "max": 9.0}
    slow = bandwidth_record(1000, 3072, ms | {"kernel": [2.5], "add": [1.5]})
    assert slow["frac_of_hbm"] == pytest.approx(0.6) and slow["status"] == "fail"  # the add is faster

    out = tmp_path / "results.jsonl"
    timing(out, Subject(swiglu_backward, CPU, writer(swiglu_backward_blocked)), shapes=((40, 64),), iters=2)
    (r,) = _records(out)
    assert (r["stage"], r["rows"], r["f"], r["bytes"]) == ("timing", 40, 64, 2 * 40 * 6 * 64)
    assert set(r["ms"]) == set(r["timer"]) == {"kernel", "torch_form", "copy", "add"}
    assert set(r["timer"].values()) == {"perf_counter"} and r["status"] in ("pass", "fail")
