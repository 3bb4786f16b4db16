"""What the correctness gate of an execution costs, in one process on this machine's CPU:

    python jobs/sanity-cost.py [--scale cpu] [--threads 1] [EXECUTION_ID ...]

For each execution (default: one of each kind x variant at EP 32 / F 3072, or the first of its kind),
with the rank's layers built as ``pipeline.bench.execute`` builds them (one rank, ``max_ranks=1``), it
times the gate's first call (which also pays the process's first use of the layer), a second call (the
gate's own cost), and the timed part of the execution (warm-up + windows x iterations, as
``time_windows`` runs them, eagerly); prints one row each and the totals.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.bench import sanity  # noqa: E402
from pipeline.bench.work import build_work  # noqa: E402
from pipeline.matrix import EXECUTIONS, Execution  # noqa: E402
from pipeline.matrix.scale import Scale, scale_from_config, shape_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [
    f"{kind}-{v}"
    for kind in ("inference-ep8-f3072", "training-ep32-f3072", "packing-ep32-f3072-profile-a")
    for v in ("bf16-mok-native", "mxfp8-mok-native", "bf16-dist-moe-bf16", "mxfp8-dist-moe-fp8-dispatch")
]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("executions", nargs="*", default=DEFAULT)
    parser.add_argument("--scale", default="cpu", choices=("ci", "cpu", "full"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one per gloo rank in a sweep)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    by_id = {e.execution_id: e for e in EXECUTIONS}
    unknown = [e for e in args.executions if e not in by_id]
    if unknown:
        print(
            f"sanity-cost: unknown execution id {unknown[0]!r}; see python -m pipeline.list",
            file=sys.stderr,
        )
        return 2
    scale = scale_from_config(yaml.safe_load((ROOT / "conf" / "scale" / f"{args.scale}.yaml").read_text()), 1)
    print(f"{'execution':<52} {'first s':>8} {'gate s':>8} {'timed s':>8} {'gate/timed':>10}")
    rows = [measure(by_id[execution_id], scale) for execution_id in args.executions]
    for execution_id, (first, again, timed) in zip(args.executions, rows, strict=True):
        print(f"{execution_id:<52} {first:8.3f} {again:8.3f} {timed:8.3f} {again / timed:10.1%}")
    first, again, timed = (sum(col) / len(rows) for col in zip(*rows, strict=True))
    print(f"{'mean':<52} {first:8.3f} {again:8.3f} {timed:8.3f} {again / timed:10.1%}")
    return 0


def measure(execution: Execution, scale: Scale) -> tuple[float, float, float]:
    """Seconds of the gate's first call, of a second call, and of the execution's timed iterations."""
    shape = shape_for(execution.workload, scale)
    work = build_work(execution, shape, 0, torch.device("cpu"), 0)
    backward = work.grads is not None
    start = time.perf_counter()
    sanity.gate(work.stack, backward, 0)
    first = time.perf_counter() - start
    start = time.perf_counter()
    sanity.gate(work.stack, backward, 0)
    again = time.perf_counter() - start
    plan = scale.timing
    start = time.perf_counter()
    work.steps().warm_up(plan.warmup + plan.windows * plan.iterations)  # the timed iterations, untimed
    return first, again, time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
