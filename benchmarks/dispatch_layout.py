"""What the dispatch layout costs beside the timed forward it stays out of, at ``scale=cpu``.

Each execution's routing is fixed, so its layers build the dispatch layout (validation, count exchange,
sort by expert, per-expert counts, the permutations) once and reuse it: the timed iteration moves rows
and computes. This measures on two real gloo ranks, per execution and layer, the median of building
that layout again against the median of one timed forward of the same layer, interleaved:

    python benchmarks/dispatch_layout.py [EXECUTION_ID ...] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.bench.work import build_work  # noqa: E402
from pipeline.matrix import EXECUTION_BY_ID  # noqa: E402
from pipeline.matrix.scale import shape_for  # noqa: E402
from pipeline.moe.dispatch import DispatchPlan  # noqa: E402
from pipeline.moe.routing import validate_routing  # noqa: E402
from pipeline.tools.ranks import run_ranks  # noqa: E402
from pipeline.tools.synthetic_shards import scale_preset  # noqa: E402

DEFAULT = (
    "inference-ep8-f1536-bf16-mok-native",
    "inference-ep16-f6144-bf16-dist-moe-bf16",
    "training-ep32-f3072-imb2.0-bf16-mok-native",
    "packing-ep32-f3072-profile-a-bf16-dist-moe-bf16",
)


def _measure(rank: int, world: int, execution_id: str, repeats: int) -> tuple[float, float]:
    """(layout ms, forward ms): medians over ``repeats`` interleaved pairs, on layer 0."""
    execution = EXECUTION_BY_ID[execution_id]
    shape = shape_for(execution.workload, scale_preset("cpu", world))
    work = build_work(execution, shape, rank, torch.device("cpu"), 0)
    layer, x, (idx, weight) = work.stack.layers[0], work.xs[0], work.routes[0]
    cfg = layer.cfg
    layouts, forwards = [], []
    with torch.inference_mode():
        layer(x, idx, weight)  # warm: the cached layout, the allocator
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            validate_routing(idx, weight, x.shape[0], cfg.num_experts, cfg.top_k)
            DispatchPlan.build(idx, cfg.num_experts, layer.group)
            layouts.append((time.perf_counter() - start) * 1e3)
            dist.barrier()
            start = time.perf_counter()
            layer(x, idx, weight)
            forwards.append((time.perf_counter() - start) * 1e3)
    return statistics.median(layouts), statistics.median(forwards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("executions", nargs="*", default=list(DEFAULT))
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(f"{'execution':<52} {'layout ms':>10} {'forward ms':>11} {'layout/forward':>15}")
    for execution_id in args.executions:
        ranks = run_ranks(2, _measure, execution_id, args.repeats, timeout=600)
        layout, forward = max(r[0] for r in ranks), max(r[1] for r in ranks)  # the slower rank's
        print(f"{execution_id:<52} {layout:10.3f} {forward:11.3f} {layout / forward:15.1%}")


if __name__ == "__main__":
    main()
