"""``python -m cutlass_kernels compile --arch sm_90a|sm_100a --out DIR`` compiles every CuTe kernel of an
arch without a GPU and writes its PTX and cubin; ``python -m cutlass_kernels check [--out FILE.json]``
checks and times the kernels on the local GPU."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ARCHES = ("sm_90a", "sm_100a")


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


def _check(out: Path | None, quick: bool) -> int:
    from cutlass_kernels.check import run_check

    return run_check(out, quick)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cutlass_kernels", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="compile every kernel of an arch with fake tensors (no GPU needed)")
    comp.add_argument("--arch", required=True, choices=ARCHES)
    comp.add_argument("--out", required=True, type=Path, help="directory for <kernel>.ptx / <kernel>.cubin")
    chk = sub.add_parser("check", help="correctness vs an FP32 reference, then timings, on the local GPU")
    chk.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    chk.add_argument("--quick", action="store_true", help="correctness only, on small shapes")
    args = parser.parse_args(argv)
    if args.command == "compile":
        if args.out.exists() and not args.out.is_dir():
            print(
                f"python -m cutlass_kernels compile: --out {args.out} is a file, not a directory",
                file=sys.stderr,
            )
            return 2
        return _compile(args.arch, args.out)
    return _check(args.out, args.quick)


if __name__ == "__main__":
    sys.exit(main())
