"""The GPU check's routings, shapes, reference and records, and its refusal to run without a GPU."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

from cutlass_kernels import bench, check, tile_schedule
from cutlass_kernels.__main__ import main
from cutlass_kernels.results import append, read

needs_dsl = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)


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
@pytest.mark.parametrize(
    "args",
    [["env"], ["plan"], ["smoke-one", "--index", "0", "--op", "fprop", "--out-dtype", "bfloat16"]]
    + [["correctness-op", "--op", "mx"], ["timing-op", "--op", "wgrad"], ["sass"]],
)
def test_children_without_gpu_exit_2_with_a_message(args: list[str], capsys: pytest.CaptureFixture[str]):
    assert main(args) == 2
    assert (
        capsys.readouterr().err
        == f"python -m cutlass_kernels {args[0]}: the check needs a CUDA GPU, and torch sees none\n"
    )


def test_planted_faults_are_the_dry_runs_alone(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GPU_RUN_PLANT", "hang:smoke:fprop/*/default,wrong:*:mx/bfloat16/*")
    t = check.target(dry_run=True)
    assert t.planted("smoke", "fprop/float32/default") == "hang"
    assert t.planted("correctness", "fprop/float32/default") is None
    assert t.planted("timing", "mx/bfloat16/tail64") == "wrong"
    with pytest.raises(check.NoTarget, match="GPU_RUN_PLANT plants faults in the dry run only"):
        check.target(dry_run=False)
    with pytest.raises(ValueError, match="planted fault 'stall:smoke:fprop/bfloat16/default': want KIND"):
        check.plants_of("stall:smoke:fprop/bfloat16/default")


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
    for g in range(3):  # a NaN in any group, after finite ones too, is an infinite error
        nan = exact.clone()
        nan[g, 0, 0] = float("nan")
        assert check.wgrad_rel_err(nan, dy, x, sizes) == float("inf")


def test_reference_of_mx_operands_is_that_of_their_dequantized_values():
    gen = torch.Generator().manual_seed(6)
    sizes = [4, 0, 3]
    a = check.quantize_mx(torch.randn(7, 64, generator=gen))
    b = check.quantize_mx(torch.randn(3, 8, 64, generator=gen))
    torch.testing.assert_close(
        check.reference(a, b, sizes), check.reference(a.dequantize(), b.dequantize(), sizes), rtol=0, atol=0
    )


def test_a_raising_check_is_recorded_as_failed_with_its_error_and_fails_its_key(tmp_path):
    results = tmp_path / "results.jsonl"
    checker = check.Checker(check.target(dry_run=True), "fprop", "default", results, seed=1)

    def broken() -> dict:
        raise RuntimeError("illegal memory access")

    checker.attempt("case", torch.bfloat16, broken)
    checker.attempt("case", torch.float32, lambda: {"status": "pass", "max_rel_err": 1e-6})
    assert not checker.verdict(torch.bfloat16) and checker.verdict(torch.float32)
    failed, passed, bf16, fp32 = read(results)
    assert (failed["status"], failed["key"]) == ("fail", "fprop/bfloat16/default")
    assert "RuntimeError: illegal memory access" in failed["error"]
    assert passed["status"] == "pass" and passed["out_dtype"] == "float32"
    assert (bf16["verdict"], bf16["status"], bf16["reason"]) == (True, "fail", "1 failed case(s)")
    assert (fp32["key"], fp32["status"]) == ("fprop/float32/default", "pass")


def test_a_kernel_that_failed_its_smoke_test_is_not_checked(tmp_path):
    results = tmp_path / "results.jsonl"
    append(
        results,
        {
            "stage": "smoke",
            "key": "wgrad/float32/default",
            "verdict": True,
            "status": "fail",
            "error": "hang",
        },
    )
    append(results, {"stage": "smoke", "key": "wgrad/bfloat16/default", "verdict": True, "status": "pass"})
    assert check.correctness_op(check.target(dry_run=True), "wgrad", "default", results) == 0
    found = read(results)
    verdicts = {r["key"]: r for r in found if r.get("name") == "verdict"}
    assert verdicts["wgrad/float32/default"]["status"] == "skip"
    assert "wgrad/float32/default failed smoke: hang" in verdicts["wgrad/float32/default"]["reason"]
    assert not [r for r in found if r.get("case") and r["out_dtype"] == "float32"]  # never run
    assert verdicts["wgrad/bfloat16/default"]["status"] == "pass"


def test_results_survive_a_torn_last_line_and_keep_non_finite_numbers(tmp_path):
    results = tmp_path / "results.jsonl"
    append(results, {"stage": "timing", "ms": float("nan"), "errors": [float("inf")]})
    with open(results, "a") as f:
        f.write('{"stage": "tim')  # killed mid-write
    assert read(results) == [{"stage": "timing", "ms": "nan", "errors": ["inf"]}]


def test_an_unwritten_row_is_an_infinite_error():
    prob = check.make_case("fprop", [3, 0, 5], 16, 32, 2, torch.device("cpu"))
    out = prob.call(check.target(dry_run=True), "correctness", torch.float32, "default")
    assert prob.error(out) < check.tolerance(torch.float32, "torch")
    out[4] = float("nan")  # a row of group 2 the kernel never wrote (NaN-prefilled)
    assert prob.error(out) == float("inf")


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad", "mx"])
def test_rows_past_the_last_group_end_hold_nan_and_inf_that_the_reference_never_sees(op: str):
    prob = check.make_case(op, [3, 0, 5], 16, 32, 4, torch.device("cpu"))
    tails = [prob.lhs[-4:], *([prob.rhs[-4:]] if op == "wgrad" else [])]
    for tail in tails:
        assert tail[0].isnan().all() and (tail[1] == float("inf")).all() and (tail[2] == -float("inf")).all()
    assert prob.lhs[:-4].isfinite().all()
    out = prob.call(check.target(dry_run=True), "correctness", torch.float32, "default")
    assert prob.error(out) < 1e-2  # the torch reference reads no row past offs[-1]


@pytest.mark.parametrize("sizes", [[3, 0, 70, 130], [64, 5, 0], [100]])
def test_a_planted_zero_times_inf_in_wgrads_tail_rows_is_caught_by_the_inputs(sizes: list[int]):
    """The sm90 in-place wgrad before its fix: the last group's last chunk read past offs[-1], dY's
    rows there zeroed, X's not. The NaN / Inf tails make that NaN; finite ones would hide it."""
    prob = check.make_case("wgrad", sizes, 16, 32, 5, torch.device("cpu"))
    for out_dtype in (torch.bfloat16, torch.float32):
        buggy = check.in_place_tail_bug(prob.lhs, prob.rhs, prob.offs, out_dtype)
        assert prob.error(buggy) == float("inf")
    finite = dataclasses.replace(prob, lhs=prob.lhs.nan_to_num(posinf=1e4, neginf=-1e4, nan=1e4))
    finite.rhs = prob.rhs.nan_to_num(posinf=1e4, neginf=-1e4, nan=1e4)
    buggy = check.in_place_tail_bug(finite.lhs, finite.rhs, finite.offs, torch.float32)
    assert finite.error(buggy) < 1e-5  # 0 x 1e4 = 0: the old finite tails could not see it


def test_an_element_still_holding_the_prefill_is_unwritten_and_a_computed_nan_is_not():
    for dtype in (torch.bfloat16, torch.float32):
        int_dtype, bits = check._UNWRITTEN_BITS[dtype]
        out = torch.full((4,), bits, dtype=int_dtype).view(dtype)
        assert out.isnan().all()
        out[1] = float("nan")  # what a kernel computing 0 x Inf writes
        out[2] = 1.0
        assert check.unwritten(out).tolist() == [True, False, False, True]


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


def test_the_tail_rows_are_checked_where_the_output_is_the_kernels_first_allocation():
    """Through the MX op on sm90 the BF16 conversion allocates after the prefill (an H200 showed all
    33 tail rows of an FP32 output "written" by it): not checked there, fprop's check covers that
    kernel; the block-scaled MX kernel on sm100 and every other op are checked."""
    sm90, sm100 = (
        check.Target(torch.device("cpu"), f"cute-{a}", f"{a}a", False) for a in ("sm_90", "sm_100")
    )
    assert "fprop's check covers the kernel" in check.unchecked_tail(sm90, "mx")
    assert [check.unchecked_tail(sm90, op) for op in ("fprop", "dgrad")] == ["", ""]
    assert check.unchecked_tail(sm100, "mx") == ""
    torch_target = check.Target(torch.device("cpu"), "torch", "sm_90a", True)
    assert check.unchecked_tail(torch_target, "fprop") == "torch backend"


def test_sass_counts_spills_inside_the_mma_loop_apart_from_the_others():
    sass = "\n".join(
        [
            "        /*0010*/                   STL [R1], R2 ;",
            "        /*0020*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT ;",
            "        /*0030*/                   LDL.64 R4, [R1+0x8] ;",
            "        /*0040*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8] ;",
            "        /*0050*/                   LDL.LU R6, [R1] ;",
            "        /*0060*/                   FADD R1, R2, R3 ;",
            "        /*0070*/                   UTMASTG.3D [UR4], [UR8] ;",
        ]
    )
    assert check.sass_counts(sass) == {"mma": 2, "local": 3, "local_in_mma_loop": 1, "tma_store": 1}
    none = {"mma": 0, "local": 0, "local_in_mma_loop": 0, "tma_store": 0}
    assert check.sass_counts("FADD R1, R2, R3 ;") == none


@pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_smoke_problem_takes_every_walker_over_several_tiles_and_every_ring_around(arch: str):
    """With two persistent walkers (CTAs, or clusters), each takes three tiles or more (so the two
    accumulator stages wrap) of 8 K tiles or more (so a ring of at most 7 stages wraps in every tile)."""
    from cutlass_kernels import registry

    for spec in registry.all_specs(arch):
        kernel = registry.kernel_for(spec)
        # the walk's tile: sm90 clusters pair M tiles, sm100 clusters of CTA pairs pair N tiles
        walk_m, walk_n = (
            spec.tile_m * getattr(kernel, "cluster_m", 1),
            spec.tile_n * getattr(kernel, "cluster_n", 1),
        )
        tile_k = 128 if spec.mx else 64
        k = check.SMOKE_MX_K if spec.mx else check.SMOKE_K
        offs = torch.tensor(check.SMOKE_SIZES).cumsum(0).tolist()
        if spec.op == "wgrad":  # per group an N x K grid of dW, reducing over the group's 64-row chunks
            problem = tile_schedule.GroupedProblem(True, walk_m, walk_n, tile_schedule.WGRAD_CHUNK)
            shape = tile_schedule.WalkShape(-(-check.SMOKE_N // walk_m), -(-k // walk_n), 0, check.SMOKE_N)
        else:
            out_n, reduction = (k, check.SMOKE_N) if spec.op == "dgrad" else (check.SMOKE_N, k)
            problem = tile_schedule.GroupedProblem(False, walk_m, walk_n, tile_k)
            shape = tile_schedule.WalkShape(0, -(-out_n // walk_n), reduction // tile_k, offs[-1])
        for walker in range(check.SMOKE_WALKERS):
            tiles = list(tile_schedule.walk(problem, offs, shape, walker, check.SMOKE_WALKERS))
            assert len(tiles) >= 3, spec.name
            assert sum(t.k_end - t.k_begin for t in tiles) >= 16, spec.name  # every ring wraps twice
            if spec.op != "wgrad":  # and within every tile (wgrad: within the 600-row group's)
                assert min(t.k_end - t.k_begin for t in tiles) >= 8, spec.name
