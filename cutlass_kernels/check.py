"""The GPU checks of the CuTe grouped GEMMs, one kernel or one op x variant per process, as the
children that the device run (``jobs/gpu_run/``) runs for its ``env``, ``smoke``, ``correctness`` and
SASS steps (timings: :mod:`cutlass_kernels.bench`).

Every result is one JSON line appended to a results file the moment it exists (flushed and fsynced),
so a child killed at its time limit keeps what it had recorded. Each check ends in a verdict per
kernel key (:mod:`cutlass_kernels.gating`), and a child checks only the keys every earlier stage
passed: an illegal address poisons a CUDA context for every later call and an mbarrier wait has no
timeout, so a kernel that faults, hangs or is wrong is left out of everything after.

The smoke test is a canary of the pipelines, not only of the launch: two persistent walkers (CTAs, or
clusters) over a ragged problem of 20 tiles or more, with 8 K tiles or more, so every walker takes
several tiles, every ring of shared-memory stages wraps and so does the accumulator pipeline.
Correctness inputs hold NaN and Inf in their rows past ``offs[-1]``, which no output may see (a
kernel that multiplies those rows by zero gives NaN).

With ``dry_run`` the same children run on the CPU through the torch backend on small shapes, which
tests the plumbing (isolation, limits, verdicts, records) without a GPU; GPU-only checks are recorded
as skipped. The dry run alone also takes planted faults (:mod:`cutlass_kernels.plants`), so that the
runner's handling of a kernel that hangs or is wrong can be shown on a CPU.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from cutlass_kernels import api, gating, quantize, swiglu_forward, vocabulary
from cutlass_kernels.choices import CHOICES
from cutlass_kernels.gating import key
from cutlass_kernels.isolation import run_isolated
from cutlass_kernels.mxfp8 import MXTensor, quantize_mx  # the torch form: the checks' reference
from cutlass_kernels.plants import PLANT_ENV, Plant, plants_of
from cutlass_kernels.results import append, finite, read
from cutlass_kernels.vocabulary import BF16_OPS, CUTE_BACKENDS, OPS, has_mx_kernel

MX_MODE = "exact"  # scale selection of the activations in the MX cases (MoK's; Dist-MoE's is "fast")
OUT_DTYPES = tuple(getattr(torch, name) for name in vocabulary.OUT_DTYPES)
TC_INSTRUCTION = re.compile(r"\b(HGMMA|UTC\w*MMA)\b")  # wgmma on sm90, tcgen05.mma on sm100
SPILL_INSTRUCTION = re.compile(r"\b(LDL|STL)\b")  # local-memory loads / stores
TMA_STORE_INSTRUCTION = re.compile(r"\bUTMASTG\b")  # a bulk tensor store (TMA, shared -> global)
# the smoke problem: 20+ output tiles for 2 walkers, a 600-row group (10 wgrad chunks), K of 8 tiles
SMOKE_SIZES, SMOKE_TAIL, SMOKE_WALKERS = [3, 0, 70, 600, 130, 1], 5, 2
SMOKE_N, SMOKE_K, SMOKE_MX_K = 512, 512, 1024  # MX: K tiles of 128, multiples of 128 for sm100
# correctness's CUDA-graph replay (every op, MX included): routings of 3000 rows over 16 groups
GRAPH_GROUPS, GRAPH_ROWS, GRAPH_N, GRAPH_K = 16, 3000, 512, 256
# rows past offs[-1] cycle through these: a kernel reading them into a product shows as NaN
TAIL_VALUES = (float("nan"), float("inf"), float("-inf"))
# NaN with a payload no arithmetic makes: an output element still holding it was never written
_UNWRITTEN_BITS = {torch.bfloat16: (torch.int16, 0x7FA5), torch.float32: (torch.int32, 0x7FA5A5A5)}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------------------------------ target


@dataclass(frozen=True)
class Target:
    """Where the checks run: the device, the dispatch backend, the arch whose kernels are listed, and
    (dry run only) the planted faults."""

    device: torch.device
    backend: str
    arch: str
    dry_run: bool
    plants: tuple[Plant, ...] = ()

    def planted(self, stage: str, k: str) -> str | None:
        """The kind of fault planted for key ``k`` in ``stage``, if any."""
        return next((p.kind for p in self.plants if p.matches(stage, k)), None)


class NoTarget(RuntimeError):
    """No CUDA GPU, or no CuTe backend for it."""


def target(dry_run: bool) -> Target:
    if dry_run:
        return Target(torch.device("cpu"), "torch", "sm_90a", True, plants_of(os.environ.get(PLANT_ENV, "")))
    if os.environ.get(PLANT_ENV):
        raise NoTarget(f"{PLANT_ENV} plants faults in the dry run only")
    if not torch.cuda.is_available():
        raise NoTarget("the check needs a CUDA GPU, and torch sees none")
    device = torch.device("cuda", torch.cuda.current_device())
    backend = api.resolve_backend("auto", device)
    if backend == "torch":
        cap = torch.cuda.get_device_capability(device)
        try:
            import cutlass_kernels.cute_backend  # noqa: F401

            why = "no CuTe kernels for this arch"
        except ImportError as e:
            why = f"the CuTe backends cannot be imported: {e!r}"
        raise NoTarget(
            f"no CuTe backend for {torch.cuda.get_device_name(device)} (sm_{cap[0]}{cap[1]}): {why}"
        )
    return Target(device, backend, CUTE_BACKENDS[backend], False)


def variants(t: Target, op: str) -> tuple[str, ...]:
    """The variants checked and timed: every one of the arch's; in the dry run (the torch reference,
    which has none) only the default, enough to exercise the stages."""
    from cutlass_kernels import registry

    return ("default",) if t.dry_run else registry.variants(t.arch, op)


def op_of(spec: Any) -> str:
    return "mx" if spec.mx else spec.op


def plan_records(t: Target) -> list[dict[str, Any]]:
    """What the device run checks on this arch: every kernel (its place in ``registry.all_specs``,
    the smoke test's unit) and every op x variant (the unit of correctness and timing), defaults
    first; and the variants the per-shape table names for each op, which the layers run too (none in
    the dry run, whose torch backend has no variants)."""
    from cutlass_kernels import registry

    base = {"stage": "env", "status": "info", "arch": t.arch}
    found = []
    for i, spec in enumerate(registry.all_specs(t.arch)):
        op, out = op_of(spec), dtype_name(spec.out_dtype)
        if spec.variant in variants(t, op):
            found.append(
                {**base, "name": "kernel", "index": i, "spec": spec.name, "op": op, "out_dtype": out}
                | {"variant": spec.variant, "key": key(op, out, spec.variant)}
            )
    checks = [{**base, "name": "op variant", "op": op, "variant": v} for op in OPS for v in variants(t, op)]
    ops = {op: sorted({c.variant for c in CHOICES if (c.arch, c.op) == (t.arch, op)}) for op in OPS}
    chosen_ops: dict[str, list[str]] = {op: v for op, v in ops.items() if v and not t.dry_run}
    if quantize.quantizer() == "kernel":  # the layers run the MX quantization kernel: it joins the gate
        chosen_ops[gating.MX_QUANT] = ["default"]
    if swiglu_forward.implementation() == "kernel":  # and the fused SwiGLU forward kernel likewise
        chosen_ops[gating.SWIGLU_FWD] = ["default"]
    chosen = {**base, "name": "chosen", "variants": chosen_ops}
    return [
        *sorted(found, key=lambda r: r["variant"] != "default"),
        *sorted(checks, key=lambda r: r["variant"] != "default"),
        chosen,
    ]


# ------------------------------------------------------------------------------------------- env


def env_record(t: Target) -> dict[str, Any]:
    """Device, driver, clocks and the versions of the stack."""
    record: dict[str, Any] = {
        "stage": "env",
        "name": "versions",
        "status": "info",
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "backend": t.backend,
        "arch": t.arch,
    }
    for dist in ("nvidia-cutlass-dsl", "cuda-bindings", "cuda-python", "nvidia-ml-py"):
        try:
            record[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            record[dist] = None
    if t.device.type == "cuda":
        props = torch.cuda.get_device_properties(t.device)
        record |= {
            "device": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        }
        record |= _nvml(t.device.index or 0)
    else:
        record["device"] = "cpu (dry run)"
    return record


def _nvml(index: int) -> dict[str, Any]:
    """Driver and SM / memory clocks (current and maximum, MHz); the error where NVML is unusable."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        sm, mem = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
        return {
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, sm),
            "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, sm),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, mem),
            "mem_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, mem),
            "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
        }
    except Exception as e:  # no NVML library or an unsupported query: the record says why
        return {"nvml_error": f"{type(e).__name__}: {e}"}


# -------------------------------------------------------------------------------------- problems


def random_sizes(groups: int, rows: int, gen: torch.Generator, empty: int = 1) -> list[int]:
    """Skewed expert loads summing to ``rows`` with ``empty`` experts receiving nothing."""
    weights = torch.rand(groups, generator=gen) ** 2 + 0.05
    weights[torch.randperm(groups, generator=gen)[: min(empty, groups - 1)]] = 0
    sizes = torch.floor(weights / weights.sum() * rows).long()
    sizes[int(torch.argmax(weights))] += rows - int(sizes.sum())
    return sizes.tolist()


def offsets(sizes: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(sizes, device=device).cumsum(0).to(torch.int32)


def cast_values(b: MXTensor) -> torch.Tensor:
    """``b``'s values in BF16, one group at a time (what a layer caches beside its MX weights)."""
    return torch.cat(
        [
            MXTensor(b.data[g : g + 1], b.scale[g : g + 1]).dequantize(torch.bfloat16)
            for g in range(b.shape[0])
        ]
    )


def quantize_chunked(x: torch.Tensor, chunk: int = 4) -> MXTensor:
    """quantize_mx along the first dimension in chunks (bounds the FP32 temporaries of big weights)."""
    parts = [quantize_mx(x[i : i + chunk]) for i in range(0, x.shape[0], chunk)]
    return MXTensor(torch.cat([p.data for p in parts]), torch.cat([p.scale for p in parts]))


def reference(a: torch.Tensor | MXTensor, b: torch.Tensor | MXTensor, sizes: list[int]) -> torch.Tensor:
    """FP32 per-group products of the same (rounded) operands for the first ``sum(sizes)`` rows; b is
    [G, N, K]. MX operands are dequantized (exactly) one group at a time, bounding the memory."""
    out = torch.zeros(sum(sizes), b.shape[1], device=a.data.device)
    start = 0
    for g, size in enumerate(sizes):
        rows = slice(start, start + size)
        a_g = (
            MXTensor(a.data[rows], a.scale[rows]).dequantize() if isinstance(a, MXTensor) else a[rows].float()
        )
        b_g = MXTensor(b.data[g], b.scale[g]).dequantize() if isinstance(b, MXTensor) else b[g].float()
        out[rows] = a_g @ b_g.T
        start += size
    return out


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref|; NaN anywhere in ``out`` (a row never written) is infinite."""
    err = float((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)) if ref.numel() else 0.0
    return float("inf") if math.isnan(err) else err


def wgrad_rel_err(dw: torch.Tensor, dy: torch.Tensor, x: torch.Tensor, sizes: list[int]) -> float:
    """:func:`rel_err` of ``dw`` [G, N, K] against FP32 per-group dY_g^T X_g (zeros for empty groups),
    one group at a time: the whole reference of the seed-003 shape would take 34 GB."""
    worst, scale, start = 0.0, 0.0, 0
    for g, size in enumerate(sizes):
        ref = dy[start : start + size].float().T @ x[start : start + size].float()
        diff = float((dw[g].float() - ref).abs().max())
        if math.isnan(diff):  # max() of floats would drop it
            return float("inf")
        worst = max(worst, diff)
        scale = max(scale, float(ref.abs().max()))
        start += size
    return worst / max(scale, 1e-30)


def tolerance(out_dtype: torch.dtype, backend: str) -> float:
    """Max-norm relative error allowed: one BF16 rounding of the output (2^-8) with headroom, or FP32
    accumulation-order differences over K up to ~10^4. The torch backend rounds its product to the
    input dtype before any cast, so its FP32 output carries the BF16 rounding."""
    return 1e-2 if out_dtype == torch.bfloat16 or backend == "torch" else 1e-3


@dataclass
class CheckCase:
    """One grouped GEMM of ``op`` on ``sizes`` (plus ``tail`` rows at or past ``offs[-1]``)."""

    op: str
    sizes: list[int]
    offs: torch.Tensor
    lhs: Any  # fprop: A [M, K]; dgrad / wgrad: dY [M, N]; mx: A unquantized (as the layers pass it)
    rhs: Any  # fprop / dgrad: B [G, N, K]; wgrad: X [M, K]; mx: MX B
    tail: int
    rhs_values: torch.Tensor | None = None  # mx: B's BF16 values, as the layers cache them

    @property
    def lhs_mx(self) -> MXTensor:
        """mx: the activations as the product quantizes them (MoK's exact scales)."""
        return quantize_mx(self.lhs, MX_MODE)

    @property
    def used(self) -> int:
        return sum(self.sizes)

    def out_shape(self) -> tuple[int, ...]:
        if self.op == "wgrad":
            return (len(self.sizes), self.lhs.shape[1], self.rhs.shape[1])
        n = self.rhs.shape[2] if self.op == "dgrad" else self.rhs.shape[1]
        return (self.lhs.shape[0], n)

    def call(
        self, t: Target, stage: str, out_dtype: torch.dtype, variant: str, rhs: Any = None
    ) -> torch.Tensor:
        """The op through the api, on ``t``'s backend, as ``stage`` of the device run calls it (where a
        fault may be planted for it)."""
        rhs = self.rhs if rhs is None else rhs
        planted = t.planted(stage, key(self.op, dtype_name(out_dtype), variant))
        if planted == "hang":
            time.sleep(3600)  # until the runner kills the child at its limit
        if planted == "zero-times-inf" and self.op == "wgrad":
            return in_place_tail_bug(self.lhs, rhs, self.offs, out_dtype)
        entry_points: dict[str, Callable[..., torch.Tensor]] = {
            "fprop": api.grouped_gemm,
            "dgrad": api.grouped_gemm_dgrad,
            "wgrad": api.grouped_gemm_wgrad,
            "mx": api.grouped_gemm_mx,
        }
        if t.backend == "torch":  # the reference has no variants: the dry run checks its plumbing
            variant = "auto"
        extra: dict[str, Any] = {}
        if self.op == "mx":  # the layers' call: unquantized activations, the weights' cached values
            extra = {"mode": MX_MODE, "b_values": self.rhs_values}
        fn = entry_points[self.op]
        out = fn(self.lhs, rhs, self.offs, out_dtype=out_dtype, backend=t.backend, variant=variant, **extra)
        return out * 2 if planted == "wrong" else out

    def error(self, out: torch.Tensor) -> float:
        if self.op == "wgrad":
            return wgrad_rel_err(out, self.lhs, self.rhs, self.sizes)
        b = self.rhs.transpose(1, 2) if self.op == "dgrad" else self.rhs
        a = self.lhs_mx if self.op == "mx" else self.lhs
        return rel_err(out[: self.used], reference(a, b, self.sizes))


def make_case(op: str, sizes: list[int], n: int, k: int, tail: int, device: torch.device) -> CheckCase:
    """Fresh random operands of the forward GEMM [M, K] x [G, N, K]^T (dgrad and wgrad: its gradients).
    The row operands' rows past ``offs[-1]`` hold NaN, Inf and -Inf (:data:`TAIL_VALUES`): a kernel
    that sums them in, even multiplied by zero, gives NaN."""
    m, groups = sum(sizes) + tail, len(sizes)
    offs = offsets(sizes, device)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:  # drawn in BF16: no FP32 temporaries
        return torch.randn(*shape, device=device, dtype=torch.bfloat16).mul_(scale)

    def rows(width: int) -> torch.Tensor:
        x = randn(m, width)
        for i, value in enumerate(TAIL_VALUES):
            x[m - tail + i :: len(TAIL_VALUES)] = value
        return x

    if op == "fprop":
        return CheckCase(op, sizes, offs, rows(k), randn(groups, n, k, scale=k**-0.5), tail)
    if op == "dgrad":
        return CheckCase(op, sizes, offs, rows(n), randn(groups, n, k, scale=n**-0.5), tail)
    if op == "wgrad":
        return CheckCase(op, sizes, offs, rows(n), rows(k), tail)
    b = quantize_chunked(torch.randn(groups, n, k, device=device) * k**-0.5)
    return CheckCase(op, sizes, offs, rows(k), b, tail, rhs_values=cast_values(b))


def in_place_tail_bug(
    dy: torch.Tensor, x: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """wgrad as the sm90 ``inplace`` kernel computed it before it zeroed X^T's rows too (a planted
    fault of the dry run): each group reduced over whole 64-row chunks from its first row, with dY's
    rows past the group's end zeroed and X's not, so 0 x Inf in rows past ``offs[-1]`` gives NaN."""
    ends = offs.tolist()
    out = torch.zeros(len(ends), dy.shape[1], x.shape[1], dtype=torch.float32)
    for g, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
        if end <= start:
            continue
        stop = min(start + -(-(end - start) // 64) * 64, dy.shape[0])
        dy_rows = dy[start:stop].float()
        dy_rows[end - start :] = 0
        out[g] = dy_rows.T @ x[start:stop].float()
    return out.to(out_dtype)


# ------------------------------------------------------------------------------------------ smoke


def smoke_one(t: Target, index: int, op: str, out_dtype: torch.dtype, variant: str, work: Path) -> int:
    """Compile kernel ``index`` of the arch (keeping its cubin for the SASS check; the dry run compiles
    nothing) and run ``op`` once on the smoke problem with two persistent walkers; print the record."""
    record: dict[str, Any] = {"variant": variant}
    walkers: Any = contextlib.nullcontext()
    if not t.dry_run:  # compiled with its PTX and cubin kept (the dispatch below reuses it in-process)
        from cutlass_kernels import registry
        from cutlass_kernels.cute_backend import persistent_walkers
        from cutlass_kernels.cute_base import compile_spec

        spec = registry.all_specs(t.arch)[index]
        start = time.perf_counter()
        compile_spec(spec, registry.kernel_for(spec), work / "cubins")
        record["compile_s"] = round(time.perf_counter() - start, 2)
        walkers = persistent_walkers(SMOKE_WALKERS)
    k = SMOKE_MX_K if op == "mx" else SMOKE_K
    prob = make_case(op, SMOKE_SIZES, SMOKE_N, k, SMOKE_TAIL, t.device)
    start = time.perf_counter()
    with walkers:
        out = prob.call(t, "smoke", out_dtype, variant)
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)
    record["run_s"] = round(time.perf_counter() - start, 3)
    err, tol = prob.error(out), tolerance(out_dtype, t.backend)
    record |= {"max_rel_err": err, "tol": tol, "status": "pass" if err <= tol else "fail"}
    if err > tol:
        record["error"] = f"wrong result: max relative error {err:.3g} > {tol:g}"
    print(json.dumps(finite(record)), flush=True)
    return 0


# ------------------------------------------------------------------------------------ correctness


@dataclass
class CaseShape:
    name: str
    sizes: list[int]
    n: int
    k: int
    tail: int
    ops: tuple[str, ...] = OPS


@dataclass
class Checker:
    """Appends one record per check of one op x variant to ``results``, and one verdict per key."""

    t: Target
    op: str
    variant: str
    results: Path
    seed: int
    failures: dict[str, int] = field(default_factory=dict)

    def key(self, out_dtype: torch.dtype) -> str:
        return key(self.op, dtype_name(out_dtype), self.variant)

    def record(self, case: str, out_dtype: torch.dtype, status: str, **extra: Any) -> None:
        rec = {"stage": "correctness", "op": self.op, "variant": self.variant, "case": case}
        rec |= {"out_dtype": dtype_name(out_dtype), "key": self.key(out_dtype)}
        append(self.results, {**rec, "status": status, "seed": self.seed, **extra})
        k = self.key(out_dtype)
        self.failures[k] = self.failures.get(k, 0) + (status == "fail")

    def attempt(
        self, case: str, out_dtype: torch.dtype, check: Callable[[], dict[str, Any]], **extra: Any
    ) -> None:
        """Run ``check`` (returns status and details); an exception is a failure with its message.
        ``extra`` is recorded either way (a case's routing, so that a failure can be replayed)."""
        try:
            result = check()
        except Exception as e:  # a failing kernel is a result: record it, keep checking the others
            result = {"status": "fail", "error": f"{type(e).__name__}: {e}"[:600]}
        self.record(case, out_dtype, **result, **extra)

    def verdict(self, out_dtype: torch.dtype, refused: str = "") -> bool:
        """The key's verdict (a skip where an earlier stage ``refused`` it); whether it passed."""
        k, failed = self.key(out_dtype), self.failures.get(self.key(out_dtype), 0)
        status = "skip" if refused else "fail" if failed else "pass"
        rec = {"stage": "correctness", "name": "verdict", "verdict": True, "key": k, "op": self.op}
        rec |= {"variant": self.variant, "out_dtype": dtype_name(out_dtype), "status": status}
        if refused or failed:
            rec["reason"] = refused or f"{failed} failed case(s)"
        append(self.results, rec)
        return status == "pass"


def cases(t: Target, gen: torch.Generator) -> list[CaseShape]:
    """Edge routings (empty groups, M / N / K tails, rows past offs[-1]) and fresh random ones; on a GPU
    also one per-rank shape of the matrix (D = 7168, F = 1536, EP 8: the down projection). MX cases
    have N and K multiples of 128, as the sm100 block-scaled kernel takes them."""
    edges = [0, 1, 127, 128, 129, 0, 300, 5]
    found = [
        CaseShape("edges N/K tails", edges, 384, 200, 7, BF16_OPS),
        CaseShape("edges N/K tails", edges, 384, 256, 7, ("mx",)),  # K a multiple of 128
    ]
    if t.dry_run:
        return [*found, CaseShape("random routing", random_sizes(6, 300, gen, empty=2), 128, 128, 3)]
    return [
        *found,
        CaseShape("random routing", random_sizes(24, 5000, gen, empty=3), 1536, 1024, 33),
        CaseShape("D7168-F1536-EP8-down", random_sizes(48, 6 * 2048, gen, empty=2), 7168, 1536, 0),
    ]


def correctness_op(t: Target, op: str, variant: str, results: Path) -> int:
    """Every case of ``op``, one output dtype after the other (BF16 first, with an unsupported B
    layout and a CUDA-graph replay), each ending in its key's verdict, so that a key checked in full
    keeps its verdict when a later one hangs. Keys an earlier stage did not pass are skipped."""
    seed = time.time_ns() % 2**31
    torch.manual_seed(seed)  # fresh operands and routings every run; the seed is recorded
    gen = torch.Generator().manual_seed(seed)
    found = gating.verdicts(read(results))
    checker = Checker(t, op, variant, results, seed)
    shapes = [case for case in cases(t, gen) if op in case.ops]
    passed = True
    for out_dtype in OUT_DTYPES:
        refused = gating.refusal(t.arch, found, "correctness", checker.key(out_dtype))
        if refused:
            checker.verdict(out_dtype, refused)
            continue
        for case in shapes:
            prob = make_case(op, case.sizes, case.n, case.k, case.tail, t.device)
            checker.attempt(
                case.name,
                out_dtype,
                functools.partial(_check_output, t, prob, out_dtype, variant),
                sizes=case.sizes,
            )
            del prob
        if out_dtype == torch.bfloat16:  # the layers' output dtype
            if op in ("fprop", "dgrad"):
                other = make_case(op, [0, 40, 129, 3], 256, 128, 0, t.device)
                checker.attempt(
                    "B in the other stride order",
                    out_dtype,
                    functools.partial(_check_layout, t, other, variant),
                )
            checker.attempt(
                "cuda-graph replay, new routing", out_dtype, lambda: _check_graph(t, op, variant, gen)
            )
        passed &= checker.verdict(out_dtype)
    return 0 if passed else 1


def _nan_prefill(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> int:
    """Fill the block the next allocation of this size will get (the caching allocator hands back the
    block just freed) with the NaN of :data:`_UNWRITTEN_BITS`, so that an element the kernel never
    writes stays that NaN, told apart from any NaN it computes; the block's address."""
    int_dtype, bits = _UNWRITTEN_BITS[dtype]
    scratch = torch.full(shape, bits, dtype=int_dtype, device=device).view(dtype)
    ptr = scratch.data_ptr()
    del scratch
    return ptr


def unwritten(out: torch.Tensor) -> torch.Tensor:
    """Which elements of ``out`` still hold the prefill's NaN."""
    int_dtype, bits = _UNWRITTEN_BITS[out.dtype]
    return out.view(int_dtype) == bits


def kernel_path(t: Target, prob: CheckCase, out_dtype: torch.dtype) -> str:
    """The path the dispatch takes for these operands: ``kernel``, or why it falls back to torch (then
    a check would test torch, not the kernel)."""
    if t.backend == "torch":
        return "torch backend"
    from cutlass_kernels import cute_backend as cb

    lhs, rhs, prefix = prob.lhs, prob.rhs, ""
    if prob.op == "mx":
        if has_mx_kernel(t.arch):
            reason = cb.mx_unsupported_reason(prob.lhs_mx, rhs, prob.offs, out_dtype)
            return f"torch fallback: {reason}" if reason else "kernel"
        lhs, rhs, prefix = cb.dequantize_bf16(prob.lhs_mx), prob.rhs_values, "BF16 values, "
    if prob.op == "wgrad":
        reason = cb.wgrad_unsupported_reason(lhs, rhs, prob.offs, out_dtype)
    else:
        op = "dgrad" if prob.op == "dgrad" else "fprop"
        b_kernel = rhs.permute(2, 1, 0) if op == "dgrad" else rhs.permute(1, 2, 0)
        reason = cb.unsupported_reason(lhs, b_kernel, prob.offs, out_dtype, op=op)
    return prefix + (f"torch fallback: {reason}" if reason else "kernel")


def unchecked_tail(t: Target, op: str) -> str:
    """Why a call of ``op`` on ``t`` cannot show whether the kernel wrote rows past ``offs[-1]``
    (``""``: it can). The MX op on an arch without block-scaled MMA converts its operands to BF16
    inside the call, after the output's block was prefilled, and those conversions' temporaries may
    take that block first (seen on an H200: all 33 tail rows of an FP32 output "written" while the
    same kernel, called as fprop, wrote none of them); fprop's check, which the MX op's verdict
    needs, covers that kernel's tail rows."""
    if t.backend == "torch":
        return "torch backend"
    if op == "mx" and not has_mx_kernel(t.arch):
        return "the MX path allocates its BF16 operands after the prefill (fprop's check covers the kernel)"
    return ""


def _check_output(t: Target, prob: CheckCase, out_dtype: torch.dtype, variant: str) -> dict[str, Any]:
    path = kernel_path(t, prob, out_dtype)
    if "torch fallback" in path:
        return {"status": "fail", "path": path, "error": f"the operands would not reach the kernel: {path}"}
    ptr = _nan_prefill(prob.out_shape(), out_dtype, t.device)
    out = prob.call(t, "correctness", out_dtype, variant)
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)
    prefilled = out.data_ptr() == ptr
    err, tol = prob.error(out), tolerance(out_dtype, t.backend)
    result: dict[str, Any] = {"max_rel_err": err, "tol": tol, "nan_prefill": prefilled, "path": path}
    problems = [] if err <= tol else [f"max relative error {err:.3g} > {tol:g}"]
    if prob.tail and prob.op != "wgrad":
        if why := unchecked_tail(t, prob.op) or ("" if prefilled else "no NaN prefill"):
            result["tail_rows"] = f"not checked: {why}"
        else:
            written = int((~unwritten(out[prob.used :])).any(dim=1).sum())
            result["tail_rows"] = f"{written} of {prob.tail} rows past offs[-1] written"
            if written:
                problems.append(result["tail_rows"])
    if problems:
        result["error"] = "; ".join(problems)
    return {"status": "fail" if problems else "pass", **result}


def _check_layout(t: Target, prob: CheckCase, variant: str) -> dict[str, Any]:
    """B with the same values in the other stride order: a clear ValueError, or the right result; a
    silently wrong one fails."""
    other = prob.rhs.transpose(1, 2).contiguous().transpose(1, 2)
    try:
        out = prob.call(t, "correctness", torch.bfloat16, variant, rhs=other)
    except ValueError as e:
        return {"status": "pass", "outcome": f"refused: {e}"[:300]}
    err, tol = prob.error(out), tolerance(torch.bfloat16, t.backend)
    if err <= tol:
        return {"status": "pass", "outcome": "computed correctly", "max_rel_err": err, "tol": tol}
    return {"status": "fail", "max_rel_err": err, "tol": tol, "error": f"silently wrong (error {err:.3g})"}


def _check_graph(t: Target, op: str, variant: str, gen: torch.Generator) -> dict[str, Any]:
    """Capture one call (BF16 out, as the layers do) in a CUDA graph, rewrite ``offs`` in place with a
    new routing and replay: a kernel that read the routing on the host, or a wgrad whose row padding
    was not captured, keeps the old routing and fails."""
    if t.device.type != "cuda":
        return {"status": "skip", "reason": "no CUDA graphs on cpu"}
    groups, rows = GRAPH_GROUPS, GRAPH_ROWS
    prob = make_case(op, random_sizes(groups, rows, gen, empty=2), GRAPH_N, GRAPH_K, 0, t.device)
    prob.call(t, "correctness", torch.bfloat16, variant)  # compile and load outside the capture
    torch.cuda.synchronize(t.device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = prob.call(t, "correctness", torch.bfloat16, variant)
    prob.sizes = random_sizes(groups, rows, gen, empty=3)
    prob.offs.copy_(offsets(prob.sizes, t.device))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize(t.device)
    err, tol = prob.error(out), tolerance(torch.bfloat16, t.backend)
    return {"status": "pass" if err <= tol else "fail", "max_rel_err": err, "tol": tol}


# ------------------------------------------------------------------------------------------- SASS


def sass_counts(text: str) -> dict[str, int]:
    """Tensor-core MMA instructions, local-memory loads / stores (spills) in all, and those between the
    first and the last MMA: the MMA issue loop, the part of a warp-specialized kernel whose spills
    slow the main loop (others are in setup or the epilogue, reported but not failed)."""
    lines = text.splitlines()
    mma = [i for i, line in enumerate(lines) if TC_INSTRUCTION.search(line)]
    local = [i for i, line in enumerate(lines) if SPILL_INSTRUCTION.search(line)]
    inside = [i for i in local if mma and mma[0] < i < mma[-1]]
    tma_stores = sum(bool(TMA_STORE_INSTRUCTION.search(line)) for line in lines)
    return {"mma": len(mma), "local": len(local), "local_in_mma_loop": len(inside), "tma_store": tma_stores}


def cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/cuobjdump")
    return str(default) if default.exists() else None


def disassembler() -> list[str] | None:
    """The command that prints a cubin's SASS: ``cuobjdump -sass`` (the CUDA image's), else the
    ``nvdisasm`` of the nvidia-cuda-nvdisasm wheel (what a CPU machine has: the dev extra)."""
    found = cuobjdump()
    if found:
        return [found, "-sass"]
    nvdisasm = shutil.which("nvdisasm")
    if nvdisasm is None:
        wheels = importlib.util.find_spec("nvidia")  # the namespace of NVIDIA's CUDA component wheels
        packaged = [
            Path(p) / "cu13" / "bin" / "nvdisasm"
            for p in (wheels and wheels.submodule_search_locations) or ()
        ]
        nvdisasm = next((str(p) for p in packaged if p.exists()), None)
    return [nvdisasm] if nvdisasm else None


def sass(t: Target, results: Path, work: Path) -> bool:
    """Each kept cubin's SASS must hold tensor-core MMAs (HGMMA / UTC*MMA) and no local-memory loads or
    stores (spills) in its MMA loop (:func:`sass_counts`); skipped, with the reason, where cuobjdump
    (or its nvdisasm) or the cubins are absent."""
    cubins = sorted((work / "cubins").glob("*.cubin"))
    tool = disassembler()
    base = {"stage": "sass"}
    if not cubins or tool is None:
        why = "neither cuobjdump nor nvdisasm found"
        if not cubins:
            why = "the dry run compiles no kernel" if t.dry_run else f"no cubins in {work / 'cubins'} (smoke)"
        append(results, {**base, "case": "sass", "status": "skip", "reason": why})
        return True

    def one(cubin: Path) -> bool:
        rec = {**base, "case": f"sass {cubin.stem}"}
        try:
            done = run_isolated([*tool, str(cubin)], 60)
        except OSError as e:
            append(results, {**rec, "status": "skip", "reason": f"cuobjdump: {e}"})
            return True
        if done.rc != 0:  # e.g. nvdisasm missing, or stuck: the tool failed, not the kernel
            append(results, {**rec, "status": "skip", "reason": f"cuobjdump: {done.why(60)}"})
            return True
        counts = sass_counts(done.output)
        passed = counts["mma"] > 0 and counts["local_in_mma_loop"] == 0
        extra = (
            {}
            if passed
            else {
                "error": f"{counts['mma']} tensor-core MMA and {counts['local_in_mma_loop']} "
                "local-memory instructions between the first and last MMA"
            }
        )
        append(results, {**rec, "status": "pass" if passed else "fail", **counts, **extra})
        return passed

    # a process each, several at once: one at a time, 33 cubins took 16 s of an H200 machine's 16 cores
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return all(list(pool.map(one, cubins)))
