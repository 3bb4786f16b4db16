"""``python -m cutlass_kernels compile --arch sm_90a|sm_100a --out DIR`` compiles every CuTe kernel of an
arch without a GPU and writes its PTX and cubin. The other commands are the kernel stages of
``jobs/gpu-run.sh`` (``env``, ``smoke``, ``correctness``, ``timing``), each appending its records to
``--results FILE``; ``--dry-run`` runs them on the CPU through the torch backend."""

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


def _stage(args: argparse.Namespace) -> int:
    import torch

    from cutlass_kernels import bench, check

    try:
        t = check.target(args.dry_run)
    except check.NoTarget as e:
        print(f"python -m cutlass_kernels {args.command}: {e}", file=sys.stderr)
        return 2
    if args.command == "env":
        check.append(args.results, check.env_record(t))
        return 0
    if args.command == "smoke":
        return check.smoke(t, args.results, args.work)
    if args.command == "smoke-one":
        out_dtype = getattr(torch, args.out_dtype)
        return check.smoke_one(t, args.index, args.op, out_dtype, args.variant, args.work)
    if args.command == "correctness":
        return check.correctness(t, args.results, args.work)
    if args.command == "correctness-op":
        return check.correctness_op(t, args.op, args.variant, args.results)
    return bench.timing(t, args.results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cutlass_kernels", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="compile every kernel of an arch with fake tensors (no GPU needed)")
    comp.add_argument("--arch", required=True, choices=ARCHES)
    comp.add_argument("--out", required=True, type=Path, help="directory for <kernel>.ptx / <kernel>.cubin")
    helps = {
        "env": "device, driver, clocks and versions",
        "smoke": "each kernel once on a tiny problem, each in its own process",
        "correctness": "every op x output dtype against an FP32 reference, graph replay, SASS",
        "timing": "graph-replay and dispatch timings of the kernels that passed",
        "smoke-one": "(internal) one kernel of the smoke stage",
        "correctness-op": "(internal) one op x variant of the correctness stage",
    }
    for name, text in helps.items():
        stage = sub.add_parser(name, help=text)
        stage.add_argument("--results", type=Path, default=Path(os.devnull), help="append JSON lines here")
        stage.add_argument("--work", type=Path, default=Path("outputs/gpu-run-work"), help="scratch folder")
        stage.add_argument("--dry-run", action="store_true", help="on the CPU, through the torch backend")
        if name == "smoke-one":
            stage.add_argument("--index", type=int, required=True, help="the kernel's place in all_specs")
            stage.add_argument("--out-dtype", required=True, choices=OUT_DTYPES)
        if name in ("smoke-one", "correctness-op"):
            stage.add_argument("--variant", default="default")
            stage.add_argument("--op", required=True, choices=OPS)
    args = parser.parse_args(argv)
    if args.command == "compile":
        if args.out.exists() and not args.out.is_dir():
            print(
                f"python -m cutlass_kernels compile: --out {args.out} is a file, not a directory",
                file=sys.stderr,
            )
            return 2
        return _compile(args.arch, args.out)
    return _stage(args)


if __name__ == "__main__":
    sys.exit(main())
