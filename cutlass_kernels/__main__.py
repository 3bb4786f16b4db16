"""``python -m cutlass_kernels compile --arch sm_90a|sm_100a --out DIR`` compiles every CuTe kernel of an
arch without a GPU and writes its PTX and cubin. The other commands are the children that
``jobs/gpu-run.sh`` runs, each isolated under its own time limit, appending its records to
``--results FILE``: ``env`` (versions, and the plan: which kernels and op x variants to check),
``plan`` (the plan alone), ``smoke-one`` (one kernel), ``correctness-op`` and ``timing-op`` (one op
x variant) and ``sass``; ``--dry-run`` runs them on the CPU through the torch backend."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cutlass_kernels.vocabulary import ARCHES, OPS, OUT_DTYPES


def _compile(arch: str, out: Path) -> int:
    current = os.environ.get("CUTE_DSL_ARCH")
    if "cutlass" in sys.modules and current != arch:
        raise ValueError(
            f"the CUTLASS DSL was already imported for arch {current!r}; cannot compile {arch!r}"
        )
    os.environ["CUTE_DSL_ARCH"] = arch  # read by the DSL when it is first imported, just below
    from cutlass_kernels.registry import compile_all

    for path in compile_all(arch, out):
        print(path)
    return 0


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
    return 0 if check.sass(t, args.results, args.work) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cutlass_kernels", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="compile every kernel of an arch with fake tensors (no GPU needed)")
    comp.add_argument("--arch", required=True, choices=ARCHES)
    comp.add_argument("--out", required=True, type=Path, help="directory for <kernel>.ptx / <kernel>.cubin")
    helps = {
        "env": "device, driver, clocks, versions, and the plan",
        "plan": "the kernels and op x variants the device run checks",
        "smoke-one": "one kernel once on the smoke problem (two persistent walkers)",
        "correctness-op": "one op x variant, each output dtype, against an FP32 reference",
        "timing-op": "graph-replay and dispatch timings of one op x variant on every shape",
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
    args = parser.parse_args(argv)
    if args.command == "compile":
        if args.out.exists() and not args.out.is_dir():
            print(
                f"python -m cutlass_kernels compile: --out {args.out} is a file, not a directory",
                file=sys.stderr,
            )
            return 2
        return _compile(args.arch, args.out)
    return _child(args)


if __name__ == "__main__":
    sys.exit(main())
