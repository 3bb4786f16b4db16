"""``planned_launches``: under fake CUDA tensors and no GPU, every api entry point goes through the CuTe
wrapper of the planned arch, which allocates and copies as on a GPU and records each launch it would
make instead of compiling and launching; nothing syncs the host, nothing compiles, nothing changes
outside the context. Also: the device run's MX smoke, correctness and CUDA-graph replay shapes reach
the sm100 block-scaled kernel by its own shape rules."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensor, FakeTensorMode

from cutlass_kernels import api, check, planning, quantize_mx
from cutlass_kernels.planning import planned_launches

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)
SIZES = [10, 0, 190, 90, 3]  # an empty group, ragged ends, rows past offs[-1]: 300 rows in all
M, N, K = 300, 512, 256


def fake_cuda(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """A tensor of the fake mode around the call: a shape, a dtype and a device, no values to draw."""
    return torch.empty(*shape, device="cuda", dtype=dtype)


def offsets() -> torch.Tensor:
    return torch.tensor(SIZES[:-1], device="cuda").cumsum(0).to(torch.int32)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_every_entry_point_records_its_launch_and_allocates_its_output(arch: str):
    from cutlass_kernels import cute_base

    compiled = dict(cute_base._CACHE)
    with FakeTensorMode(allow_non_fake_inputs=False), planned_launches(arch) as launches:
        a, b, dy, offs = fake_cuda(M, K), fake_cuda(4, N, K), fake_cuda(M, N), offsets()
        outs = {
            "fprop": api.grouped_gemm(a, b, offs),
            "dgrad": api.grouped_gemm_dgrad(dy, b, offs, out_dtype=torch.float32),
            "wgrad": api.grouped_gemm_wgrad(dy, a, offs),
            "mx": api.grouped_gemm_mx(a, quantize_mx(b.float()), offs, mode="exact", b_values=b),
        }
        # a data-dependent call on these tensors raises, so one inside the wrappers would have raised
        with pytest.raises(DataDependentOutputException):
            offs.tolist()
    expected = {
        "fprop": ((M, N), torch.bfloat16, f"grouped_fprop_bfloat16-bfloat16_128x256_{arch}"),
        "dgrad": ((M, K), torch.float32, f"grouped_dgrad_bfloat16-float32_128x256_{arch}"),
        "wgrad": ((4, N, K), torch.bfloat16, f"grouped_wgrad_bfloat16-bfloat16_128x256_{arch}"),
        "mx": (
            (M, N),
            torch.bfloat16,
            # Hopper multiplies the MX operands' BF16 values on its BF16 kernel
            "grouped_fprop_mx_float8_e4m3fn-bfloat16_128x128_sm_100a"
            if arch == "sm_100a"
            else "grouped_fprop_bfloat16-bfloat16_128x256_sm_90a",
        ),
    }
    assert [launch.kernel for launch in launches] == [kernel for _, _, kernel in expected.values()]
    for (op, out), launch in zip(outs.items(), launches, strict=True):
        shape, dtype, _ = expected[op]
        assert isinstance(out, FakeTensor) and out.device.type == "cuda"
        assert (tuple(out.shape), out.dtype) == (shape, dtype)
        assert (launch.variant, launch.arch, launch.out_dtype) == ("default", arch, str(dtype)[6:])
    assert launches[2].out_shape == (4 * N, K)  # wgrad writes dW as the kernel's (G * N, K) view
    assert launches[3].op == ("mx" if arch == "sm_100a" else "fprop")
    assert cute_base._CACHE == compiled  # nothing compiled


def test_named_variants_and_shapes_the_block_scaled_kernel_does_not_tile():
    with FakeTensorMode(), planned_launches("sm_100a") as launches:
        a, b, offs = fake_cuda(M, K), fake_cuda(4, N, K), offsets()
        api.grouped_gemm(a, b, offs, variant="cta2")
        a96, b96 = fake_cuda(M, 96), fake_cuda(4, N, 96)  # K = 96: not whole 128-wide scale atoms
        api.grouped_gemm_mx(a96, quantize_mx(b96.float()), offs, mode="fast")
    assert [(launch.kernel, launch.variant) for launch in launches] == [
        ("grouped_fprop_bfloat16-bfloat16_256x256_cta2_sm_100a", "cta2"),
        ("grouped_fprop_bfloat16-bfloat16_128x256_sm_100a", "default"),  # BF16 values on the BF16 kernel
    ]
    with FakeTensorMode(), planned_launches("sm_90a") as launches:
        dy, x = fake_cuda(M, N), fake_cuda(M, K)
        api.grouped_gemm_wgrad(dy, x, offsets(), variant="inplace")  # no padded copies
    assert [launch.kernel for launch in launches] == [
        "grouped_wgrad_bfloat16-bfloat16_128x256_inplace_sm_90a"
    ]


def test_nothing_changes_outside_the_context():
    with FakeTensorMode():
        a, b, offs = fake_cuda(M, K), fake_cuda(4, N, K), offsets()
        with planned_launches("sm_90a"):
            assert api.resolve_backend("auto", a.device) == "cute-sm90"
            with pytest.raises(ValueError, match="needs a compute-capability 10.x GPU"):
                api.resolve_backend("cute-sm100", a.device)
        assert planning.current() is None
        if not torch.cuda.is_available():  # as before: no GPU, so auto is the torch reference again
            assert api.resolve_backend("auto", a.device) == "torch"
            assert api.grouped_gemm(a, b, offs).shape == (M, N)  # the reference's output, nothing planned
    with pytest.raises(ValueError, match="arch 'sm_80' is not allowed"), planned_launches("sm_80"):
        pass


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_the_device_runs_mx_shapes_reach_the_sm100_block_scaled_kernel(out_dtype: torch.dtype):
    t = check.Target(torch.device("cuda"), "cute-sm100", "sm_100a", False)
    shapes = [("smoke", check.SMOKE_SIZES, check.SMOKE_N, check.SMOKE_MX_K, check.SMOKE_TAIL)]
    shapes += [
        (c.name, c.sizes, c.n, c.k, c.tail)
        for c in check.cases(t, torch.Generator().manual_seed(0))
        if "mx" in c.ops
    ]
    gen = torch.Generator().manual_seed(1)
    graph = check.random_sizes(check.GRAPH_GROUPS, check.GRAPH_ROWS, gen, empty=2)
    shapes.append(("cuda-graph replay", graph, check.GRAPH_N, check.GRAPH_K, 0))
    # the smoke problem, the edges, a random routing, the D7168 down projection, the graph replay
    assert len(shapes) == 5
    for name, sizes, n, k, tail in shapes:
        with FakeTensorMode(), planned_launches("sm_100a") as launches:
            prob = check.make_case("mx", sizes, n, k, tail, torch.device("cuda"))
            assert check.kernel_path(t, prob, out_dtype) == "kernel", name
            prob.call(t, "correctness", out_dtype, "default")
        (launch,) = launches
        assert launch.op == "mx" and launch.kernel.startswith("grouped_fprop_mx_float8_e4m3fn-"), name
