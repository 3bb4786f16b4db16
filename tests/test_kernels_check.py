"""The GPU check's routings, shapes and reference, and its refusal to run without a GPU."""

from __future__ import annotations

import pytest
import torch

from cutlass_kernels import check
from cutlass_kernels.__main__ import main


@pytest.mark.parametrize("groups, rows, empty", [(256, 32768, 8), (6, 12288, 1), (3, 5, 2)])
def test_random_sizes_sum_to_rows_with_empty_groups(groups: int, rows: int, empty: int):
    sizes = check.random_sizes(groups, rows, torch.Generator().manual_seed(groups), empty=empty)
    assert len(sizes) == groups and sum(sizes) == rows
    assert min(sizes) >= 0 and sizes.count(0) >= empty


def test_timing_shapes_cover_seed003_and_every_report_rank_shape():
    shapes = {s.name: s for s in check.timing_shapes()}
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
def test_check_without_gpu_exits_nonzero_with_a_message(capsys: pytest.CaptureFixture[str]):
    assert main(["check"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_chunked_quantization_equals_whole_tensor_quantization():
    x = torch.randn(9, 8, 64, generator=torch.Generator().manual_seed(5))
    whole, chunked = check.quantize_mx(x), check.quantize_chunked(x, chunk=4)
    assert torch.equal(whole.data.view(torch.uint8), chunked.data.view(torch.uint8))
    assert torch.equal(whole.scale, chunked.scale)


def test_mx_path_off_gpu_is_the_dequantizing_one():
    a = check.quantize_mx(torch.randn(8, 256))
    b = check.quantize_mx(torch.randn(2, 128, 256))
    offs = torch.tensor([3, 8], dtype=torch.int32)
    assert check.mx_path("cute-sm100", a, b, offs) == "dequant-bf16"
    assert check.mx_path("cute-sm90", a, b, offs) == "dequant-bf16"


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


def test_a_raising_case_is_recorded_as_failed_with_its_error():
    def broken() -> float:
        raise RuntimeError("illegal memory access")

    failed = check._attempt("case", "fprop", torch.bfloat16, broken)
    passed = check._attempt("case", "fprop", torch.float32, lambda: 1e-6)
    assert not failed.ok and "illegal memory access" in failed.error
    assert passed.ok and passed.error == "" and passed.tol == 1e-3
