"""The SwiGLU forward on CUDA, fused with the MX quantization of its output: one CuTe DSL elementwise
kernel (the same source for sm_90a and sm_100a) in three output forms, and its host wrapper.

From the GEMM-1 output H = [gate | up] [rows, 2F] (BF16), one pass computes A = silu(gate) * up in
float32 registers, rounds it to BF16 (``cvt.rn.bf16x2.f32``, round to nearest even, as the torch
form's cast) and writes, by form:

- ``bfloat16``: A [rows, F] (the down projection's operand in a BF16 layer): 6 bytes moved an
  element (4 read, 2 written);
- ``codes``: A's MXFP8 form, E4M3 codes [rows, F] and an E8M0 scale per 32 [rows, F / 32] (what
  block-scaled MMA reads): 5.03 bytes an element;
- ``values``: the BF16 values those represent [rows, F] (what an arch without block-scaled MMA
  multiplies in the MX GEMM): 6 bytes an element.

The MX forms quantize the BF16-rounded A, each block of 32 by the MX quantization kernel's own block
step (:func:`cutlass_kernels.mx_quant_kernel.write_block`, :mod:`cutlass_kernels.mxfp8_bits`'
arithmetic), so their output is the torch form's quantization of this kernel's A bit for bit (NaN's
sign aside): ``quantize_mx(A)`` and ``fake_quantize(A)``, no float32 or BF16 temporary in memory.
Against the torch form's forward (``(silu(gate) * up).to(bfloat16)`` in float32) the kernel's A is
not bit-identical but within a derived tolerance (:mod:`cutlass_kernels.swiglu_forward_check`): the
sigmoid is ``rcp.approx(1 + ex2.approx.ftz(-g log2 e))`` as in the SwiGLU backward kernel, with one
difference: the reciprocal keeps subnormal results (``rcp.approx.f32``, not ``.ftz``), so that from
g = -87.3, where the sigmoid leaves float32's normal range, to g = -88.7, where exp(-g) overflows in
both forms, silu(g) stays the torch form's (~1e-36 rather than 0): its NaN and infinity follow the
torch form's everywhere (module ``swiglu_forward_check``).

Layout: one thread a block of 32 columns of one row (a ``unit``): four 128-bit loads of gate and four
of up (128 bytes in flight a thread, all issued before the first use), 32 sigmoids, the BF16
rounding, and four 128-bit stores of A or of the values, or two of codes and one scale byte. Units
are numbered row-major (row, block column), so a unit's outputs are the 32 contiguous elements (and
the one scale) at its number in the [rows, F] (and [rows, F / 32]) outputs; 128 threads a CTA,
``CTAS_PER_SM`` CTAs per SM, each thread walking the units with a grid stride, its (row, block)
carried from one unit to the next by addition (one division per thread). No shared memory, no
synchronization, no host sync: the launch can be captured in a CUDA graph.

Rows: every row of H is computed; there are no groups in an elementwise pass. The layers' H holds
exactly the routed rows (the dispatch's group ends ``offs`` end at its last row), so no padded tail
reaches the kernel; a caller whose H had rows past its last group end (which a grouped GEMM leaves
unwritten) gets those rows' SwiGLU of whatever they hold, and the grouped GEMM that reads A reads
none of them.

F must be a positive multiple of 32 (whole MX blocks, 16-byte aligned rows), rows x F at most
2^31 - 1 (int32 unit and element indices of the outputs; H's rows are addressed in 64 bits).
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
from cutlass._mlir.dialects import llvm
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor
from cutlass.cutlass_dsl import T, dsl_user_op
from torch._subclasses.fake_tensor import is_fake

from cutlass_kernels import planning
from cutlass_kernels.cute_base import ALIGN_BYTES, compile_host, compile_once, sm_count, to_cute
from cutlass_kernels.formats import MX_BLOCK as BLOCK
from cutlass_kernels.formats import SCALE_MODES
from cutlass_kernels.mx_quant_kernel import as_blocks, part, write_block
from cutlass_kernels.mxfp8 import MXTensor, MXValues
from cutlass_kernels.swiglu_kernel import CAPABILITIES, widen

THREADS = 128
CTAS_PER_SM = 8  # launch bound: ptxas keeps <= 64 registers so 8 CTAs (1024 threads) fit an SM
VEC = ALIGN_BYTES // 2  # BF16 per 128-bit access
FORMS = ("bfloat16", "codes", "values")
MX_FORMS = FORMS[1:]
MAX_ELEMENTS = 2**31 - 1  # rows x F: int32 unit and element indices of the outputs
NAME = "swiglu_forward"
_NEG_LOG2E = -math.log2(math.e)


# ------------------------------------------------------------------------------------------ kernel


@cute.kernel
def _swiglu_forward_kernel(
    h: cute.Tensor,
    out: cute.Tensor,
    scale: Any,
    ctas: cutlass.Int32,
    form: cutlass.Constexpr,
    exact: cutlass.Constexpr,
) -> None:
    """h: (rows, 2F) BF16; out: (units, 32): BF16 A or values, or uint8 codes; scale: (units,) uint8
    (codes only); ctas: the grid's size (a parameter, not ``%nctaid``, so that the stride's division
    by the blocks a row stays out of the loop)."""
    tid, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    rows, f2 = h.shape
    blocks = f2 // (2 * BLOCK)  # units per row; up starts 4 * blocks vectors into H's row
    # H as compact rows (a 64-bit row stride from F alone), as (8 elements, (row, vector column))
    v_h = cute.zipped_divide(
        cute.make_tensor(
            h.iterator,
            cute.make_layout((rows, f2), stride=(cute.assume(cutlass.Int64(f2), divby=2 * BLOCK), 1)),
        ),
        (1, VEC),
    )
    v_out = cute.zipped_divide(out, (1, ALIGN_BYTES * 8 // out.element_type.width))
    load = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16, num_bits_per_copy=128)
    store = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16, num_bits_per_copy=128)
    first, step = cta * THREADS + tid, ctas * THREADS
    row, col = first // blocks, first % blocks
    step_rows, step_cols = step // blocks, step % blocks
    for unit in cutlass.range(first, rows * blocks, step):
        gate = cute.make_rmem_tensor(cute.make_layout(BLOCK), cutlass.BFloat16)
        up = cute.make_rmem_tensor(cute.make_layout(BLOCK), cutlass.BFloat16)
        for j in cutlass.range_constexpr(BLOCK // VEC):
            cute.copy(load, v_h[(None, (row, col * (BLOCK // VEC) + j))], part(gate, j, VEC))
            cute.copy(load, v_h[(None, (row, (blocks + col) * (BLOCK // VEC) + j))], part(up, j, VEC))
        a = _swiglu_block(gate, up)
        if cutlass.const_expr(form == "bfloat16"):
            for j in cutlass.range_constexpr(BLOCK // VEC):
                cute.copy(store, part(a, j, VEC), v_out[(None, (unit, j))])
        else:
            write_block(a, unit, v_out, scale, exact, form == "values")
        col = col + step_cols
        wraps = col >= blocks
        row = row + step_rows + cutlass.select_(wraps, 1, 0)
        col = cutlass.select_(wraps, col - blocks, col)


@cute.jit
def _swiglu_block(gate: cute.Tensor, up: cute.Tensor) -> cute.Tensor:
    """A = silu(gate) * up of one unit, a BF16 fragment of 32 from the gate and up fragments: per
    element one multiply, ex2, add, reciprocal and two multiplies in float32, then the rounding to
    BF16 two at a time."""
    g, u = widen(gate), widen(up)
    a = cute.make_rmem_tensor(cute.make_layout(BLOCK), cutlass.Float32)
    for k in cutlass.range_constexpr(BLOCK):
        s = rcp_approx(cute.math.exp2(g[k] * _NEG_LOG2E, fastmath=True) + 1.0)
        a[k] = (g[k] * s) * u[k]
    out = cute.make_rmem_tensor(cute.make_layout(BLOCK), cutlass.BFloat16)
    out.store(a.load().to(cutlass.BFloat16))
    return out


@dsl_user_op
def rcp_approx(x: cutlass.Float32, *, loc: Any = None, ip: Any = None) -> cutlass.Float32:
    """``rcp.approx.f32``: 1 / x to within an ulp, subnormal results kept (the DSL's
    ``cute.arch.rcp_approx`` is ``rcp.approx.ftz.f32``, which flushes them to zero)."""
    return cutlass.Float32(
        llvm.inline_asm(
            T.f32(),
            [cutlass.Float32(x).ir_value(loc=loc, ip=ip)],
            "rcp.approx.f32 $0, $1;",
            "=f,f",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
        )
    )


@cute.jit
def _codes_host(
    h: cute.Tensor,
    codes: cute.Tensor,
    scale: cute.Tensor,
    ctas: cutlass.Int32,
    stream: cuda.CUstream,  # annotated: an exported kernel's C signature is built from the annotations
    exact: cutlass.Constexpr,
) -> None:
    _swiglu_forward_kernel(h, as_blocks(codes), scale, ctas, "codes", exact).launch(
        grid=[ctas, 1, 1],
        block=[THREADS, 1, 1],
        stream=stream,
        min_blocks_per_mp=CTAS_PER_SM,
        preferred_smem_carveout=0,  # no shared memory: all of the SM's L1 / shared storage as L1
    )


@cute.jit
def _bf16_host(
    h: cute.Tensor,
    out: cute.Tensor,
    ctas: cutlass.Int32,
    stream: cuda.CUstream,
    form: cutlass.Constexpr,
    exact: cutlass.Constexpr,
) -> None:
    _swiglu_forward_kernel(h, as_blocks(out), None, ctas, form, exact).launch(
        grid=[ctas, 1, 1],
        block=[THREADS, 1, 1],
        stream=stream,
        min_blocks_per_mp=CTAS_PER_SM,
        preferred_smem_carveout=0,
    )


# ---------------------------------------------------------------------------------------- compile


def kinds() -> list[tuple[str, str | None]]:
    """Every (form, scale mode) compiled: A alone (no mode), and each MX form in each mode."""
    return [("bfloat16", None), *((form, mode) for form in MX_FORMS for mode in SCALE_MODES)]


def _check_kind(form: str, mode: str | None) -> None:
    if form not in FORMS:
        raise ValueError(f"SwiGLU forward form {form!r} is not allowed; allowed: {', '.join(FORMS)}")
    if (form, mode) not in kinds():
        allowed = "none" if form == "bfloat16" else ", ".join(SCALE_MODES)
        raise ValueError(f"MXFP8 scale mode {mode!r} is not allowed for form {form}; allowed: {allowed}")


def kernel_name(form: str, mode: str | None, arch: str) -> str:
    _check_kind(form, mode)
    return f"{NAME}_bfloat16_{arch}" if form == "bfloat16" else f"{NAME}_mx_{mode}_{form}_{arch}"


def _fake_operands(form: str) -> list[Any]:
    """Fake H (rows, 2F) BF16 with 2F a multiple of 64 and 16-byte aligned rows, and the flat outputs
    of rows x F elements: BF16, or uint8 codes and scales."""
    rows, f2 = cute.sym_int32(), cute.sym_int32(divisibility=2 * BLOCK)
    h = make_fake_tensor(
        cutlass.BFloat16,
        (rows, f2),
        stride=(cute.sym_int64(divisibility=2 * BLOCK), 1),
        assumed_align=ALIGN_BYTES,
    )
    n = cute.sym_int32(divisibility=BLOCK)
    if form != "codes":
        return [h, make_fake_compact_tensor(cutlass.BFloat16, (n,), assumed_align=ALIGN_BYTES)]
    codes = make_fake_compact_tensor(cutlass.Uint8, (n,), assumed_align=ALIGN_BYTES)
    return [h, codes, make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int32(),), assumed_align=1)]


_COMPILED: dict[tuple[str, str | None, str | None], Any] = {}


def compile_kernel(
    form: str, mode: str | None, arch: str | None = None, dump_dir: Path | None = None, options: str = ""
) -> Any:
    """The ``form`` x ``mode`` kernel compiled from fake tensors (no GPU needed), once per arch: one of
    ``ARCHES``, or None for the arch this process runs (loaded from the kernel cache where that holds
    it). With ``dump_dir`` (an arch named) also ``<kernel_name>.ptx`` and ``.cubin`` there."""
    _check_kind(form, mode)
    return compile_once(_COMPILED, kernel_name, _compile, (form, mode), arch, dump_dir, options)


def _compile(form: str, mode: str | None, arch: str | None, dump_dir: Path | None, options: str) -> Any:
    args = [*_fake_operands(form), cutlass.Int32(1)]
    name = kernel_name(form, mode, str(arch))
    exact = mode == "exact"
    if form == "codes":
        return compile_host(_codes_host, args, name, arch, dump_dir, options, (exact,))
    return compile_host(_bf16_host, args, name, arch, dump_dir, options, (form, exact))


def compile_all(arch: str, out_dir: Path, options: str = "") -> dict[str, Any]:
    """Compile every form x mode kernel for ``arch`` and write its PTX and cubin into ``out_dir``;
    the kernels by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        kernel_name(form, mode, arch): compile_kernel(form, mode, arch, out_dir, options)
        for form, mode in kinds()
    }


# ---------------------------------------------------------------------------------------- wrapper


def bytes_moved(rows: int, f: int, form: str) -> int:
    """HBM bytes of one call: H [rows, 2F] BF16 read; A or the values (BF16), or the codes and a scale
    byte per 32, written."""
    _check_kind(form, None if form == "bfloat16" else SCALE_MODES[0])
    written = rows * f * 2 if form != "codes" else rows * f + rows * f // BLOCK
    return rows * 2 * f * 2 + written


def layout_reason(h: torch.Tensor) -> str:
    """Why the kernel's layout cannot take ``h`` (``""`` when it can): device-independent, so it holds
    for fake tensors as for real ones."""
    if h.dim() != 2 or h.shape[1] % 2:
        return f"need h [rows, 2F]; got h {list(h.shape)}"
    if h.dtype != torch.bfloat16:
        return f"h is {h.dtype}; the kernel takes bfloat16"
    f = h.shape[1] // 2
    if f <= 0 or f % BLOCK:
        return f"F={f} is not a positive multiple of {BLOCK}: the kernel works in whole MX blocks"
    if h.shape[0] * f > MAX_ELEMENTS:
        return f"h is {list(h.shape)}; the kernel takes rows x F up to {MAX_ELEMENTS} (int32 indices)"
    if not h.is_contiguous() or h.storage_offset() % VEC:
        return f"h is not contiguous from a 16-byte aligned offset (strides {h.stride()})"
    return ""


def unsupported_reason(h: torch.Tensor) -> str:
    """Why the kernel cannot take this real tensor (``""`` when it can): the layout, then the device
    (CUDA, compute capability 9.x or 10.x) and the base address."""
    reason = layout_reason(h)
    if reason:
        return reason
    if not h.is_cuda:
        return f"h is on {h.device}; the kernel takes a CUDA tensor"
    cap = torch.cuda.get_device_capability(h.device)
    if cap[0] not in CAPABILITIES:
        return f"compute capability {cap[0]}.{cap[1]}; the kernel runs on 9.x and 10.x (Hopper, Blackwell)"
    if h.data_ptr() % ALIGN_BYTES:
        return "h does not start at a 16-byte aligned address"
    return ""


def plan(h: torch.Tensor, form: str) -> tuple[torch.Tensor, ...]:
    """The uninitialized outputs of ``form`` for ``h``: (A,), (values,) or (codes, scales); ValueError
    naming what the kernel's layout cannot take."""
    reason = layout_reason(h)
    if reason:
        raise ValueError(f"the SwiGLU forward kernel cannot take this tensor: {reason}")
    rows, f = h.shape[0], h.shape[1] // 2
    if form != "codes":
        return (torch.empty(rows, f, dtype=torch.bfloat16, device=h.device),)
    return (
        torch.empty(rows, f, dtype=torch.uint8, device=h.device),
        torch.empty(rows, f // BLOCK, dtype=torch.uint8, device=h.device),
    )


def output_reason(h: torch.Tensor, form: str, outs: tuple[torch.Tensor, ...]) -> str:
    """Why ``outs`` are not outputs the kernel can write for ``h`` in ``form`` (``""``: they are):
    :func:`plan`'s shapes and dtypes, contiguous, on h's device, 16-byte aligned (the scales: any
    address)."""
    rows, f = h.shape[0], h.shape[1] // 2
    wanted = (
        [((rows, f), torch.bfloat16)]
        if form != "codes"
        else [((rows, f), torch.uint8), ((rows, f // BLOCK), torch.uint8)]
    )
    if len(outs) != len(wanted):
        return f"form {form} writes {len(wanted)} output(s), got {len(outs)}"
    for i, (out, (shape, dtype)) in enumerate(zip(outs, wanted, strict=True)):
        if tuple(out.shape) != shape or out.dtype != dtype or not out.is_contiguous():
            return f"output {i} {list(out.shape)} {out.dtype} is not a contiguous {dtype} {list(shape)}"
        if out.device != h.device or (i == 0 and out.data_ptr() % ALIGN_BYTES):
            return f"output {i} is not on {h.device} at a 16-byte aligned address"
    return ""


@cache
def _ctas(device_index: int) -> int:
    return sm_count(torch.device("cuda", device_index)) * CTAS_PER_SM


def launch(form: str, mode: str | None, h: torch.Tensor, *outs: torch.Tensor) -> None:
    """Run the ``form`` x ``mode`` kernel on ``h`` into ``outs`` (laid out as :func:`plan` makes them)
    on the current stream; ValueError naming what it cannot take."""
    _check_kind(form, mode)
    reason = unsupported_reason(h) or output_reason(h, form, outs)
    if reason:
        raise ValueError(f"the SwiGLU forward kernel cannot take these tensors: {reason}")
    units = h.shape[0] * h.shape[1] // (2 * BLOCK)
    if units == 0:
        return
    ctas = min(_ctas(h.device.index or 0), -(-units // THREADS))
    stream = cuda.CUstream(torch.cuda.current_stream(h.device).cuda_stream)
    args = [to_cute(h), to_cute(outs[0].view(-1))]
    if form == "codes":
        args.append(to_cute(outs[1].view(-1), assumed_align=1))
    compile_kernel(form, mode)(*args, cutlass.Int32(ctas), stream)


def swiglu_forward(h: torch.Tensor, form: str = "bfloat16", mode: str | None = None) -> Any:
    """``form`` of A = silu(gate) * up for H = [gate | up] (CUDA, BF16, contiguous, F a multiple of
    32): A [rows, F] (``bfloat16``), an :class:`~cutlass_kernels.mxfp8.MXTensor` (``codes``) or an
    :class:`~cutlass_kernels.mxfp8.MXValues` (``values``) in scale ``mode``; ValueError naming what
    the kernel cannot take. Under fake tensors only :func:`plan` runs, and inside
    ``planned_launches`` its one launch is recorded (none for zero rows, as :func:`launch`)."""
    _check_kind(form, mode)
    if is_fake(h):
        outs = plan(h, form)
        if (planned := planning.current()) is not None and h.shape[0]:
            planned.launches.append(
                planning.PlannedLaunch(
                    kernel_name(form, mode, planned.arch),
                    "swiglu-forward",
                    "default",
                    planned.arch,
                    tuple(outs[0].shape),
                    str(outs[0].dtype).removeprefix("torch."),
                )
            )
    else:
        reason = unsupported_reason(h)
        if reason:
            raise ValueError(f"the SwiGLU forward kernel cannot take this tensor: {reason}")
        outs = plan(h, form)
        launch(form, mode, h, *outs)
    if form == "codes":
        return MXTensor(outs[0].view(torch.float8_e4m3fn), outs[1])
    return MXValues(outs[0]) if form == "values" else outs[0]
