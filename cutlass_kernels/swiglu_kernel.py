"""The fused SwiGLU backward on CUDA: one CuTe DSL elementwise kernel, the same source for sm_90a and
sm_100a, and its host wrapper.

From dA [rows, F] and the saved GEMM-1 output H = [gate | up] [rows, 2F], one pass writes
dH = [dA * up * silu'(gate) | dA * silu(gate)] [rows, 2F] and A = silu(gate) * up [rows, F]
(silu'(g) = s + g * s * (1 - s), s = sigmoid(g)): BF16 in and out, float32 arithmetic, s as
``rcp.approx(1 + ex2.approx(-g * log2 e))``. It is memory-bound (12 bytes moved per element of F
against about 20 SASS instructions, 2 of them MUFU), so the design is about bytes in flight:

- every global access is one 128-bit vector of 8 BF16 (``ld.global.v4.b32`` / ``st.global.v4.b32``);
  a thread loads the dA, gate and up vectors of the same 8 columns (gate and up are F apart in H's
  row) for ``ROWS_PER_THREAD`` rows, all before the first use: 96 bytes in flight per thread;
- a CTA of 128 threads covers a tile of 16 rows x 128 columns (16 threads x 8 columns along a row,
  256 contiguous bytes per tensor row, 8 rows of threads x 2 rows each). The grid is (column tiles,
  row CTAs); each CTA walks the row tiles of its column tile with a grid stride, and the row CTAs are
  sized so that the grid is ``CTAS_PER_SM`` CTAs per SM, the residency the launch bound guarantees;
- rows past the end are clamped to the last row for the loads (every load is in bounds and
  unpredicated) and skipped for the stores; columns past F (F not a multiple of 128) idle;
- the loads are plain weak loads, not ``.nc``: ptxas sinks non-coherent loads down to their first
  use, which serializes a thread's rows (one row's three loads in flight at a time, seen in the
  SASS); weak loads cannot move below the earlier rows' stores, so every row's loads issue first;
- no shared memory, no synchronization, no host sync; the launch can be captured in a CUDA graph.

F must be a positive multiple of 8 (every row 16-byte aligned, whole vectors); rows may be any count
(0: nothing is launched). One file for both arches because the kernel uses only SIMT loads, stores
and FP32 math (no TMA, tensor cores or arch-specific instructions): the arch only selects the PTX
target, so CI compiles sm_90a and sm_100a in one process (``--gpu-arch``), and a GPU of compute
capability 9.x or 10.x compiles it for its own arch (sm_103a on a GB300, say) on first use.

The wrapper is two calls: :func:`plan` checks the operands and allocates the outputs, :func:`launch`
compiles (once per arch, cached) and runs the kernel. :func:`swiglu_backward` does both, and only the
first under torch's fake tensors, so a memory estimate sees the outputs and no launch.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_tensor
from torch._subclasses.fake_tensor import is_fake

from cutlass_kernels import planning
from cutlass_kernels.cute_base import ALIGN_BYTES, compile_host, compile_once, sm_count, to_cute

VEC = ALIGN_BYTES // 2  # BF16 elements per 128-bit access
COL_THREADS = 16  # threads along a row: 128 columns, 256 contiguous bytes per tensor row
ROW_THREADS = 8
ROWS_PER_THREAD = 2  # rows whose loads a thread issues before the first use
THREADS = COL_THREADS * ROW_THREADS
TILE_ROWS = ROW_THREADS * ROWS_PER_THREAD
TILE_COLS = COL_THREADS * VEC
CTAS_PER_SM = 8  # launch bound: ptxas keeps <= 64 registers so 8 CTAs (1024 threads) fit an SM
MAX_EXTENT = 2**31 - TILE_ROWS  # int32 row and column indices, a tile past the last row included
NAME = "swiglu_backward_bfloat16"
CAPABILITIES = (9, 10)  # compute capability majors it runs on, compiled for the device's own arch
_NEG_LOG2E = -math.log2(math.e)


# ------------------------------------------------------------------------------------------ kernel


@cute.kernel
def _swiglu_backward_kernel(da: cute.Tensor, h: cute.Tensor, dh: cute.Tensor, a: cute.Tensor) -> None:
    tid, _, _ = cute.arch.thread_idx()
    col_tile, row_cta, _ = cute.arch.block_idx()
    _, row_ctas, _ = cute.arch.grid_dim()
    rows, f = da.shape
    vecs = f // VEC  # vectors per row of dA / A; H's up half starts ``vecs`` vectors in
    col = col_tile * COL_THREADS + tid % COL_THREADS  # this thread's vector column
    thread_row = tid // COL_THREADS
    # compact row-major views (64-bit row strides from F alone), as (8 elements, (row, vector
    # column)): one 128-bit access per vector, and one row offset shared by dA and A, H and dH
    ld = cute.assume(cutlass.Int64(f), divby=VEC)
    v_da = cute.zipped_divide(_rows(da, rows, f, ld), (1, VEC))
    v_h = cute.zipped_divide(_rows(h, rows, 2 * f, 2 * ld), (1, VEC))
    v_dh = cute.zipped_divide(_rows(dh, rows, 2 * f, 2 * ld), (1, VEC))
    v_a = cute.zipped_divide(_rows(a, rows, f, ld), (1, VEC))
    load = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16, num_bits_per_copy=128)
    store = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16, num_bits_per_copy=128)
    if col < vecs:
        for tile in cutlass.range(row_cta, cute.ceil_div(rows, TILE_ROWS), row_ctas):
            first = tile * TILE_ROWS + thread_row
            ins, at = [], []
            for i in cutlass.range_constexpr(ROWS_PER_THREAD):
                # rows past the end load the last row (every load in bounds) and store nothing; the
                # stores reuse the loads' row, so both share one offset per tensor pair
                row = cutlass.min(first + i * ROW_THREADS, rows - 1)
                d_g_u = [cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.BFloat16) for _ in range(3)]
                cute.copy(load, v_da[(None, (row, col))], d_g_u[0])
                cute.copy(load, v_h[(None, (row, col))], d_g_u[1])
                cute.copy(load, v_h[(None, (row, col + vecs))], d_g_u[2])
                ins.append(d_g_u)
                at.append(row)
            for i in cutlass.range_constexpr(ROWS_PER_THREAD):
                dgate, dup, out_a = _swiglu_backward_vector(*ins[i])
                if first + i * ROW_THREADS < rows:
                    cute.copy(store, dgate, v_dh[(None, (at[i], col))])
                    cute.copy(store, dup, v_dh[(None, (at[i], col + vecs))])
                    cute.copy(store, out_a, v_a[(None, (at[i], col))])


@cute.jit
def _rows(t: cute.Tensor, rows, cols, ld) -> cute.Tensor:
    return cute.make_tensor(t.iterator, cute.make_layout((rows, cols), stride=(ld, 1)))


@cute.jit
def _swiglu_backward_vector(d_bf16: cute.Tensor, g_bf16: cute.Tensor, u_bf16: cute.Tensor):
    """(dgate, dup, A) of one vector, BF16 fragments, from its dA, gate and up fragments.

    With p = dA * s: dup = dA * silu = p * g, A = silu * up, and
    dgate = dA * up * s * (1 + g * (1 - s)) = up * (p + dup * (1 - s)): nine FP32 operations and
    two MUFU per element."""
    d, g, u = widen(d_bf16), widen(g_bf16), widen(u_bf16)
    dgate, dup, out_a = (cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.Float32) for _ in range(3))
    for k in cutlass.range_constexpr(VEC):
        s = cute.arch.rcp_approx(cute.math.exp2(g[k] * _NEG_LOG2E, fastmath=True) + 1.0)
        p = d[k] * s
        dup[k] = p * g[k]
        out_a[k] = (g[k] * s) * u[k]
        dgate[k] = u[k] * (dup[k] * (1.0 - s) + p)
    outs = [cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.BFloat16) for _ in range(3)]
    for out, value in zip(outs, (dgate, dup, out_a), strict=True):
        out.store(value.load().to(cutlass.BFloat16))  # round to nearest even, two per instruction
    return outs[0], outs[1], outs[2]


@cute.jit
def widen(t: cute.Tensor) -> cute.Tensor:
    """A BF16 fragment (an even number of elements) as FP32, exactly: a BF16 is the top half of its
    FP32, so each 32-bit word of two gives its low element by a shift and its high one by a mask (one
    instruction each)."""
    n = cute.size(t)
    words = cute.recast_tensor(t, cutlass.Uint32)
    bits = cute.make_rmem_tensor(cute.make_layout(n), cutlass.Uint32)
    for k in cutlass.range_constexpr(n // 2):
        bits[2 * k] = words[k] << 16
        bits[2 * k + 1] = words[k] & cutlass.Uint32(0xFFFF0000)
    return cute.recast_tensor(bits, cutlass.Float32)


@cute.jit
def _swiglu_backward_host(
    da: cute.Tensor,
    h: cute.Tensor,
    dh: cute.Tensor,
    a: cute.Tensor,
    row_ctas: cutlass.Int32,
    stream: cuda.CUstream,  # annotated: an exported kernel's C signature is built from the annotations
) -> None:
    col_tiles = cute.ceil_div(da.shape[1] // VEC, COL_THREADS)
    _swiglu_backward_kernel(da, h, dh, a).launch(
        grid=[col_tiles, row_ctas, 1],
        block=[THREADS, 1, 1],
        stream=stream,
        min_blocks_per_mp=CTAS_PER_SM,
        preferred_smem_carveout=0,  # no shared memory: all of the SM's L1 / shared storage as L1
    )


# ---------------------------------------------------------------------------------------- compile


def _fake_operands() -> list[Any]:
    """Fake (rows, F), (rows, 2F), (rows, 2F), (rows, F) row-major BF16 tensors: symbolic rows, F a
    multiple of 8, 16-byte aligned rows and bases."""
    rows, f, f2 = cute.sym_int32(), cute.sym_int32(divisibility=VEC), cute.sym_int32(divisibility=VEC)
    shapes = ((rows, f), (rows, f2), (rows, f2), (rows, f))
    return [
        make_fake_tensor(
            cutlass.BFloat16, shape, stride=(cute.sym_int64(divisibility=VEC), 1), assumed_align=ALIGN_BYTES
        )
        for shape in shapes
    ]


_COMPILED: dict[tuple[str | None], Any] = {}


def kernel_name(arch: str) -> str:
    return f"{NAME}_{arch}"


def compile_kernel(arch: str | None = None, dump_dir: Path | None = None, options: str = "") -> Any:
    """The kernel compiled from fake tensors (no GPU needed), cached per ``arch``: one of
    ``ARCHES``, or None for the arch the DSL targets in this process (``CUTE_DSL_ARCH``, else the
    GPU's own, e.g. sm_103a on a GB300), which is what runs, loaded from the kernel cache where that
    holds it (:mod:`cutlass_kernels.kernel_cache`). With ``dump_dir`` (an arch named) it also writes
    ``<kernel_name(arch)>.ptx`` and ``.cubin`` there (and recompiles); ``options``: the DSL's compile
    options beside those (a build for export names its host target)."""
    return compile_once(_COMPILED, kernel_name, _compile, (), arch, dump_dir, options)


def _compile(arch: str | None, dump_dir: Path | None, options: str) -> Any:
    name = kernel_name(str(arch))
    return compile_host(
        _swiglu_backward_host, [*_fake_operands(), cutlass.Int32(1)], name, arch, dump_dir, options
    )


def compile_all(arch: str, out_dir: Path, options: str = "") -> dict[str, Any]:
    """Compile the kernel for ``arch`` and write its PTX and cubin into ``out_dir`` (the
    ``python -m cutlass_kernels compile`` form of :func:`compile_kernel`); the kernel by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {kernel_name(arch): compile_kernel(arch, out_dir, options)}


# ---------------------------------------------------------------------------------------- wrapper


def bytes_moved(rows: int, f: int) -> int:
    """HBM bytes of one call: read dA [rows, F] and H [rows, 2F], write dH [rows, 2F] and A [rows, F]."""
    return 2 * rows * (f + 2 * f + 2 * f + f)


def layout_reason(da: torch.Tensor, h: torch.Tensor) -> str:
    """Why the kernel's layout cannot take ``da`` and ``h`` (``""`` when it can): device-independent,
    so it holds for fake tensors as for real ones."""
    if h.dim() != 2 or h.shape[1] % 2 or da.shape != (h.shape[0], h.shape[1] // 2):
        return f"need h [rows, 2F] and da [rows, F]; got h {list(h.shape)} and da {list(da.shape)}"
    if da.dtype != torch.bfloat16 or h.dtype != torch.bfloat16:
        return f"da is {da.dtype} and h is {h.dtype}; the kernel takes bfloat16"
    f = da.shape[1]
    if f <= 0 or f % VEC:
        return f"F={f} is not a positive multiple of {VEC}: the kernel moves {VEC} BF16 (16 bytes) per access"
    if max(h.shape) > MAX_EXTENT:
        return f"h is {list(h.shape)}; the kernel takes extents up to {MAX_EXTENT} (int32 indices)"
    for name, t in (("da", da), ("h", h)):
        if not t.is_contiguous() or t.storage_offset() % VEC:
            return f"{name} is not contiguous from a 16-byte aligned offset (strides {t.stride()})"
    return ""


def unsupported_reason(da: torch.Tensor, h: torch.Tensor) -> str:
    """Why the kernel cannot take these real tensors (``""`` when it can): the layout, then the device
    (CUDA, compute capability 9.x or 10.x) and the base addresses."""
    reason = layout_reason(da, h)
    if reason:
        return reason
    if not (da.is_cuda and h.is_cuda) or da.device != h.device:
        return f"da is on {da.device} and h on {h.device}; the kernel takes one CUDA device"
    cap = torch.cuda.get_device_capability(h.device)
    if cap[0] not in CAPABILITIES:
        return f"compute capability {cap[0]}.{cap[1]}; the kernel runs on 9.x and 10.x (Hopper, Blackwell)"
    if da.data_ptr() % ALIGN_BYTES or h.data_ptr() % ALIGN_BYTES:
        return "da or h does not start at a 16-byte aligned address"
    return ""


def plan(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The uninitialized outputs (dH [rows, 2F], A [rows, F]) for ``da`` and ``h``; ValueError naming
    what the kernel's layout cannot take."""
    reason = layout_reason(da, h)
    if reason:
        raise ValueError(f"the SwiGLU backward kernel cannot take these tensors: {reason}")
    return torch.empty_like(h), torch.empty_like(da)


def grid_row_ctas(rows: int, f: int, sms: int) -> int:
    """CTAs along the rows: ``CTAS_PER_SM`` per SM over all column tiles, at least one, and no more
    than there are row tiles."""
    col_tiles = -(-f // TILE_COLS)
    row_tiles = -(-rows // TILE_ROWS)
    return max(1, min(row_tiles, sms * CTAS_PER_SM // col_tiles))


@cache
def _sms(device_index: int) -> int:
    return sm_count(torch.device("cuda", device_index))


def launch(da: torch.Tensor, h: torch.Tensor, dh: torch.Tensor, a: torch.Tensor) -> None:
    """Run the kernel (compiled on first use for the device's arch) on the current stream, writing
    ``dh`` and ``a``, laid out as :func:`plan` makes them; ValueError naming what it cannot take."""
    reason = unsupported_reason(da, h) or output_reason(da, h, dh, a)
    if reason:
        raise ValueError(f"the SwiGLU backward kernel cannot take these tensors: {reason}")
    if da.shape[0] == 0:
        return
    from cuda.bindings import driver

    compiled = compile_kernel()
    stream = driver.CUstream(torch.cuda.current_stream(h.device).cuda_stream)
    row_ctas = grid_row_ctas(da.shape[0], da.shape[1], _sms(h.device.index or 0))
    compiled(to_cute(da), to_cute(h), to_cute(dh), to_cute(a), cutlass.Int32(row_ctas), stream)


def output_reason(da: torch.Tensor, h: torch.Tensor, dh: torch.Tensor, a: torch.Tensor) -> str:
    """Why ``dh`` and ``a`` are not outputs the kernel can write for ``da`` and ``h`` (``""``: they
    are): h's and da's shapes, BF16, contiguous, on h's device, 16-byte aligned."""
    for name, out, like in (("dh", dh, h), ("a", a, da)):
        if out.shape != like.shape or out.dtype != torch.bfloat16 or not out.is_contiguous():
            return f"{name} {list(out.shape)} {out.dtype} is not a contiguous bfloat16 {list(like.shape)}"
        if out.device != h.device or out.data_ptr() % ALIGN_BYTES:
            return f"{name} is not on {h.device} at a 16-byte aligned address"
    return ""


def swiglu_backward(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dH [rows, 2F], A [rows, F]) from dA [rows, F] and H [rows, 2F], CUDA BF16 contiguous, F a
    multiple of 8; ValueError naming what the kernel cannot take. Under fake tensors only :func:`plan`
    runs (their device is the planner's: the outputs, no device check, compile or launch), and inside
    ``planned_launches`` its one launch is recorded (none for zero rows, as :func:`launch`)."""
    if is_fake(da) or is_fake(h):
        outs = plan(da, h)
        if (planned := planning.current()) is not None and da.shape[0]:
            dh, a = outs
            planned.launches.append(
                planning.PlannedLaunch(
                    kernel_name(planned.arch),
                    "swiglu-backward",
                    "default",
                    planned.arch,
                    tuple(dh.shape),
                    "bfloat16",
                )
            )
        return outs
    reason = unsupported_reason(da, h)
    if reason:
        raise ValueError(f"the SwiGLU backward kernel cannot take these tensors: {reason}")
    dh, a = plan(da, h)
    launch(da, h, dh, a)
    return dh, a
