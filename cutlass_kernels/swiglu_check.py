"""The device checks of the fused SwiGLU backward kernel (:mod:`cutlass_kernels.swiglu_kernel`): its
correctness against a float64 reference, and its time against the unfused torch form and against
the HBM bandwidth of the same run (the faster of a device copy and a BF16 add of the same byte
count). Every result is one JSON line appended to a results file the moment it exists
(:mod:`cutlass_kernels.results`).

What a check runs is a :class:`Subject`: the implementation under test, a function ``impl(da, h,
dh, a)`` that writes dH and A into the outputs it is given (the kernel:
:func:`cutlass_kernels.swiglu_kernel.launch`), so the check can hand it NaN-filled outputs between
guard rows (an element left unwritten or a write past either end shows); the unfused torch form,
``torch_form(da, h) -> (dh, a)`` (the layers' ``swiglu_backward``, passed in by the caller: this
package sits below the layers); and the device.

**Tolerance.** The kernel rounds its FP32 results r to BF16 (unit roundoff u = 2^-8), so
|k - r| <= u |k|; the reference rounds the exact value x the same way (through FP32 in torch's
cast, 2^-24 more), so |ref - x| <= u |ref| + 2^-24 |x|. The FP32 evaluation itself is within
eta M of x, where M is the magnitude of the terms: |A| for A, |dup| for dup, and
|dA up| (s + |g s (1 - s)|) for dgate, whose two terms cancel near silu's minimum (g ~ -1.28), where
no bound relative to |dgate| holds. eta: the argument g log2(e) rounded to FP32 puts a relative
error of up to 2^-24 |g log2 e| ln 2 on exp(-g), 2^-17 at |g| = 88; ex2.approx, rcp.approx and
the six roundings after them add about 2^-20: eta = 2^-15 leaves a factor of two. Below
g = -87.3, s < 2^-126 and the kernel flushes it to 0 (``rcp.approx.ftz``; exp(-g) overflows to
infinity from g = -88.7; torch's FP32 form keeps subnormals down to about -103): what is lost there
is below 2^-126 |g dA up| < 2^-100 for the check's inputs (|values| < 2^7), the absolute floor.
So the check passes an element iff |k - ref| <= u (|k| + |ref|) + eta M + 2^-100, and records the
largest ratio of the two sides.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cutlass_kernels import swiglu_kernel
from cutlass_kernels.results import each

Impl = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], object]
TorchForm = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

U_BF16 = 2.0**-8
ETA_F32 = 2.0**-15
FLOOR = 2.0**-100
GUARD_ROWS = 1  # NaN rows before and after each output: writes past either end show
# (rows, F): none, one, ragged in rows (not a multiple of the 16-row tile) and in columns (F not a
# multiple of the 128-column tile, one vector column in the last tile), the per-rank shape last
CASES: tuple[tuple[int, int], ...] = (
    (0, 128),
    (1, 8),
    (1, 3072),
    (17, 96),
    (33, 136),
    (1000, 1536),
    (4099, 256),
    (12288, 3072),
)
TIMING_SHAPES: tuple[tuple[int, int], ...] = ((12288, 3072), (283853, 3072))
# the device run's dry run (a CPU form in the kernel's place): the small cases, ragged ones included
DRY_CASES: tuple[tuple[int, int], ...] = ((0, 128), (1, 8), (17, 96), (33, 136), (64, 256))
DRY_TIMING_SHAPES: tuple[tuple[int, int], ...] = ((40, 64),)
BANDWIDTH_GOAL = 0.8  # of the HBM bandwidth: the faster probe's bytes per second
PROBES = ("copy", "add")
WARMUP, ITERS, CALLS_PER_GRAPH = 2, 10, 5


@dataclass(frozen=True)
class Subject:
    """What the checks run (module docstring): ``impl`` held against ``torch_form`` on ``device``."""

    torch_form: TorchForm
    device: torch.device
    impl: Impl = swiglu_kernel.launch


def writer(form: TorchForm) -> Impl:
    """The check's interface, ``impl(da, h, dh, a)``, of a form that returns (dH, A)."""

    def impl(da: torch.Tensor, h: torch.Tensor, dh: torch.Tensor, a: torch.Tensor) -> None:
        out_dh, out_a = form(da, h)
        dh.copy_(out_dh)
        a.copy_(out_a)

    return impl


def doubled(impl: Impl) -> Impl:
    """``impl`` with its outputs doubled: the device run's planted ``wrong`` fault."""

    def wrong(da: torch.Tensor, h: torch.Tensor, dh: torch.Tensor, a: torch.Tensor) -> None:
        impl(da, h, dh, a)
        dh.mul_(2)
        a.mul_(2)

    return wrong


# -------------------------------------------------------------------------------------- inputs


def inputs(
    rows: int, f: int, gen: torch.Generator, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh BF16 (dA [rows, F], H [rows, 2F]): gates N(0, 3^2) with 10% in the sigmoid's saturation
    (|g| in [20, 80], both signs), 2% past FP32's exp range (|g| in [88, 120]) and 5% zeros; up and dA
    N(0, 1) with 5% zeros each."""

    def draw(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=gen, device=device)

    def normal(scale: float) -> torch.Tensor:
        return torch.randn(rows, f, generator=gen, device=device) * scale

    def signed(lo: float, hi: float) -> torch.Tensor:
        return (lo + (hi - lo) * draw(rows, f)) * torch.where(draw(rows, f) < 0.5, -1.0, 1.0)

    pick = draw(rows, f)
    gate = torch.where(pick < 0.10, signed(20, 80), normal(3.0))
    gate = torch.where(pick > 0.98, signed(88, 120), gate)
    gate = torch.where((pick >= 0.10) & (pick < 0.15), 0.0, gate)
    up = torch.where(draw(rows, f) < 0.05, 0.0, normal(1.0))
    da = torch.where(draw(rows, f) < 0.05, 0.0, normal(1.0))
    return da.bfloat16(), torch.cat([gate, up], dim=1).bfloat16()


def reference(da: torch.Tensor, h: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Output name -> (exact value in float64, magnitude M of its terms), for dgate, dup and A:
    dgate = dA up silu'(g), silu'(g) = s + g s (1 - s); dup = dA silu(g); A = silu(g) up."""
    f = da.shape[1]
    g, up, d = h[:, :f].double(), h[:, f:].double(), da.double()
    s = torch.sigmoid(g)
    silu = g * s
    slope_terms = s + (g * s * (1 - s)).abs()
    dgate = d * up * (s + g * s * (1 - s))
    dup, a = d * silu, silu * up
    return {
        "dgate": (dgate, (d * up).abs() * slope_terms),
        "dup": (dup, dup.abs()),
        "a": (a, a.abs()),
    }


def excess(out: torch.Tensor, exact: torch.Tensor, magnitude: torch.Tensor) -> float:
    """max |out - ref| / tolerance over the elements (module docstring), ``ref`` the exact value
    rounded to BF16; infinite where ``out`` holds a NaN or an infinity."""
    if not out.numel():
        return 0.0
    k = out.double()
    ref = exact.to(torch.bfloat16).double()
    tol = U_BF16 * (k.abs() + ref.abs()) + ETA_F32 * magnitude + FLOOR
    ratio = ((k - ref).abs() / tol).max()
    return float(ratio) if bool(torch.isfinite(k).all()) else float("inf")


# --------------------------------------------------------------------------------- correctness


def guarded(rows: int, cols: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, view): a contiguous NaN [rows, cols] BF16 view between ``GUARD_ROWS`` NaN rows of a
    buffer (16-byte aligned for cols a multiple of 8)."""
    buf = torch.full((rows + 2 * GUARD_ROWS, cols), float("nan"), dtype=torch.bfloat16, device=device)
    return buf, buf[GUARD_ROWS : GUARD_ROWS + rows]


def _nan_bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) == torch.tensor(float("nan"), dtype=torch.bfloat16).view(torch.int16).item()


def check_case(subject: Subject, rows: int, f: int, gen: torch.Generator) -> dict[str, Any]:
    """One (rows, F) case on fresh inputs: each output's largest error over tolerance, elements left
    NaN (unwritten), guard elements written, and the same errors for the unfused torch form (a check
    of the tolerance: an FP32 computation within it)."""
    da, h = inputs(rows, f, gen, subject.device)
    buf_dh, dh = guarded(rows, 2 * f, subject.device)
    buf_a, a = guarded(rows, f, subject.device)
    subject.impl(da, h, dh, a)
    ref = reference(da, h)
    outs = {"dgate": dh[:, :f], "dup": dh[:, f:], "a": a}
    torch_dh, torch_a = subject.torch_form(da, h)
    torch_outs = {"dgate": torch_dh[:, :f], "dup": torch_dh[:, f:], "a": torch_a}
    guards = [
        buf[rows_] for buf in (buf_dh, buf_a) for rows_ in (slice(0, GUARD_ROWS), slice(-GUARD_ROWS, None))
    ]
    record: dict[str, Any] = {
        "rows": rows,
        "f": f,
        "excess": {name: excess(outs[name], *ref[name]) for name in outs},
        "torch_form_excess": {name: excess(torch_outs[name], *ref[name]) for name in outs},
        "unwritten": int(_nan_bits(dh).sum() + _nan_bits(a).sum()),
        "guard_written": int(sum((~_nan_bits(g)).sum() for g in guards)),
    }
    passed = max(record["excess"].values()) <= 1 and not record["unwritten"] and not record["guard_written"]
    return record | {"status": "pass" if passed else "fail"}


def correctness(
    results: Path, subject: Subject, cases: Sequence[tuple[int, int]] = CASES, seed: int | None = None
) -> int:
    """Every case of ``cases`` (:func:`check_case`, one record each, appended to ``results``); 0 if
    all pass, else 1. A case that raises is recorded as failed and the others still run."""
    seed = time.time_ns() % 2**31 if seed is None else seed
    gen = torch.Generator(device=subject.device).manual_seed(seed)

    def measure(rows: int, f: int) -> dict[str, Any]:
        return {"seed": seed} | check_case(subject, rows, f, gen)

    return each_shape(results, _base("correctness"), cases, measure, subject.device)


def each_shape(
    results: Path,
    base: dict[str, Any],
    shapes: Sequence[tuple[int, int]],
    measure: Callable[[int, int], dict[str, Any]],
    device: torch.device,
) -> int:
    """``measure`` each (rows, F), one record each (``base``, the shape and what it measured) appended
    to ``results`` as it exists (:func:`cutlass_kernels.results.each`), the device's cached blocks
    freed after each; 0 if every record passed, else 1."""
    return each(
        results,
        base,
        [{"rows": rows, "f": f} for rows, f in shapes],
        measure,
        torch.cuda.empty_cache if device.type == "cuda" else lambda: None,
    )


# -------------------------------------------------------------------------------------- timing


def times_ms(fn: Callable[[], object], device: torch.device, iters: int = ITERS) -> tuple[list[float], str]:
    """(milliseconds per call of ``fn``, ``iters`` figures after ``WARMUP`` calls; how they were
    taken). On a GPU, ``CALLS_PER_GRAPH`` calls are captured in one CUDA graph and each replay is
    timed with CUDA events, so no host time (Python, argument conversion) falls between the calls
    (``"graph"``); where capture fails, CUDA events around each eager call (``"events"``). On the
    CPU, ``perf_counter`` around each call."""
    for _ in range(WARMUP):
        fn()
    if device.type != "cuda":
        out = []
        for _ in range(iters):
            began = time.perf_counter()
            fn()
            out.append((time.perf_counter() - began) * 1e3)
        return out, "perf_counter"
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()  # the warm-up's temporaries: the graph's pool holds its own
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(CALLS_PER_GRAPH):
                fn()
    except Exception:  # not capturable: eager calls, host time included where it exceeds the GPU's
        return _event_ms(fn, device, iters, 1), "events"
    return _event_ms(graph.replay, device, iters, CALLS_PER_GRAPH), "graph"


def _event_ms(fn: Callable[[], object], device: torch.device, iters: int, calls: int) -> list[float]:
    pairs = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)
    ]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / calls for start, end in pairs]


def bandwidth_record(
    rows: int, f: int, ms: dict[str, list[float]], goal: float = BANDWIDTH_GOAL
) -> dict[str, Any]:
    """One shape's timing record from the times of ``kernel``, ``torch_form`` and the probes
    ``copy`` and ``add`` (the same byte count): medians and ranges, GB/s of the kernel and of each
    probe, the HBM bandwidth of the run (the faster probe), the kernel's fraction of it against
    ``goal``, and the speedup over the torch form."""
    moved = swiglu_kernel.bytes_moved(rows, f)
    median = {name: statistics.median(times) for name, times in ms.items()}
    gb_per_s = {name: moved / median[name] / 1e6 for name in ("kernel", *PROBES)}
    hbm = max(gb_per_s[name] for name in PROBES)
    frac = gb_per_s["kernel"] / hbm
    return {
        "rows": rows,
        "f": f,
        "bytes": moved,
        "ms": {name: _stats(times) for name, times in ms.items()},
        "gb_per_s": gb_per_s,
        "hbm_gb_per_s": hbm,
        "frac_of_hbm": frac,
        "goal": goal,
        "speedup_vs_torch_form": median["torch_form"] / median["kernel"],
        "status": "pass" if frac >= goal else "fail",
    }


def _stats(ms: list[float]) -> dict[str, float]:
    return {"min": min(ms), "median": statistics.median(ms), "max": max(ms)}


def time_shape(
    subject: Subject, rows: int, f: int, iters: int = ITERS, goal: float = BANDWIDTH_GOAL
) -> dict[str, Any]:
    """One shape: the kernel, the torch form and the two bandwidth probes of the same byte count
    (a device copy, read half and write half as the kernel; a BF16 add, two reads and a write), each
    timed ``iters`` times (:func:`times_ms`), as :func:`bandwidth_record` plus how each was timed."""
    times = _time_forms(subject, rows, f, iters)
    moved = swiglu_kernel.bytes_moved(rows, f)
    times["copy"] = copy_probe(moved, subject.device, iters)
    times["add"] = add_probe(moved, subject.device, iters)
    record = bandwidth_record(rows, f, {name: ms for name, (ms, _) in times.items()}, goal)
    return record | {"timer": {name: how for name, (_, how) in times.items()}}


def copy_probe(moved: int, device: torch.device, iters: int) -> tuple[list[float], str]:
    """Times of a device copy of ``moved`` bytes (half read, half written): the bandwidth probe."""
    src = torch.empty(moved // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return times_ms(lambda: dst.copy_(src), device, iters)


def add_probe(moved: int, device: torch.device, iters: int) -> tuple[list[float], str]:
    """Times of a BF16 add of ``moved`` bytes (two thirds read, one written): the other probe."""
    x, y, z = (torch.empty(moved // 6, dtype=torch.bfloat16, device=device) for _ in range(3))
    return times_ms(lambda: torch.add(x, y, out=z), device, iters)


def _time_forms(subject: Subject, rows: int, f: int, iters: int) -> dict[str, tuple[list[float], str]]:
    """The kernel's and the torch form's times on one pair of inputs (freed before the probes')."""
    device = subject.device
    da = torch.randn(rows, f, device=device, dtype=torch.bfloat16)
    h = torch.randn(rows, 2 * f, device=device, dtype=torch.bfloat16)
    dh, a = swiglu_kernel.plan(da, h)
    kernel = times_ms(lambda: subject.impl(da, h, dh, a), device, iters)
    return {"kernel": kernel, "torch_form": times_ms(lambda: subject.torch_form(da, h), device, iters)}


def timing(
    results: Path,
    subject: Subject,
    shapes: Sequence[tuple[int, int]] = TIMING_SHAPES,
    iters: int = ITERS,
    goal: float = BANDWIDTH_GOAL,
) -> int:
    """Every shape of ``shapes`` (:func:`time_shape`, one record each, appended to ``results``); 0 if
    every shape meets ``goal``, else 1. A shape that raises is recorded as failed (with its error)."""

    def measure(rows: int, f: int) -> dict[str, Any]:
        return time_shape(subject, rows, f, iters, goal)

    return each_shape(results, _base("timing"), shapes, measure, subject.device)


def _base(stage: str) -> dict[str, Any]:
    return {"stage": stage, "name": "swiglu_backward"}
