"""``python -m cutlass_kernels compile --arch sm_90a|sm_100a --out DIR`` compiles every CuTe kernel of an
arch without a GPU (the grouped GEMMs, the fused SwiGLU backward and the MX quantization kernels) and
writes its PTX and cubin. ``cache build --arch ARCH --out DIR`` exports every kernel of an arch ahead
of time into a kernel cache (:mod:`cutlass_kernels.kernel_cache`; no GPU needed), ``cache verify DIR``
checks one (its files, keys and loads).
The other commands are the children that ``jobs/gpu-run.sh`` runs, each isolated under its own time
limit, appending its records to ``--results FILE``: ``env`` (versions, and the plan: which kernels
and op x variants to check), ``plan`` (the plan alone), ``smoke-one`` (one kernel),
``correctness-op`` and ``timing-op`` (one op x variant), ``swiglu-correctness`` and
``swiglu-timing`` (the SwiGLU backward kernel against the layers' unfused form),
``mxquant-correctness`` and ``mxquant-timing`` (the MX quantization kernel against the torch form),
``swiglufwd-correctness`` and ``swiglufwd-timing`` (the fused SwiGLU forward kernel, A and its MX
forms, against a float64 reference, the torch form's quantization and the torch forms' times) and
``sass``; ``choices RESULTS`` prints the per-shape variant table a run's timings support;
``--dry-run`` runs them on the CPU through the torch backend (the SwiGLU checks on the layers' fused
CPU form, the MX quantization and SwiGLU forward checks on the torch mirror of their arithmetic,
small shapes).
As an entry point this module may import the layers (the SwiGLU checks' torch form)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cutlass_kernels.vocabulary import ARCHES, OPS, OUT_DTYPES

T = TypeVar("T")


def _compile(arch: str, out: Path, cache: Path | None) -> int:
    """Every kernel of ``arch``, its PTX and cubin into ``out``; with ``cache``, also exported there
    from the same compiles (:func:`cutlass_kernels.kernel_cache.build`)."""
    _target_arch(arch)
    from cutlass_kernels import kernel_cache, registry

    if cache is not None:
        entries = kernel_cache.build(arch, cache, registry.compile_arch(arch, out, kernel_cache.HOST_TARGET))
        print(f"{len(entries)} kernels exported into {cache}: {sum(e['bytes'] for e in entries)} bytes")
    else:
        registry.compile_arch(arch, out)
    for path in sorted(out.iterdir()):
        print(path)
    return 0


def _target_arch(arch: str) -> None:
    """Make the DSL target ``arch`` (it reads ``CUTE_DSL_ARCH`` when first imported)."""
    current = os.environ.get("CUTE_DSL_ARCH")
    if "cutlass" in sys.modules and current != arch:
        raise ValueError(
            f"the CUTLASS DSL was already imported for arch {current!r}; cannot compile {arch!r}"
        )
    os.environ["CUTE_DSL_ARCH"] = arch


def _not_a_folder(command: str, path: Path, option: str = "--out") -> bool:
    """Whether ``path`` is a file where a folder is wanted (said on stderr)."""
    if path.exists() and not path.is_dir():
        print(
            f"python -m cutlass_kernels {command}: {option} {path} is a file, not a directory",
            file=sys.stderr,
        )
        return True
    return False


def _cache(args: argparse.Namespace) -> int:
    """``cache build``: export every kernel of an arch, then list them with their size; ``cache
    verify``: every problem of a cache folder, one a line (exit 1 if any)."""
    from cutlass_kernels import kernel_cache

    if args.action == "build":
        if _not_a_folder("cache build", args.out):
            return 2
        _target_arch(args.arch)
        from cutlass_kernels import registry  # the DSL, imported for the arch just set

        with tempfile.TemporaryDirectory() as scratch:  # the compiles' PTX and cubins, not kept
            compiled = registry.compile_arch(args.arch, Path(scratch), kernel_cache.HOST_TARGET)
            entries = kernel_cache.build(args.arch, args.out, compiled)
        for e in entries:
            print(f"{e['bytes']:>8} {e['stem']}.o")
        total = sum(e["bytes"] for e in entries)
        key = f"DSL {entries[0]['dsl']}, {args.arch}, sources {entries[0]['sources'][:12]}"
        print(f"{len(entries)} kernels, {total} bytes; key: {key}")
        return 0
    if not args.folder.is_dir():
        print(f"python -m cutlass_kernels cache verify: {args.folder} is not a directory", file=sys.stderr)
        return 2
    problems = kernel_cache.verify(args.folder)
    for line in problems:
        print(line)
    if not problems:
        print(f"{args.folder}: {len(kernel_cache.read_manifest(args.folder))} kernels, every one loads")
    return 1 if problems else 0


def _child(args: argparse.Namespace) -> int:
    import torch

    from cutlass_kernels import bench, check
    from cutlass_kernels.results import append

    try:
        t = check.target(args.dry_run)
    except (check.NoTarget, ValueError) as e:
        print(f"python -m cutlass_kernels {args.command}: {e}", file=sys.stderr)
        return 2
    if args.command in ("env", "plan"):
        records = check.plan_records(t)
        if args.command == "env":
            records.insert(0, check.env_record(t))
        for record in records:
            append(args.results, record)
        return 0
    if args.command == "smoke-one":
        return check.smoke_one(
            t, args.index, args.op, getattr(torch, args.out_dtype), args.variant, args.work
        )
    if args.command == "correctness-op":
        return check.correctness_op(t, args.op, args.variant, args.results)
    if args.command == "timing-op":
        return bench.timing_op(t, args.op, args.variant, args.results, args.budget)
    if args.command.startswith("swiglu-"):
        return _swiglu(t, args.command.removeprefix("swiglu-"), args.results)
    if args.command.startswith("mxquant-"):
        return _mx_quant(t, args.command.removeprefix("mxquant-"), args.results)
    if args.command.startswith("swiglufwd-"):
        return _swiglu_forward(t, args.command.removeprefix("swiglufwd-"), args.results)
    return 0 if check.sass(t, args.results, args.work) else 1


def _planted(t: Any, stage: str, key: str, impl: T, doubled: Callable[[T], T]) -> T:
    """``impl`` as the faults planted for ``key`` in ``stage`` leave it (the dry run's): ``hang``
    sleeps until the runner kills the child at its limit, ``wrong`` doubles its output."""
    planted = t.planted(stage, key)
    if planted == "hang":
        time.sleep(3600)
    return doubled(impl) if planted == "wrong" else impl


def _swiglu(t: Any, stage: str, results: Path) -> int:
    """The SwiGLU backward kernel's ``correctness`` or ``timing`` against the layers' unfused form; in
    the dry run, the fused CPU form (blocked) in its place on small shapes, with no bandwidth goal (a
    CPU form has none), and the planted faults of key ``swiglu/bfloat16/default``."""
    from cutlass_kernels import gating, swiglu_check, swiglu_kernel
    from cutlass_kernels.swiglu_torch import swiglu_backward, swiglu_backward_blocked

    impl = swiglu_check.writer(swiglu_backward_blocked) if t.dry_run else swiglu_kernel.launch
    impl = _planted(t, stage, gating.SWIGLU_KEY, impl, swiglu_check.doubled)
    subject = swiglu_check.Subject(swiglu_backward, t.device, impl)
    if stage == "correctness":
        cases = swiglu_check.DRY_CASES if t.dry_run else swiglu_check.CASES
        return swiglu_check.correctness(results, subject, cases)
    if t.dry_run:
        shapes, iters, goal = swiglu_check.DRY_TIMING_SHAPES, 2, 0.0
    else:
        shapes, iters, goal = swiglu_check.TIMING_SHAPES, swiglu_check.ITERS, swiglu_check.BANDWIDTH_GOAL
    return swiglu_check.timing(results, subject, shapes, iters, goal)


def _mx_quant(t: Any, stage: str, results: Path) -> int:
    """The MX quantization kernel's ``correctness`` or ``timing`` against the torch form; in the dry
    run, the torch mirror of its arithmetic in its place on small shapes, with no bandwidth goal, and
    the planted faults of key ``mxquant/bfloat16/default``."""
    from cutlass_kernels import gating, mx_quant_check

    q = mx_quant_check.mirror() if t.dry_run else mx_quant_check.kernel()
    q = _planted(t, stage, gating.MX_QUANT_KEY, q, mx_quant_check.doubled)
    if stage == "correctness":
        cases = mx_quant_check.DRY_CASES if t.dry_run else mx_quant_check.CASES
        return mx_quant_check.correctness(results, q, t.device, cases)
    if t.dry_run:
        return mx_quant_check.timing(results, q, t.device, mx_quant_check.DRY_TIMING_SHAPES, 2, 0.0)
    return mx_quant_check.timing(results, q, t.device)


def _swiglu_forward(t: Any, stage: str, results: Path) -> int:
    """The fused SwiGLU forward kernel's ``correctness`` or ``timing``; in the dry run, the torch
    mirror of its arithmetic in its place on small shapes, with no bandwidth goal, and the planted
    faults of key ``swiglufwd/bfloat16/default``."""
    from cutlass_kernels import gating, swiglu_forward_check

    impl = swiglu_forward_check.steps() if t.dry_run else swiglu_forward_check.kernel()
    impl = _planted(t, stage, gating.SWIGLU_FWD_KEY, impl, swiglu_forward_check.doubled)
    if stage == "correctness":
        cases = swiglu_forward_check.DRY_CASES if t.dry_run else swiglu_forward_check.CASES
        return swiglu_forward_check.correctness(results, impl, t.device, cases)
    if t.dry_run:
        shapes = swiglu_forward_check.DRY_TIMING_SHAPES
        return swiglu_forward_check.timing(results, impl, t.device, shapes, 2, 0.0)
    return swiglu_forward_check.timing(results, impl, t.device)


def _choices(results: Path, date: str) -> int:
    """Print the Python of :data:`cutlass_kernels.choices.CHOICES` from a device run's timings."""
    from cutlass_kernels.choices import measured, source
    from cutlass_kernels.results import read

    if not results.is_file():
        print(f"python -m cutlass_kernels choices: {results} is not a file", file=sys.stderr)
        return 2
    records = read(results)
    env = next((r for r in reversed(records) if r.get("name") == "versions"), None)
    if env is None or not env.get("arch"):
        print(
            f"python -m cutlass_kernels choices: {results} has no env record (device, arch)", file=sys.stderr
        )
        return 2
    print(source(measured(records, env["arch"], date, env["device"])), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cutlass_kernels", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="compile every kernel of an arch with fake tensors (no GPU needed)")
    comp.add_argument("--arch", required=True, choices=ARCHES)
    comp.add_argument("--out", required=True, type=Path, help="directory for <kernel>.ptx / <kernel>.cubin")
    comp.add_argument("--cache", type=Path, help="also export every kernel into this kernel cache folder")
    helps = {
        "env": "device, driver, clocks, versions, and the plan",
        "plan": "the kernels and op x variants the device run checks",
        "smoke-one": "one kernel once on the smoke problem (two persistent walkers)",
        "correctness-op": "one op x variant, each output dtype, against an FP32 reference",
        "timing-op": "graph-replay and dispatch timings of one op x variant on every shape",
        "swiglu-correctness": "the fused SwiGLU backward kernel against a float64 reference",
        "swiglu-timing": "the fused SwiGLU backward kernel against the unfused form and the HBM bandwidth",
        "mxquant-correctness": "the MX quantization kernel against the torch form, bit for bit",
        "mxquant-timing": "the MX quantization kernel against the torch form and a device copy",
        "swiglufwd-correctness": "the fused SwiGLU forward kernel: A against float64, MX forms bit for bit",
        "swiglufwd-timing": "the fused SwiGLU forward kernel against the torch forms and the HBM bandwidth",
        "sass": "tensor-core MMAs and no spills in the MMA loop of each compiled cubin",
    }
    for name, text in helps.items():
        child = sub.add_parser(name, help=text)
        child.add_argument("--results", type=Path, default=Path(os.devnull), help="append JSON lines here")
        child.add_argument("--work", type=Path, default=Path("outputs/gpu-run-work"), help="scratch folder")
        child.add_argument("--dry-run", action="store_true", help="on the CPU, through the torch backend")
        if name == "smoke-one":
            child.add_argument("--index", type=int, required=True, help="the kernel's place in all_specs")
            child.add_argument("--out-dtype", required=True, choices=OUT_DTYPES)
        if name in ("smoke-one", "correctness-op", "timing-op"):
            child.add_argument("--variant", default="default")
            child.add_argument("--op", required=True, choices=OPS)
        if name == "timing-op":
            child.add_argument("--budget", type=float, default=30.0, help="start no shape after this (s)")
    cache = sub.add_parser(
        "cache", help="the kernel cache: kernels exported ahead of time, loaded not compiled"
    )
    actions = cache.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="export every kernel of an arch into a cache folder (no GPU)")
    build.add_argument("--arch", required=True, choices=ARCHES)
    build.add_argument("--out", required=True, type=Path, help="the cache folder (its old kernels removed)")
    verify = actions.add_parser("verify", help="check a cache folder's files, keys and loads")
    verify.add_argument("folder", type=Path)
    table = sub.add_parser("choices", help="the per-shape variant table a device run's timings support")
    table.add_argument("results", type=Path, help="the run's results.jsonl")
    table.add_argument("--date", required=True, help="the run's date (ISO), kept in each entry")
    args = parser.parse_args(argv)
    if args.command == "choices":
        return _choices(args.results, args.date)
    if args.command == "cache":
        return _cache(args)
    if args.command == "compile":
        if _not_a_folder("compile", args.out) or (
            args.cache and _not_a_folder("compile", args.cache, "--cache")
        ):
            return 2
        return _compile(args.arch, args.out, args.cache)
    return _child(args)


if __name__ == "__main__":
    sys.exit(main())
