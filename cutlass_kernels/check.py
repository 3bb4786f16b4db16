"""The GPU checks of the CuTe grouped GEMMs, as the stages ``env``, ``smoke`` and ``correctness`` of
``jobs/gpu-run.sh`` (timings: :mod:`cutlass_kernels.bench`).

Every result is one JSON line appended to a results file the moment it exists (flushed and fsynced),
so a stage killed at its time limit keeps what it had measured. A kernel runs in a process of its own
(smoke: one per kernel; correctness: one per op and variant) with its own timeout, because an illegal
address poisons the CUDA context of every later call and an mbarrier wait has no timeout: a kernel
that faults or hangs is recorded and left out of the later stages, which go on.

With ``dry_run`` the same stages run on the CPU through the torch backend on small shapes, which tests
the plumbing (isolation, timeouts, records) without a GPU; GPU-only checks are recorded as skipped.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from cutlass_kernels import api, quantize_mx, vocabulary
from cutlass_kernels.isolation import Isolated, run_isolated
from cutlass_kernels.mxfp8 import MXTensor
from cutlass_kernels.results import append, finite, read
from cutlass_kernels.vocabulary import BF16_OPS, CUTE_BACKENDS, OPS, has_mx_kernel

MX_MODE = "exact"  # scale selection of the activations in the MX cases (MoK's; Dist-MoE's is "fast")
OUT_DTYPES = tuple(getattr(torch, name) for name in vocabulary.OUT_DTYPES)
SMOKE_TIMEOUT_S = 45.0  # one kernel: compile (file-cached afterwards) + one tiny launch
CORRECTNESS_TIMEOUT_S = 50.0  # one op x variant: all its cases, both output dtypes, graph replay
TC_INSTRUCTION = re.compile(r"\b(HGMMA|UTC\w*MMA)\b")  # wgmma on sm90, tcgen05.mma on sm100
SPILL_INSTRUCTION = re.compile(r"\b(LDL|STL)\b")  # local-memory loads / stores


# ----------------------------------------------------------------------------------------- results


def failed_keys(path: Path) -> set[str]:
    """Kernel keys (``op/out_dtype/variant``) with any failed smoke or correctness record in ``path``
    (a partial rerun into the same results file keeps leaving them out)."""
    return {
        r["key"]
        for r in read(path)
        if r.get("stage") in ("smoke", "correctness") and r.get("key") and r.get("status") == "fail"
    }


def key(op: str, out_dtype: torch.dtype, variant: str) -> str:
    return f"{op}/{dtype_name(out_dtype)}/{variant}"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------------------------------ target


@dataclass(frozen=True)
class Target:
    """Where the checks run: the device, the dispatch backend and the arch whose kernels are listed."""

    device: torch.device
    backend: str
    arch: str
    dry_run: bool


class NoTarget(RuntimeError):
    """No CUDA GPU, or no CuTe backend for it."""


def target(dry_run: bool) -> Target:
    if dry_run:
        return Target(torch.device("cpu"), "torch", "sm_90a", True)
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
        worst = max(worst, float((dw[g].float() - ref).abs().max()))
        scale = max(scale, float(ref.abs().max()))
        start += size
    err = worst / max(scale, 1e-30)
    return float("inf") if math.isnan(err) else err


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

    def call(self, out_dtype: torch.dtype, backend: str, variant: str, rhs: Any = None) -> torch.Tensor:
        rhs = self.rhs if rhs is None else rhs
        entry_points: dict[str, Callable[..., torch.Tensor]] = {
            "fprop": api.grouped_gemm,
            "dgrad": api.grouped_gemm_dgrad,
            "wgrad": api.grouped_gemm_wgrad,
            "mx": api.grouped_gemm_mx,
        }
        fn = entry_points[self.op]
        if backend == "torch":  # the reference has no variants: the dry run checks its plumbing
            variant = "auto"
        extra: dict[str, Any] = {}
        if self.op == "mx":  # the layers' call: unquantized activations, the weights' cached values
            extra = {"mode": MX_MODE, "b_values": self.rhs_values}
        return fn(self.lhs, rhs, self.offs, out_dtype=out_dtype, backend=backend, variant=variant, **extra)

    def error(self, out: torch.Tensor) -> float:
        if self.op == "wgrad":
            return wgrad_rel_err(out, self.lhs, self.rhs, self.sizes)
        b = self.rhs.transpose(1, 2) if self.op == "dgrad" else self.rhs
        a = self.lhs_mx if self.op == "mx" else self.lhs
        return rel_err(out[: self.used], reference(a, b, self.sizes))


def make_case(op: str, sizes: list[int], n: int, k: int, tail: int, device: torch.device) -> CheckCase:
    """Fresh random operands of the forward GEMM [M, K] x [G, N, K]^T (dgrad and wgrad: its gradients).
    Rows past ``offs[-1]`` hold large values in wgrad inputs, so summing them in would show."""
    m, groups = sum(sizes) + tail, len(sizes)
    offs = offsets(sizes, device)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:  # drawn in BF16: no FP32 temporaries
        return torch.randn(*shape, device=device, dtype=torch.bfloat16).mul_(scale)

    if op == "fprop":
        return CheckCase(op, sizes, offs, randn(m, k), randn(groups, n, k, scale=k**-0.5), tail)
    if op == "dgrad":
        return CheckCase(op, sizes, offs, randn(m, n), randn(groups, n, k, scale=n**-0.5), tail)
    if op == "wgrad":
        dy, x = randn(m, n), randn(m, k)
        dy[m - tail :], x[m - tail :] = 1e4, 1e4
        return CheckCase(op, sizes, offs, dy, x, tail)
    b = quantize_chunked(torch.randn(groups, n, k, device=device) * k**-0.5)
    return CheckCase(op, sizes, offs, randn(m, k), b, tail, rhs_values=cast_values(b))


# ------------------------------------------------------------------------------------- isolation


def isolated(args: list[str], limit: float) -> Isolated:
    """Run ``python -m cutlass_kernels ARGS`` isolated (:func:`run_isolated`), its output into ours."""
    done = run_isolated([sys.executable, "-u", "-m", "cutlass_kernels", *args], limit)
    sys.stdout.write(done.output)  # into the stage log
    sys.stdout.flush()
    return done


# ------------------------------------------------------------------------------------------ smoke


def op_of(spec: Any) -> str:
    return "mx" if spec.mx else spec.op


def smoke(t: Target, results: Path, work: Path) -> int:
    """Each compiled kernel (every variant's) once on a tiny problem, each in its own process, in parallel."""
    from cutlass_kernels import registry

    specs = enumerate(registry.all_specs(t.arch))
    jobs = [(i, spec, spec.variant) for i, spec in specs if spec.variant in variants(t, op_of(spec))]

    def one(job: tuple[int, Any, str]) -> bool:
        i, spec, variant = job
        args = [
            "smoke-one",
            "--index",
            str(i),
            "--op",
            op_of(spec),
            "--out-dtype",
            dtype_name(spec.out_dtype),
        ]
        args += ["--variant", variant, "--work", str(work), *(["--dry-run"] if t.dry_run else [])]
        outcome = isolated(args, SMOKE_TIMEOUT_S)
        record = {"stage": "smoke", "name": spec.name, "key": key(op_of(spec), spec.out_dtype, variant)}
        found = [ln for ln in outcome.output.splitlines() if ln.startswith("{")]
        if outcome.rc == 0 and found:
            record |= json.loads(found[-1])
        else:
            record |= {"status": "fail", "error": outcome.why(SMOKE_TIMEOUT_S)}
        record["seconds"] = round(outcome.seconds, 2)
        append(results, record)
        return record["status"] == "pass"

    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1, 8)) as pool:
        passed = list(pool.map(one, jobs))
    return 0 if all(passed) else 1


def smoke_one(t: Target, index: int, op: str, out_dtype: torch.dtype, variant: str, work: Path) -> int:
    """Compile kernel ``index`` of the arch (keeping its cubin for the SASS check; the dry run compiles
    nothing) and run ``op`` once on a tiny problem; print the record."""
    record: dict[str, Any] = {"variant": variant}
    if not t.dry_run:  # compiled with its PTX and cubin kept (the dispatch below reuses it in-process)
        from cutlass_kernels import registry
        from cutlass_kernels.cute_base import compile_spec

        spec = registry.all_specs(t.arch)[index]
        start = time.perf_counter()
        compile_spec(spec, registry.kernel_for(spec), work / "cubins")
        record["compile_s"] = round(time.perf_counter() - start, 2)
    prob = make_case(op, [3, 0, 70, 130], 192, 96, 5, t.device)
    start = time.perf_counter()
    out = prob.call(out_dtype, t.backend, variant)
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
    """Appends one record per check of one op x variant to ``results``."""

    t: Target
    op: str
    variant: str
    results: Path
    seed: int
    excluded: set[str] = field(default_factory=set)
    failures: int = 0

    def record(self, case: str, out_dtype: torch.dtype | None, status: str, **extra: Any) -> None:
        dtype = dtype_name(out_dtype) if out_dtype is not None else None
        rec = {
            "stage": "correctness",
            "op": self.op,
            "variant": self.variant,
            "case": case,
            "out_dtype": dtype,
        }
        if out_dtype is not None:
            rec["key"] = key(self.op, out_dtype, self.variant)
        append(self.results, {**rec, "status": status, "seed": self.seed, **extra})
        self.failures += status == "fail"

    def attempt(self, case: str, out_dtype: torch.dtype | None, check: Callable[[], dict[str, Any]]) -> None:
        """Run ``check`` (returns status and details); an exception is a failure with its message."""
        if out_dtype is not None and key(self.op, out_dtype, self.variant) in self.excluded:
            self.record(
                case, None, "skip", reason=f"{key(self.op, out_dtype, self.variant)} failed its smoke test"
            )
            return
        try:
            result = check()
        except Exception as e:  # a failing kernel is a result: record it, keep checking the others
            result = {"status": "fail", "error": f"{type(e).__name__}: {e}"[:600]}
        self.record(case, out_dtype, **result)


def cases(t: Target, gen: torch.Generator) -> list[CaseShape]:
    """Edge routings (empty groups, M / N / K tails, rows past offs[-1]) and fresh random ones; on a GPU
    also one per-rank shape of the matrix (D = 7168, F = 1536, EP 8: the down projection)."""
    edges = [0, 1, 127, 128, 129, 0, 300, 5]
    found = [
        CaseShape("edges N/K tails", edges, 384, 200, 7, BF16_OPS),
        CaseShape("edges N/K tails", edges, 384, 224, 7, ("mx",)),  # K a multiple of the 32-element MX block
    ]
    if t.dry_run:
        return [*found, CaseShape("random routing", random_sizes(6, 300, gen, empty=2), 96, 64, 3)]
    return [
        *found,
        CaseShape("random routing", random_sizes(24, 5000, gen, empty=3), 1536, 1024, 33),
        CaseShape("D7168-F1536-EP8-down", random_sizes(48, 6 * 2048, gen, empty=2), 7168, 1536, 0),
    ]


def correctness(t: Target, results: Path, work: Path) -> int:
    """One process per op x variant (in parallel), then the SASS check of the smoke stage's cubins."""
    jobs = [(op, v) for op in OPS for v in variants(t, op)]

    def one(job: tuple[str, str]) -> bool:
        op, variant = job
        args = ["correctness-op", "--op", op, "--variant", variant, "--results", str(results)]
        outcome = isolated([*args, *(["--dry-run"] if t.dry_run else [])], CORRECTNESS_TIMEOUT_S)
        if outcome.rc in (0, 1):
            return outcome.rc == 0
        rec = {"stage": "correctness", "op": op, "variant": variant, "case": "process", "status": "fail"}
        append(results, {**rec, "error": outcome.why(CORRECTNESS_TIMEOUT_S)})
        return False

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        passed = list(pool.map(one, jobs))
    return 0 if all(passed) and sass(t, results, work) else 1


def correctness_op(t: Target, op: str, variant: str, results: Path) -> int:
    """Every case of ``op`` x both output dtypes, an unsupported B layout, and a CUDA-graph replay."""
    seed = time.time_ns() % 2**31
    torch.manual_seed(seed)  # fresh operands and routings every run; the seed is recorded
    gen = torch.Generator().manual_seed(seed)
    checker = Checker(t, op, variant, results, seed, failed_keys(results))
    for case in cases(t, gen):
        if op not in case.ops:
            continue
        prob = make_case(op, case.sizes, case.n, case.k, case.tail, t.device)
        for out_dtype in OUT_DTYPES:
            checker.attempt(
                case.name,
                out_dtype,
                functools.partial(_check_output, t, prob, out_dtype, variant),
            )
    if op in ("fprop", "dgrad"):
        prob = make_case(op, [0, 40, 129, 3], 256, 128, 0, t.device)
        checker.attempt(
            "B in the other stride order", torch.bfloat16, lambda: _check_layout(t, prob, variant)
        )
    checker.attempt(
        "cuda-graph replay, new routing", torch.bfloat16, lambda: _check_graph(t, op, variant, gen)
    )
    return 1 if checker.failures else 0


def _nan_prefill(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> int:
    """Fill the block the next allocation of this size will get (the caching allocator hands back the
    block just freed) with NaN, so a row the kernel never writes stays NaN; its address."""
    scratch = torch.full(shape, float("nan"), dtype=dtype, device=device)
    ptr = scratch.data_ptr()
    del scratch
    return ptr


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


def _check_output(t: Target, prob: CheckCase, out_dtype: torch.dtype, variant: str) -> dict[str, Any]:
    path = kernel_path(t, prob, out_dtype)
    if "torch fallback" in path:
        return {"status": "fail", "path": path, "error": f"the operands would not reach the kernel: {path}"}
    ptr = _nan_prefill(prob.out_shape(), out_dtype, t.device)
    out = prob.call(out_dtype, t.backend, variant)
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)
    prefilled = out.data_ptr() == ptr
    err, tol = prob.error(out), tolerance(out_dtype, t.backend)
    result: dict[str, Any] = {"max_rel_err": err, "tol": tol, "nan_prefill": prefilled, "path": path}
    problems = [] if err <= tol else [f"max relative error {err:.3g} > {tol:g}"]
    if prob.tail and prob.op != "wgrad":
        if t.backend == "torch" or not prefilled:
            result["tail_rows"] = "not checked: " + (
                "torch backend" if t.backend == "torch" else "no NaN prefill"
            )
        else:
            written = int((~out[prob.used :].isnan()).any(dim=1).sum())
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
        out = prob.call(torch.bfloat16, t.backend, variant, rhs=other)
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
    groups, rows = 16, 3000
    prob = make_case(op, random_sizes(groups, rows, gen, empty=2), 512, 256, 0, t.device)
    prob.call(torch.bfloat16, t.backend, variant)  # compile and load outside the capture
    torch.cuda.synchronize(t.device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = prob.call(torch.bfloat16, t.backend, variant)
    prob.sizes = random_sizes(groups, rows, gen, empty=3)
    prob.offs.copy_(offsets(prob.sizes, t.device))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize(t.device)
    err, tol = prob.error(out), tolerance(torch.bfloat16, t.backend)
    return {"status": "pass" if err <= tol else "fail", "max_rel_err": err, "tol": tol}


def sass_counts(text: str) -> dict[str, int]:
    """Tensor-core MMA instructions, local-memory loads / stores (spills) in all, and those between the
    first and the last MMA: the MMA issue loop, the part of a warp-specialized kernel whose spills
    slow the main loop (others are in setup or the epilogue, reported but not failed)."""
    lines = text.splitlines()
    mma = [i for i, line in enumerate(lines) if TC_INSTRUCTION.search(line)]
    local = [i for i, line in enumerate(lines) if SPILL_INSTRUCTION.search(line)]
    inside = [i for i in local if mma and mma[0] < i < mma[-1]]
    return {"mma": len(mma), "local": len(local), "local_in_mma_loop": len(inside)}


def cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/cuobjdump")
    return str(default) if default.exists() else None


def sass(t: Target, results: Path, work: Path) -> bool:
    """Each kept cubin's SASS must hold tensor-core MMAs (HGMMA / UTC*MMA) and no local-memory loads or
    stores (spills) in its MMA loop (:func:`sass_counts`); skipped, with the reason, where cuobjdump
    (or its nvdisasm) or the cubins are absent."""
    cubins = sorted((work / "cubins").glob("*.cubin"))
    tool = cuobjdump()
    base = {"stage": "correctness", "op": "sass", "variant": "default"}
    if not cubins or tool is None:
        why = "cuobjdump not found"
        if not cubins:
            why = "the dry run compiles no kernel" if t.dry_run else f"no cubins in {work / 'cubins'} (smoke)"
        append(results, {**base, "case": "sass", "status": "skip", "reason": why})
        return True
    ok = True
    for cubin in cubins:
        rec = {**base, "case": f"sass {cubin.stem}"}
        try:
            done = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            append(results, {**rec, "status": "skip", "reason": f"cuobjdump: {e}"})
            continue
        if done.returncode:  # e.g. nvdisasm missing: the tool failed, not the kernel
            append(results, {**rec, "status": "skip", "reason": f"cuobjdump: {done.stderr.strip()[:300]}"})
            continue
        text = done.stdout
        counts = sass_counts(text)
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
        ok &= passed
    return ok
