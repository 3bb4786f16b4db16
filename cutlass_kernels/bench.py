"""The ``timing`` stage of ``jobs/gpu-run.sh``, one op x variant per process: forward, dgrad, wgrad or
MXFP8 of a kernel that passed the smoke and correctness stages, on the report's per-rank shapes
(D = 7168, F in 1536/3072/6144, 384 experts over EP 8..64 -> 48..6 local experts, 2048 tokens per GPU,
top-6) and the seed-003 workload (256 experts, top-8, hidden 8192, intermediate 2048; 4096 tokens per
GPU is this check's choice). Each shape is the up projection (N = 2F, K = D) and the down projection
(N = D, K = F) of one expert GEMM.

Per op x variant: kernel time from CUDA-graph replay (one call captured, replayed; CUDA events around
each replay) and through the dispatch (events around each eager call, so host overhead counts), min /
median / max; TFLOP/s of the useful FLOPs over the graph median; the dense BF16 peak measured in the
same run (8192^3 ``torch.matmul``); the ratio to ``torch._grouped_mm``; tile-padded vs useful FLOPs.
Inputs rotate across copies so no call finds its operands in L2. One record per measurement; the
run's summary names the fastest variant per shape x op.
"""

from __future__ import annotations

import functools
import statistics
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cutlass_kernels import gating
from cutlass_kernels.check import Target, make_case, random_sizes
from cutlass_kernels.gating import key
from cutlass_kernels.results import append, read
from cutlass_kernels.tile_schedule import WGRAD_CHUNK
from cutlass_kernels.vocabulary import has_mx_kernel

SEED_003_EXPERTS, SEED_003_TOP_K, SEED_003_HIDDEN, SEED_003_INTER, SEED_003_TOKENS = 256, 8, 8192, 2048, 4096
REPORT_EXPERTS, REPORT_TOP_K, REPORT_HIDDEN, REPORT_TOKENS = 384, 6, 7168, 2048
REPORT_INTER = (1536, 3072, 6144)
REPORT_EP = (8, 16, 32, 64)
ROTATE_BYTES = 512 * 2**20  # rotate inputs until a call's operands have left a ~60 MB L2 several times
WARMUP, ITERS = 2, 10  # 26 shapes x (graph, dispatch, _grouped_mm) in a child's half minute


@dataclass
class Shape:
    name: str
    groups: int
    rows: int  # routed rows = tokens * top_k
    n: int
    k: int


# the per-rank shapes timed first (the device run's pipeline executions': F3072 at EP8 and EP32), so a
# child cut short by its share of the stage has timed what the pipeline stage runs
FIRST = ((3072, 8), (3072, 32))


def timing_shapes(dry_run: bool = False) -> list[Shape]:
    """The per-rank shapes of the matrix, :data:`FIRST` first, then seed-003's; tiny in a dry run."""
    if dry_run:
        return [Shape("tiny-up", 6, 384, 128, 64), Shape("tiny-down", 6, 384, 64, 64)]
    d, rows = REPORT_HIDDEN, REPORT_TOKENS * REPORT_TOP_K
    shapes = []
    pairs = [(f, ep) for f in REPORT_INTER for ep in REPORT_EP]
    for f, ep in sorted(pairs, key=lambda p: p not in FIRST):
        g = REPORT_EXPERTS // ep
        shapes.append(Shape(f"D{d}-F{f}-EP{ep}-up", g, rows, 2 * f, d))
        shapes.append(Shape(f"D{d}-F{f}-EP{ep}-down", g, rows, d, f))
    rows, g = SEED_003_TOKENS * SEED_003_TOP_K, SEED_003_EXPERTS
    shapes.append(Shape("seed003-up", g, rows, 2 * SEED_003_INTER, SEED_003_HIDDEN))
    shapes.append(Shape("seed003-down", g, rows, SEED_003_HIDDEN, SEED_003_INTER))
    return shapes


class Timer:
    """Milliseconds of ``fn`` per call: CUDA events on a GPU, ``perf_counter`` on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def times(self, fn: Callable[[int], object]) -> list[float]:
        for i in range(WARMUP):
            fn(i)
        self.sync()
        if not self.cuda:
            out = []
            for i in range(ITERS):
                began = time.perf_counter()
                fn(i)
                out.append((time.perf_counter() - began) * 1e3)
            return out
        events = []
        for i in range(ITERS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(i)
            end.record()
            events.append((start, end))
        self.sync()
        return [s.elapsed_time(e) for s, e in events]


def stats(ms: list[float]) -> dict[str, float]:
    return {"min": min(ms), "median": statistics.median(ms), "max": max(ms)}


def dense_peak_tflops(t: Target, timer: Timer) -> float:
    size = 8192 if t.device.type == "cuda" else 128  # the CPU's (dry run): plumbing, not a peak
    pairs = [(torch.randn(size, size, device=t.device).bfloat16(),) * 2 for _ in range(2)]
    ms = statistics.median(timer.times(lambda i: torch.matmul(*pairs[i % 2])))
    return 2 * size**3 / ms / 1e9


def flops(op: str, variant: str, shape: Shape, sizes: list[int], t: Target) -> tuple[int, int]:
    """Useful and tile-padded FLOPs of ``op`` on ``shape`` with ``variant``'s tiles: M tiles per group
    (wgrad: its per-group row chunks along the reduction) and N tiles of the output."""
    from cutlass_kernels import registry

    kernel = registry.variant(t.arch, variant)
    tm, tn = kernel.mx_tile_mn if op == "mx" and has_mx_kernel(t.arch) else kernel.tile_mn

    def up(x: int, tile: int) -> int:
        return -(-x // tile) * tile

    useful = 2 * shape.rows * shape.n * shape.k
    if op == "wgrad":
        padded = 2 * sum(up(s, WGRAD_CHUNK) for s in sizes) * up(shape.n, tm) * up(shape.k, tn)
    else:
        out_n, red = (shape.k, shape.n) if op == "dgrad" else (shape.n, shape.k)
        padded = 2 * sum(up(s, tm) for s in sizes) * up(out_n, tn) * red
    return useful, padded


def graph_call(fn: Callable[[], object], timer: Timer) -> Callable[[int], object] | None:
    """One captured call of ``fn`` as a replay function; None off CUDA."""
    if not timer.cuda:
        return None
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return lambda i: graph.replay()


def rotating(calls: Sequence[Callable[[], object]]) -> Callable[[int], object]:
    """Call i runs ``calls[i % len(calls)]``: rotated operand copies."""
    return lambda i: calls[i % len(calls)]()


def grouped_mm(op: str, prob: Any) -> Callable[[], object] | None:
    """The same GEMM through ``torch._grouped_mm`` (BF16 ops only)."""
    if op == "fprop":
        return lambda: torch._grouped_mm(prob.lhs, prob.rhs.transpose(1, 2), offs=prob.offs)
    if op == "dgrad":
        return lambda: torch._grouped_mm(prob.lhs, prob.rhs, offs=prob.offs)
    if op == "wgrad":
        return lambda: torch._grouped_mm(prob.lhs.T, prob.rhs, offs=prob.offs)
    return None


def timing_op(t: Target, op: str, variant: str, results: Path, budget_s: float) -> int:
    """Time ``op`` on ``variant`` (BF16 out, as the layers run it) on every shape, one record per
    shape as it is measured; start no shape after ``budget_s`` seconds (the child's limit is longer,
    so a kill at the limit means a hang, not a slow stage), and end in a record saying how far it got.
    Shapes are routed alike in every child (a seed per shape), so variants are timed on the same
    routing."""
    began = time.monotonic()
    k = key(op, "bfloat16", variant)
    if refused := gating.refusal(t.arch, gating.verdicts(read(results)), "timing", k):
        append(
            results,
            {"stage": "timing", "op": op, "variant": variant, "key": k, "status": "skip", "reason": refused},
        )
        return 0
    timer = Timer(t.device)
    peak = dense_peak_tflops(t, timer)
    shapes = timing_shapes(t.dry_run)
    failures = done = 0
    for shape in shapes:
        if time.monotonic() - began > budget_s:
            break
        sizes = random_sizes(
            shape.groups, shape.rows, torch.Generator().manual_seed(zlib.crc32(shape.name.encode()))
        )
        try:
            time_op(t, timer, op, variant, shape, sizes, peak, results)
        except Exception as e:  # recorded; the other shapes still run
            failures += 1
            rec = {"stage": "timing", "shape": shape.name, "op": op, "variant": variant, "status": "fail"}
            append(results, {**rec, "key": k, "error": f"{type(e).__name__}: {e}"[:600]})
        done += 1
        if t.device.type == "cuda":
            torch.cuda.empty_cache()
    rec = {"stage": "timing", "name": "shapes", "op": op, "variant": variant, "key": k, "status": "info"}
    append(results, {**rec, "timed": done, "of": len(shapes), "seconds": round(time.monotonic() - began, 1)})
    return 1 if failures else 0


def time_op(
    t: Target,
    timer: Timer,
    op: str,
    variant: str,
    shape: Shape,
    sizes: list[int],
    peak: float,
    results: Path,
) -> None:
    """``op`` of ``variant`` on ``shape``, graph replay and dispatch, beside ``torch._grouped_mm``."""
    base = {"stage": "timing", "shape": shape.name, "op": op, "groups": shape.groups, "rows": shape.rows}
    base |= {"n": shape.n, "k": shape.k, "variant": variant, "key": key(op, "bfloat16", variant)}
    per_set = (shape.rows * (shape.k + shape.n) + shape.groups * shape.n * shape.k) * 2
    copies = max(1, min(4, -(-ROTATE_BYTES // per_set))) if t.device.type == "cuda" else 1
    probs = [make_case(op, sizes, shape.n, shape.k, 0, t.device) for _ in range(copies)]
    useful, padded = flops(op, variant, shape, sizes, t)
    refs = [grouped_mm(op, p) for p in probs]
    ref_ms = None
    if all(r is not None for r in refs):
        ref_ms = statistics.median(timer.times(rotating([r for r in refs if r is not None])))
    calls = [functools.partial(p.call, t, "timing", torch.bfloat16, variant) for p in probs]
    dispatch = stats(timer.times(rotating(calls)))
    replay = graph_call(calls[0], timer)
    graph = stats(timer.times(replay)) if replay is not None else None
    ms = (graph or dispatch)["median"]
    rec = {
        **base,
        "status": "pass",
        "out_dtype": "bfloat16",
        "graph_ms": graph,
        "dispatch_ms": dispatch,
        "tflops": useful / ms / 1e9,
        "dense_peak_tflops": peak,
        "frac_of_dense_peak": useful / ms / 1e9 / peak,
        "useful_flops": useful,
        "padded_flops": padded,
        "grouped_mm_ms": ref_ms,
        "speedup_vs_grouped_mm": None if ref_ms is None else ref_ms / ms,
    }
    append(results, rec)
