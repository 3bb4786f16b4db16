"""The GPU check of the CuTe grouped GEMMs: correctness against an FP32 reference on fresh random
routings (ragged, empty groups, M / N / K tails, CUDA-graph replay with a new routing), then timings
against ``torch._grouped_mm`` and a dense ``torch.matmul`` of equal FLOPs.

Shapes: the seed-003 reference workload (256 experts, top-8, hidden 8192, intermediate 2048) and the
report's per-rank shapes (D = 7168, F in 1536/3072/6144, 384 experts over EP 8..64 -> 48..6 local
experts, 2048 tokens per GPU, top-6). Each expert GEMM is timed as the up projection (N = 2F gate+up,
K = D) and the down projection (N = D, K = F), forward (BF16 and MXFP8) and wgrad. Timings: CUDA
events around each dispatch call, median of the timed calls after warm-up, inputs rotated across
copies so no call finds its operands in L2. The seed-003 tokens per GPU (4096) is this check's choice:
the workload's cases vary it.
"""

from __future__ import annotations

import datetime
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cutlass_kernels import api, quantize_mx
from cutlass_kernels.mxfp8 import MXTensor

SEED_003 = {"experts": 256, "top_k": 8, "hidden": 8192, "inter": 2048, "tokens": 4096}
REPORT = {"experts": 384, "top_k": 6, "hidden": 7168, "tokens": 2048, "inter": (1536, 3072, 6144)}
REPORT_EP = (8, 16, 32, 64)
ROTATE_BYTES = 512 * 2**20  # rotate inputs until a call's operands have left a ~60 MB L2 several times
WARMUP, ITERS = 5, 20
ARCH = {"cute-sm90": "sm_90a", "cute-sm100": "sm_100a"}


@dataclass
class Shape:
    name: str
    groups: int
    rows: int  # routed rows = tokens * top_k
    n: int
    k: int


@dataclass
class Correctness:
    case: str
    op: str
    out_dtype: str
    max_rel_err: float
    tol: float
    ok: bool
    error: str = ""


@dataclass
class Timing:
    shape: str
    groups: int
    rows: int
    n: int
    k: int
    cute_ms: float
    grouped_mm_ms: float
    dense_ms: float
    cute_tflops: float
    grouped_mm_tflops: float
    dense_tflops: float
    frac_of_dense_peak: float
    speedup_vs_grouped_mm: float
    mx_path: str
    mx_ms: float
    mx_tflops: float
    mx_speedup_vs_bf16: float
    wgrad_ms: float
    wgrad_grouped_mm_ms: float
    wgrad_tflops: float
    wgrad_speedup_vs_grouped_mm: float


def timing_shapes() -> list[Shape]:
    s = SEED_003
    rows = s["tokens"] * s["top_k"]
    shapes = [
        Shape("seed003-up", s["experts"], rows, 2 * s["inter"], s["hidden"]),
        Shape("seed003-down", s["experts"], rows, s["hidden"], s["inter"]),
    ]
    r = REPORT
    for f in r["inter"]:
        for ep in REPORT_EP:
            g, rows = r["experts"] // ep, r["tokens"] * r["top_k"]
            shapes.append(Shape(f"D{r['hidden']}-F{f}-EP{ep}-up", g, rows, 2 * f, r["hidden"]))
            shapes.append(Shape(f"D{r['hidden']}-F{f}-EP{ep}-down", g, rows, r["hidden"], f))
    return shapes


def random_sizes(groups: int, rows: int, gen: torch.Generator, empty: int = 1) -> list[int]:
    """Skewed expert loads summing to ``rows`` with ``empty`` experts receiving nothing."""
    weights = torch.rand(groups, generator=gen) ** 2 + 0.05
    weights[torch.randperm(groups, generator=gen)[: min(empty, groups - 1)]] = 0
    sizes = torch.floor(weights / weights.sum() * rows).long()
    sizes[int(torch.argmax(weights))] += rows - int(sizes.sum())
    return sizes.tolist()


def offsets(sizes: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(sizes, device=device).cumsum(0).to(torch.int32)


def reference(a: torch.Tensor | MXTensor, b: torch.Tensor | MXTensor, sizes: list[int]) -> torch.Tensor:
    """FP32 per-group products of the same (rounded) operands; b is [G, N, K]. MX operands are
    dequantized (exactly, to FP32) one group at a time, which bounds the memory of large weights."""
    out = torch.zeros(a.shape[0], b.shape[1], device=a.data.device)
    start = 0
    for g, size in enumerate(sizes):
        rows = slice(start, start + size)
        a_g = a.index_rows(rows).dequantize() if isinstance(a, MXTensor) else a[rows].float()
        b_g = MXTensor(b.data[g], b.scale[g]).dequantize() if isinstance(b, MXTensor) else b[g].float()
        out[rows] = a_g @ b_g.T
        start += size
    return out


def wgrad_rel_err(dw: torch.Tensor, dy: torch.Tensor, x: torch.Tensor, sizes: list[int]) -> float:
    """:func:`rel_err` of ``dw`` [G, N, K] against FP32 per-group dY_g^T X_g (zeros for empty groups),
    one group at a time: the whole reference of the seed-003 shape would take 34 GB."""
    worst, scale, start = 0.0, 0.0, 0
    for g, size in enumerate(sizes):
        ref = dy[start : start + size].float().T @ x[start : start + size].float()
        worst = max(worst, float((dw[g].float() - ref).abs().max()))
        scale = max(scale, float(ref.abs().max()))
        start += size
    return worst / max(scale, 1e-30)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _tol(out_dtype: torch.dtype) -> float:
    return 1e-2 if out_dtype == torch.bfloat16 else 1e-3


def mx_path(backend: str, a: MXTensor, b: MXTensor, offs: torch.Tensor) -> str:
    """Which MXFP8 path the dispatch takes for these operands."""
    from cutlass_kernels import registry
    from cutlass_kernels.cute_backend import mx_unsupported_reason

    arch = ARCH[backend]
    scaled = registry.has_mx_kernel(arch) and not mx_unsupported_reason(a, b, offs, torch.float32)
    return "block-scaled" if scaled else "dequant-bf16"


def quantize_chunked(x: torch.Tensor, chunk: int = 4) -> MXTensor:
    """quantize_mx along the first dimension in chunks (bounds the FP32 temporaries of big weights)."""
    parts = [quantize_mx(x[i : i + chunk]) for i in range(0, x.shape[0], chunk)]
    return MXTensor(torch.cat([p.data for p in parts]), torch.cat([p.scale for p in parts]))


def correctness(backend: str, device: torch.device, gen: torch.Generator, quick: bool) -> list[Correctness]:
    """Every kernel on edge-case routings and (unless ``quick``) on the seed-003 and one per-rank shape
    with random routings. A case that raises is recorded as failed with its error; the others run."""
    cases = [("edges N/K tails", [0, 1, 127, 128, 129, 0, 300, 5], 384, 200)]
    if not quick:
        cases += [
            ("seed003-up", random_sizes(256, 8 * 4096, gen, empty=8), 4096, 8192),
            ("D7168-F1536-EP8-down", random_sizes(48, 6 * 2048, gen, empty=2), 7168, 1536),
        ]
    results = [r for case in cases for r in _case_checks(*case, backend=backend, device=device)]
    graph = _attempt(
        "cuda-graph replay, new routing", "fprop", torch.float32, lambda: _graph_replay(backend, device, gen)
    )
    return [*results, graph]


def _case_checks(
    case: str, sizes: list[int], n: int, k: int, *, backend: str, device: torch.device
) -> list[Correctness]:
    """fprop (BF16 and FP32 out), dgrad, wgrad and MXFP8 on one routing and shape."""
    from cutlass_kernels.cute_backend import unsupported_reason, wgrad_unsupported_reason

    offs = offsets(sizes, device)
    a = torch.randn(sum(sizes), k, device=device).bfloat16()
    b = torch.randn(len(sizes), n, k, device=device).bfloat16() / k**0.5
    dy = torch.randn(sum(sizes), n, device=device).bfloat16()
    a_mx, b_mx = quantize_mx(a), quantize_chunked(b)

    def fprop(out_dtype: torch.dtype) -> float:
        _require(unsupported_reason(a, b.permute(1, 2, 0), offs, out_dtype))
        out = api.grouped_gemm(a, b, offs, out_dtype=out_dtype, backend=backend)
        return rel_err(out, reference(a, b, sizes))

    def dgrad() -> float:
        _require(unsupported_reason(dy, b.permute(2, 1, 0), offs, torch.bfloat16))
        dx = api.grouped_gemm_dgrad(dy, b, offs, out_dtype=torch.bfloat16, backend=backend)
        return rel_err(dx, reference(dy, b.transpose(1, 2), sizes))

    def wgrad() -> float:
        _require(wgrad_unsupported_reason(dy, a, offs, torch.float32))
        dw = api.grouped_gemm_wgrad(dy, a, offs, out_dtype=torch.float32, backend=backend)
        return wgrad_rel_err(dw, dy, a, sizes)

    def mxfp8() -> float:
        out = api.grouped_gemm_mx(a_mx, b_mx, offs, out_dtype=torch.float32, backend=backend)
        return rel_err(out, reference(a_mx, b_mx, sizes))

    return [
        _attempt(case, "fprop", torch.bfloat16, lambda: fprop(torch.bfloat16)),
        _attempt(case, "fprop", torch.float32, lambda: fprop(torch.float32)),
        _attempt(case, "dgrad", torch.bfloat16, dgrad),
        _attempt(case, "wgrad", torch.float32, wgrad),
        _attempt(case, f"mxfp8 {mx_path(backend, a_mx, b_mx, offs)}", torch.float32, mxfp8),
    ]


def _require(reason: str) -> None:
    if reason:
        raise RuntimeError(f"the operands would not reach the CuTe kernel: {reason}")


def _attempt(case: str, op: str, out_dtype: torch.dtype, measure: Callable[[], float]) -> Correctness:
    tol, dtype = _tol(out_dtype), str(out_dtype).removeprefix("torch.")
    try:
        err = measure()
    except Exception as e:  # a failing kernel is a result: record it, keep checking the others
        return Correctness(case, op, dtype, float("nan"), tol, False, f"{type(e).__name__}: {e}"[:500])
    return Correctness(case, op, dtype, err, tol, err <= tol)


def _graph_replay(backend: str, device: torch.device, gen: torch.Generator) -> float:
    """Capture one call in a CUDA graph, then replay it after rewriting ``offs`` in place: a kernel
    that read the routing on the host, or synced, would fail the capture or keep the old routing."""
    groups, rows, n, k = 16, 3000, 512, 256
    sizes = random_sizes(groups, rows, gen, empty=2)
    offs = offsets(sizes, device)
    a = torch.randn(rows, k, device=device).bfloat16()
    b = torch.randn(groups, n, k, device=device).bfloat16()
    api.grouped_gemm(a, b, offs, out_dtype=torch.float32, backend=backend)  # compile and load outside
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = api.grouped_gemm(a, b, offs, out_dtype=torch.float32, backend=backend)
    new_sizes = random_sizes(groups, rows, gen, empty=3)
    offs.copy_(offsets(new_sizes, device))
    graph.replay()
    torch.cuda.synchronize()
    return rel_err(out, reference(a, b, new_sizes))


def median_ms(fn: Callable[..., object], inputs: list[tuple]) -> float:
    for i in range(WARMUP):
        fn(*inputs[i % len(inputs)])
    torch.cuda.synchronize()
    events = []
    for i in range(ITERS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs[i % len(inputs)])
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def dense_peak_tflops(device: torch.device) -> float:
    size = 8192
    inputs = [(torch.randn(size, size, device=device).bfloat16(),) * 2 for _ in range(2)]
    ms = median_ms(torch.matmul, inputs)
    return 2 * size**3 / ms / 1e9


def time_shape(shape: Shape, backend: str, device: torch.device, gen: torch.Generator, peak: float) -> Timing:
    sizes = random_sizes(shape.groups, shape.rows, gen, empty=1)
    offs = offsets(sizes, device)
    per_set = (shape.rows * shape.k + shape.groups * shape.n * shape.k) * 2
    copies = max(1, min(4, -(-ROTATE_BYTES // per_set)))
    sets = [
        (
            torch.randn(shape.rows, shape.k, device=device).bfloat16(),
            torch.randn(shape.groups, shape.n, shape.k, device=device).bfloat16(),
            offs,
        )
        for _ in range(copies)
    ]
    cute_ms = median_ms(lambda a, b, o: api.grouped_gemm(a, b, o, backend=backend), sets)
    grouped_ms = median_ms(lambda a, b, o: torch._grouped_mm(a, b.transpose(1, 2), offs=o), sets)
    wgrad_sets = [(torch.randn(shape.rows, shape.n, device=device).bfloat16(), a, o) for a, _, o in sets]
    wgrad_ms = median_ms(lambda dy, x, o: api.grouped_gemm_wgrad(dy, x, o, backend=backend), wgrad_sets)
    wgrad_grouped_ms = median_ms(lambda dy, x, o: torch._grouped_mm(dy.T, x, offs=o), wgrad_sets)
    del wgrad_sets
    mx_sets = [(quantize_chunked(a), quantize_chunked(b), o) for a, b, o in sets]
    del sets
    path = mx_path(backend, *mx_sets[0])
    mx_ms = median_ms(lambda a, b, o: api.grouped_gemm_mx(a, b, o, backend=backend), mx_sets)
    del mx_sets
    dense_sets = [
        (
            torch.randn(shape.rows, shape.k, device=device).bfloat16(),
            torch.randn(shape.k, shape.n, device=device).bfloat16(),
        )
        for _ in range(copies)
    ]
    dense_ms = median_ms(torch.matmul, dense_sets)
    flop = 2 * shape.rows * shape.n * shape.k
    tflops = [flop / ms / 1e9 for ms in (cute_ms, grouped_ms, dense_ms)]
    mx_tflops = flop / mx_ms / 1e9
    return Timing(
        shape.name,
        shape.groups,
        shape.rows,
        shape.n,
        shape.k,
        cute_ms,
        grouped_ms,
        dense_ms,
        *tflops,
        frac_of_dense_peak=tflops[0] / peak,
        speedup_vs_grouped_mm=grouped_ms / cute_ms,
        mx_path=path,
        mx_ms=mx_ms,
        mx_tflops=mx_tflops,
        mx_speedup_vs_bf16=cute_ms / mx_ms,
        wgrad_ms=wgrad_ms,
        wgrad_grouped_mm_ms=wgrad_grouped_ms,
        wgrad_tflops=flop / wgrad_ms / 1e9,
        wgrad_speedup_vs_grouped_mm=wgrad_grouped_ms / wgrad_ms,
    )


def run_check(out: Path | None, quick: bool) -> int:
    """Exit status 0 when every correctness case passes; 1 when one fails; 2 when no GPU / no CuTe."""
    if not torch.cuda.is_available():
        print("cutlass_kernels check needs a CUDA GPU, and torch sees none.", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    backend = api.resolve_backend("auto", device)
    if backend == "torch":
        cap = torch.cuda.get_device_capability(device)
        print(
            f"no CuTe backend for {torch.cuda.get_device_name(device)} (sm_{cap[0]}{cap[1]}).",
            file=sys.stderr,
        )
        try:
            import cutlass_kernels.cute_backend  # noqa: F401
        except ImportError as e:
            print(f"the CuTe backends cannot be imported: {e!r}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    seed = int(datetime.datetime.now().timestamp())
    torch.manual_seed(seed)  # operands: fresh data each run (the seed is recorded)
    gen = torch.Generator().manual_seed(seed)  # routings
    report: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device),
        "backend": backend,
        "torch": torch.__version__,
        "seed": seed,
    }
    try:
        checks = correctness(backend, device, gen, quick)
        report["correctness"] = [asdict(c) for c in checks]
        print(f"{'case':<32} {'op':<20} {'out':<9} {'rel err':>9} {'tol':>7}  ok")
        for c in checks:
            row = f"{c.case:<32} {c.op:<20} {c.out_dtype:<9} {c.max_rel_err:9.2e} {c.tol:7.0e}"
            print(f"{row}  {c.ok} {c.error}")
        if not quick:
            _timings(report, backend, device, gen)
    finally:
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=2))
    return 0 if all(c.ok for c in checks) else 1


def _timings(report: dict, backend: str, device: torch.device, gen: torch.Generator) -> None:
    """Time every shape into ``report["timings"]`` (a shape that raises is recorded with its error)
    and print the table."""
    peak = dense_peak_tflops(device)
    report["dense_peak_tflops"] = peak
    timings, report["timings"] = [], []
    for shape in timing_shapes():
        try:
            timings.append(time_shape(shape, backend, device, gen, peak))
            report["timings"].append(asdict(timings[-1]))
        except Exception as e:  # recorded, the other shapes still run
            report["timings"].append({"shape": shape.name, "error": f"{type(e).__name__}: {e}"[:500]})
            print(f"{shape.name}: {report['timings'][-1]['error']}")
    print(f"\ndense BF16 peak (8192^3 torch.matmul): {peak:.0f} TFLOP/s")
    head = ("shape", "G", "cute TF/s", "_grouped_mm", "dense", "of peak", "speedup", "MX TF/s", "MX/BF16")
    head += ("wgrad TF/s", "vs _gmm")
    print("{:<24} {:>4} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>8}".format(*head))
    for t in timings:
        print(
            f"{t.shape:<24} {t.groups:>4} {t.cute_tflops:10.0f} {t.grouped_mm_tflops:12.0f} "
            f"{t.dense_tflops:8.0f} {t.frac_of_dense_peak:8.1%} {t.speedup_vs_grouped_mm:7.2f}x "
            f"{t.mx_tflops:8.0f} {t.mx_speedup_vs_bf16:7.2f}x "
            f"{t.wgrad_tflops:10.0f} {t.wgrad_speedup_vs_grouped_mm:7.2f}x"
        )
    print(f"MXFP8 path: {', '.join(sorted({t.mx_path for t in timings}))}")
