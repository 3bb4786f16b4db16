"""MXFP8 quantization on CUDA in one pass, a CuTe DSL kernel (the same source for sm_90a and sm_100a),
and its host wrapper.

BF16 in; out either E4M3 codes with one E8M0 scale per 32 (``codes``: what block-scaled MMA reads,
and what the layers' dispatch sends), or the BF16 values those represent (``values``: what an arch
without block-scaled MMA multiplies on its BF16 GEMM, and the backward's fake quantization). The
arithmetic is :mod:`cutlass_kernels.mxfp8_bits`' steps: the block maximum and the scale exponent in
integer arithmetic on the BF16 bits (the very function the torch mirror runs), one float32 multiply
by a power of two, ``cvt.rn.satfinite.e4m3x2.f32``, and for values the code back to float32 (exact),
times ``2^e`` and ``cvt.rn.bf16x2.f32``. So its output is the torch form's (:mod:`cutlass_kernels.mxfp8`)
bit for bit, NaN's sign aside (CUDA's canonical NaN). No float32 tensor is ever written: a thread
reads its block's 64 bytes (four 128-bit loads) and writes 32 bytes of codes and one scale byte, or
64 bytes of values: 3.03 or 4 bytes moved per element, against the torch form's ~20 kernels through
float32 temporaries.

One thread a block of 32 (blocks never straddle rows: the last dimension is a multiple of 32), 128
threads a CTA, ``CTAS_PER_SM`` CTAs per SM walking the blocks with a grid stride; the input is any
contiguous BF16 tensor, seen flat. Each of the four kernels (``exact`` / ``fast`` scale rule x
``codes`` / ``values``) compiles once per arch, or loads from the kernel cache.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor

from cutlass_kernels import mxfp8_bits
from cutlass_kernels.cute_base import ALIGN_BYTES, compile_host, compile_once, sm_count, to_cute
from cutlass_kernels.formats import E8M0_BIAS, SCALE_MODES
from cutlass_kernels.formats import MX_BLOCK as BLOCK
from cutlass_kernels.mxfp8 import MXTensor

THREADS = 128
CTAS_PER_SM = 8
VEC = ALIGN_BYTES // 2  # BF16 per 128-bit access
FORMS = ("codes", "values")
MAX_ELEMENTS = 2**31 - 1  # int32 indices
DEVICE_OPS = mxfp8_bits.Ops(cutlass.select_, cutlass.max)


# ------------------------------------------------------------------------------------------ kernel


@cute.kernel
def _quantize_kernel(
    x: cute.Tensor, out: cute.Tensor, scale: Any, exact: cutlass.Constexpr, values: cutlass.Constexpr
) -> None:
    """x: (blocks, 32) BF16; out: (blocks, 32) uint8 codes, or BF16 values; scale: (blocks,) uint8
    (codes only)."""
    tid, _, _ = cute.arch.thread_idx()
    cta, _, _ = cute.arch.block_idx()
    ctas, _, _ = cute.arch.grid_dim()
    blocks = cute.size(x, mode=[0])
    v_x = cute.zipped_divide(x, (1, VEC))  # ((1, 8), (block, vector)): one 128-bit access each
    v_out = cute.zipped_divide(out, (1, ALIGN_BYTES * 8 // out.element_type.width))
    load = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.BFloat16, num_bits_per_copy=128)
    for b in cutlass.range(cta * THREADS + tid, blocks, ctas * THREADS):
        x_frag = cute.make_rmem_tensor(cute.make_layout(BLOCK), cutlass.BFloat16)
        for j in cutlass.range_constexpr(BLOCK // VEC):
            cute.copy(load, v_x[(None, (b, j))], part(x_frag, j, VEC))
        write_block(x_frag, b, v_out, scale, exact, values)


@cute.jit
def write_block(
    x_frag: cute.Tensor,
    b: cutlass.Int32,
    v_out: cute.Tensor,
    scale: Any,
    exact: cutlass.Constexpr,
    values: cutlass.Constexpr,
) -> None:
    """Block ``b`` of 32 BF16 values (a register fragment) as MX, stored 128 bits at a time: E4M3 codes
    into ``v_out`` (the output as (16 bytes, (block, 16-byte part))) and its scale byte into
    ``scale[b]``, or (``values``) the BF16 values they represent into ``v_out`` (8 BF16, (block,
    part)). The steps of :mod:`cutlass_kernels.mxfp8_bits`, the one place the kernels write them."""
    out_vec = ALIGN_BYTES * 8 // v_out.element_type.width
    store = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), v_out.element_type, num_bits_per_copy=128)
    e = mxfp8_bits.block_exponent(_amax_bits(x_frag), exact, DEVICE_OPS)
    v = x_frag.load().to(cutlass.Float32) * _float_of_bits(cutlass.Uint32(mxfp8_bits.scale_down_bits(e)))
    codes = cute.make_rmem_tensor(cute.make_layout(BLOCK), cutlass.Float8E4M3FN)
    codes.store(v.to(cutlass.Float8E4M3FN))  # cvt.rn.satfinite.e4m3x2.f32
    if cutlass.const_expr(values):
        up = cutlass.select_(e >= -126, (e + 127) << 23, 1 << 22)  # 2^e, 2^-127 subnormal
        back = cute.make_rmem_tensor(cute.make_layout(BLOCK), cutlass.BFloat16)
        back.store(
            (codes.load().to(cutlass.Float32) * _float_of_bits(cutlass.Uint32(up))).to(cutlass.BFloat16)
        )
        for j in cutlass.range_constexpr(BLOCK // out_vec):
            cute.copy(store, part(back, j, out_vec), v_out[(None, (b, j))])
    else:
        code_bytes = cute.recast_tensor(codes, cutlass.Uint8)
        for j in cutlass.range_constexpr(BLOCK // out_vec):
            cute.copy(store, part(code_bytes, j, out_vec), v_out[(None, (b, j))])
        scale[b] = cutlass.Uint8(e + E8M0_BIAS)


@cute.jit
def part(t: cute.Tensor, j: cutlass.Constexpr, width: cutlass.Constexpr) -> cute.Tensor:
    """Elements ``[j * width, (j + 1) * width)`` of a 1-D register fragment."""
    return cute.make_tensor(t.iterator + j * width, cute.make_layout(width))


@cute.jit
def _amax_bits(x_frag: cute.Tensor) -> cutlass.Int32:
    """The block's largest magnitude bits (step 1): an integer max over the BF16 bits, sign cleared,
    two to a 32-bit word."""
    words = cute.recast_tensor(x_frag, cutlass.Uint32)
    amax = cutlass.Int32(0)
    for k in cutlass.range_constexpr(BLOCK // 2):
        low = cutlass.Int32(words[k] & cutlass.Uint32(0x7FFF))
        high = cutlass.Int32((words[k] >> 16) & cutlass.Uint32(0x7FFF))
        amax = cutlass.max(amax, cutlass.max(low, high))
    return amax


@cute.jit
def _float_of_bits(bits: cutlass.Uint32) -> cutlass.Float32:
    word = cute.make_rmem_tensor(cute.make_layout(1), cutlass.Uint32)
    word[0] = bits
    return cute.recast_tensor(word, cutlass.Float32)[0]


def as_blocks(t: cute.Tensor) -> cute.Tensor:
    """A flat tensor of ``32 k`` elements as (k, 32), row-major."""
    return cute.make_tensor(t.iterator, cute.make_layout((cute.size(t) // BLOCK, BLOCK), stride=(BLOCK, 1)))


@cute.jit
def _codes_host(
    x: cute.Tensor,
    codes: cute.Tensor,
    scale: cute.Tensor,
    ctas: cutlass.Int32,
    stream: cuda.CUstream,
    exact: cutlass.Constexpr,
) -> None:
    _quantize_kernel(as_blocks(x), as_blocks(codes), scale, exact, False).launch(
        grid=[ctas, 1, 1], block=[THREADS, 1, 1], stream=stream
    )


@cute.jit
def _values_host(
    x: cute.Tensor, out: cute.Tensor, ctas: cutlass.Int32, stream: cuda.CUstream, exact: cutlass.Constexpr
) -> None:
    _quantize_kernel(as_blocks(x), as_blocks(out), None, exact, True).launch(
        grid=[ctas, 1, 1], block=[THREADS, 1, 1], stream=stream
    )


# ---------------------------------------------------------------------------------------- compile


def kernel_name(form: str, mode: str, arch: str) -> str:
    return f"mx_quantize_{mode}_{form}_bfloat16_{arch}"


def _fake_operands(form: str) -> list[Any]:
    """Flat fake tensors: BF16 in of 32 k elements, and codes (uint8) and scales, or BF16 values."""
    n = cute.sym_int32(divisibility=BLOCK)
    x = make_fake_compact_tensor(cutlass.BFloat16, (n,), assumed_align=ALIGN_BYTES)
    if form == "values":
        return [x, make_fake_compact_tensor(cutlass.BFloat16, (n,), assumed_align=ALIGN_BYTES)]
    codes = make_fake_compact_tensor(cutlass.Uint8, (n,), assumed_align=ALIGN_BYTES)
    return [x, codes, make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int32(),), assumed_align=1)]


_COMPILED: dict[tuple[str, str, str | None], Any] = {}


def _check_kind(form: str, mode: str) -> None:
    if form not in FORMS:
        raise ValueError(f"form {form!r} is not allowed; allowed: {', '.join(FORMS)}")
    if mode not in SCALE_MODES:
        raise ValueError(f"MXFP8 scale mode {mode!r} is not allowed; allowed: {', '.join(SCALE_MODES)}")


def compile_kernel(
    form: str, mode: str, arch: str | None = None, dump_dir: Path | None = None, options: str = ""
) -> Any:
    """The ``form`` x ``mode`` kernel compiled from fake tensors (no GPU needed), once per arch: one
    of ``ARCHES``, or None for the arch this process runs (loaded from the kernel cache where that
    holds it). With ``dump_dir`` (an arch named) also ``<kernel_name>.ptx`` and ``.cubin`` there."""
    _check_kind(form, mode)
    return compile_once(_COMPILED, kernel_name, _compile, (form, mode), arch, dump_dir, options)


def _compile(form: str, mode: str, arch: str | None, dump_dir: Path | None, options: str) -> Any:
    host = _values_host if form == "values" else _codes_host
    args = [*_fake_operands(form), cutlass.Int32(1)]
    name = kernel_name(form, mode, str(arch))
    return compile_host(host, args, name, arch, dump_dir, options, (mode == "exact",))


def compile_all(arch: str, out_dir: Path, options: str = "") -> dict[str, Any]:
    """Compile every form x mode kernel for ``arch`` and write its PTX and cubin into ``out_dir``;
    the kernels by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        kernel_name(form, mode, arch): compile_kernel(form, mode, arch, out_dir, options)
        for form in FORMS
        for mode in SCALE_MODES
    }


# ---------------------------------------------------------------------------------------- wrapper


def unsupported_reason(x: torch.Tensor) -> str:
    """Why the kernel cannot take ``x`` (``""`` when it can): a contiguous CUDA BF16 tensor whose last
    dimension is a multiple of 32, from a 16-byte aligned address, of at most 2^31 - 1 elements."""
    if x.dtype != torch.bfloat16:
        return f"x is {x.dtype}; the kernel takes bfloat16"
    if x.dim() == 0 or x.shape[-1] % BLOCK:
        return f"x's shape {tuple(x.shape)} has no last dimension divisible by {BLOCK}"
    if not x.is_cuda:
        return f"x is on {x.device}; the kernel takes a CUDA tensor"
    if not x.is_contiguous() or x.data_ptr() % ALIGN_BYTES:
        return "x is not contiguous from a 16-byte aligned address"
    if x.numel() > MAX_ELEMENTS:
        return f"x has {x.numel()} elements; the kernel takes up to {MAX_ELEMENTS}"
    return ""


@cache
def _ctas(device_index: int) -> int:
    return sm_count(torch.device("cuda", device_index)) * CTAS_PER_SM


def launch(form: str, mode: str, x: torch.Tensor, *outs: torch.Tensor) -> None:
    """Run the ``form`` x ``mode`` kernel on ``x`` into ``outs`` (codes and scales, laid out as
    :func:`quantize` makes them, or the values) on the current stream; ValueError naming what it
    cannot take."""
    _check_kind(form, mode)
    reason = unsupported_reason(x)
    if reason:
        raise ValueError(f"the MX quantization kernel cannot take this tensor: {reason}")
    if x.numel() == 0:
        return
    ctas = min(_ctas(x.device.index or 0), -(-x.numel() // (BLOCK * THREADS)))
    stream = cuda.CUstream(torch.cuda.current_stream(x.device).cuda_stream)
    flat = [to_cute(t.view(-1)) for t in (x, outs[0])]
    if form == "codes":
        flat.append(to_cute(outs[1].view(-1), assumed_align=1))
    compile_kernel(form, mode)(*flat, cutlass.Int32(ctas), stream)


def quantize(x: torch.Tensor, mode: str = "exact") -> MXTensor:
    """``x`` as MXFP8 along its last dimension (E4M3 values and E8M0 scales), on ``x``'s device:
    :func:`cutlass_kernels.mxfp8.quantize_mx`'s result, computed in one pass."""
    codes = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    scale = torch.empty(*x.shape[:-1], x.shape[-1] // BLOCK, dtype=torch.uint8, device=x.device)
    launch("codes", mode, x, codes, scale)
    return MXTensor(codes.view(torch.float8_e4m3fn), scale)


def fake_quantize(x: torch.Tensor, mode: str = "exact") -> torch.Tensor:
    """The BF16 values an MXFP8 GEMM multiplies for ``x``:
    :func:`cutlass_kernels.mxfp8.fake_quantize` ``(x, mode, torch.bfloat16)``, in one pass."""
    out = torch.empty_like(x)
    launch("values", mode, x, out)
    return out
