"""The GPU check's routings, shapes, reference and records, and its refusal to run without a GPU."""

from __future__ import annotations

import pytest
import torch

from cutlass_kernels import bench, check
from cutlass_kernels.__main__ import main
from cutlass_kernels.results import append, read


@pytest.mark.parametrize("groups, rows, empty", [(256, 32768, 8), (6, 12288, 1), (3, 5, 2)])
def test_random_sizes_sum_to_rows_with_empty_groups(groups: int, rows: int, empty: int):
    sizes = check.random_sizes(groups, rows, torch.Generator().manual_seed(groups), empty=empty)
    assert len(sizes) == groups and sum(sizes) == rows
    assert min(sizes) >= 0 and sizes.count(0) >= empty


def test_timing_shapes_cover_seed003_and_every_report_rank_shape():
    shapes = {s.name: s for s in bench.timing_shapes()}
    assert (shapes["seed003-up"].groups, shapes["seed003-up"].n, shapes["seed003-up"].k) == (256, 4096, 8192)
    assert (shapes["seed003-down"].n, shapes["seed003-down"].k) == (8192, 2048)
    for f in (1536, 3072, 6144):
        for ep, groups in ((8, 48), (16, 24), (32, 12), (64, 6)):
            up, down = shapes[f"D7168-F{f}-EP{ep}-up"], shapes[f"D7168-F{f}-EP{ep}-down"]
            assert up.groups == down.groups == groups and up.rows == 2048 * 6
            assert (up.n, up.k, down.n, down.k) == (2 * f, 7168, 7168, f)


def test_reference_is_the_per_group_product():
    gen = torch.Generator().manual_seed(3)
    sizes = [2, 0, 5]
    a = torch.randn(7, 16, generator=gen).bfloat16()
    b = torch.randn(3, 8, 16, generator=gen).bfloat16()
    ref = check.reference(a, b, sizes)
    torch.testing.assert_close(ref[:2].double(), a[:2].double() @ b[0].double().T)
    torch.testing.assert_close(ref[2:].double(), a[2:].double() @ b[2].double().T)
    assert check.rel_err(ref, ref) == 0.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a GPU")
@pytest.mark.parametrize("stage", ["env", "smoke", "correctness", "timing"])
def test_stages_without_gpu_exit_2_with_a_message(stage: str, capsys: pytest.CaptureFixture[str]):
    assert main([stage]) == 2
    assert (
        capsys.readouterr().err
        == f"python -m cutlass_kernels {stage}: the check needs a CUDA GPU, and torch sees none\n"
    )


def test_chunked_quantization_equals_whole_tensor_quantization():
    x = torch.randn(9, 8, 64, generator=torch.Generator().manual_seed(5))
    whole, chunked = check.quantize_mx(x), check.quantize_chunked(x, chunk=4)
    assert torch.equal(whole.data.view(torch.uint8), chunked.data.view(torch.uint8))
    assert torch.equal(whole.scale, chunked.scale)


def test_wgrad_error_is_measured_per_group_including_empty_ones():
    gen = torch.Generator().manual_seed(4)
    sizes = [3, 0, 4]
    dy, x = torch.randn(7, 5, generator=gen), torch.randn(7, 6, generator=gen)
    exact = torch.stack([dy[:3].T @ x[:3], torch.zeros(5, 6), dy[3:].T @ x[3:]])
    assert check.wgrad_rel_err(exact, dy, x, sizes) < 1e-6
    garbage_in_empty_group = exact.clone()
    garbage_in_empty_group[1, 2, 3] = 1e3
    assert check.wgrad_rel_err(garbage_in_empty_group, dy, x, sizes) > 1


def test_reference_of_mx_operands_is_that_of_their_dequantized_values():
    gen = torch.Generator().manual_seed(6)
    sizes = [4, 0, 3]
    a = check.quantize_mx(torch.randn(7, 64, generator=gen))
    b = check.quantize_mx(torch.randn(3, 8, 64, generator=gen))
    torch.testing.assert_close(
        check.reference(a, b, sizes), check.reference(a.dequantize(), b.dequantize(), sizes), rtol=0, atol=0
    )


def test_a_raising_check_is_recorded_as_failed_with_its_error(tmp_path):
    results = tmp_path / "results.jsonl"
    checker = check.Checker(check.target(dry_run=True), "fprop", "default", results, seed=1)

    def broken() -> dict:
        raise RuntimeError("illegal memory access")

    checker.attempt("case", torch.bfloat16, broken)
    checker.attempt("case", torch.float32, lambda: {"status": "pass", "max_rel_err": 1e-6})
    failed, passed = read(results)
    assert (failed["status"], failed["key"], checker.failures) == ("fail", "fprop/bfloat16/default", 1)
    assert "RuntimeError: illegal memory access" in failed["error"]
    assert passed["status"] == "pass" and passed["out_dtype"] == "float32"
    assert check.failed_keys(results) == {"fprop/bfloat16/default"}


def test_a_kernel_that_failed_its_smoke_test_is_skipped_later(tmp_path):
    results = tmp_path / "results.jsonl"
    append(results, {"stage": "smoke", "key": "wgrad/float32/default", "status": "fail", "error": "hang"})
    checker = check.Checker(
        check.target(dry_run=True), "wgrad", "default", results, 2, check.failed_keys(results)
    )
    checker.attempt("case", torch.float32, lambda: {"status": "pass"})
    assert read(results)[-1]["status"] == "skip" and "failed its smoke test" in read(results)[-1]["reason"]


def test_results_survive_a_torn_last_line_and_keep_non_finite_numbers(tmp_path):
    results = tmp_path / "results.jsonl"
    append(results, {"stage": "timing", "ms": float("nan"), "errors": [float("inf")]})
    with open(results, "a") as f:
        f.write('{"stage": "tim')  # killed mid-write
    assert read(results) == [{"stage": "timing", "ms": "nan", "errors": ["inf"]}]


def test_an_unwritten_row_is_an_infinite_error():
    prob = check.make_case("fprop", [3, 0, 5], 16, 32, 2, torch.device("cpu"))
    out = prob.call(torch.float32, "torch", "default")
    assert prob.error(out) < check.tolerance(torch.float32, "torch")
    out[4] = float("nan")  # a row of group 2 the kernel never wrote (NaN-prefilled)
    assert prob.error(out) == float("inf")


def test_wgrad_ignores_rows_past_the_last_group_end():
    prob = check.make_case("wgrad", [3, 0, 5], 16, 32, 4, torch.device("cpu"))
    assert float(prob.lhs[-4:].float().abs().min()) > 9e3  # large values a kernel must not sum in
    assert prob.error(prob.call(torch.float32, "torch", "default")) < 1e-2


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad", "mx"])
def test_operands_that_would_not_reach_the_kernel_fail_the_case(op: str):
    """CPU tensors never reach a CuTe kernel: a check that would test the torch fallback instead fails."""
    pytest.importorskip("cutlass")
    cute = check.Target(torch.device("cpu"), "cute-sm90", "sm_90a", False)
    prob = check.make_case(op, [3, 0, 70], 64, 64, 0, torch.device("cpu"))
    path = check.kernel_path(cute, prob, torch.bfloat16)
    assert "torch fallback: " in path and (op != "mx" or path.startswith("BF16 values, "))
    result = check._check_output(cute, prob, torch.bfloat16, "default")
    assert result["status"] == "fail" and "would not reach the kernel" in result["error"]


def test_sass_counts_spills_inside_the_mma_loop_apart_from_the_others():
    sass = "\n".join(
        [
            "        /*0010*/                   STL [R1], R2 ;",
            "        /*0020*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT ;",
            "        /*0030*/                   LDL.64 R4, [R1+0x8] ;",
            "        /*0040*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8] ;",
            "        /*0050*/                   LDL.LU R6, [R1] ;",
            "        /*0060*/                   FADD R1, R2, R3 ;",
        ]
    )
    assert check.sass_counts(sass) == {"mma": 2, "local": 3, "local_in_mma_loop": 1}
    assert check.sass_counts("FADD R1, R2, R3 ;") == {"mma": 0, "local": 0, "local_in_mma_loop": 0}
