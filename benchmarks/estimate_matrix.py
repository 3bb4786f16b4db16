"""Wall and CPU time of ``python -m pipeline.estimate`` over the whole matrix (or a selection), per
cluster preset, with the load average around it (docs/performance.md, "The full-scale estimate").

    python benchmarks/estimate_matrix.py [--preset gb300] [--preset h200] [--workers N] [OVERRIDE ...]

Each preset runs as one command of its own (a fresh kept table: ``MOE_BENCH_CACHE`` points at a
temporary folder, so nothing is read from an earlier run; the fake CUDA shim is built there first
and not timed). Prints one line per preset: estimates, wall s, CPU s of the command and its workers,
the load average (1 min) before and after, and the exit status (1: a sync, a misfit or a failure).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", choices=("gb300", "h200"))
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with tempfile.TemporaryDirectory() as cache:
        env["MOE_BENCH_CACHE"] = cache
        prepare = "from pipeline.tools.estimate import fake_cuda; fake_cuda.prepare()"
        subprocess.run([sys.executable, "-c", prepare], env=env, check=True, cwd=REPO)
        for preset in args.preset or ["gb300", "h200"]:
            for old in Path(cache).glob("estimates-*"):
                old.unlink()
            command = [
                sys.executable,
                "-m",
                "pipeline.estimate",
                *args.overrides,
                f"cluster={preset}",
                "--json",
            ]
            if args.workers:
                command += ["--workers", str(args.workers)]
            load, cpu, start = os.getloadavg()[0], _children_cpu(), time.perf_counter()
            done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=False)
            wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
            count = done.stdout.count('"execution_id"')
            print(
                f"{preset}: {count} estimates, wall {wall:.0f} s, CPU {cpu:.0f} s, load {load:.1f} -> "
                f"{os.getloadavg()[0]:.1f}, exit {done.returncode}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
