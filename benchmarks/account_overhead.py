"""Benchmark: what profiling costs the iterations it accounts (the phase account's replay,
``pipeline/bench/account.py``), on one rank of this CPU.

For each execution (``scale=cpu`` shapes, one rank, torch reference GEMMs): after warm-up, TRIALS
times alternately ten plain iterations (``perf_counter`` around each) and ten profiled ones
(``account.profiled``: the profiler on, the layer's ranges recorded, each iteration's span from the
profile), so both see the same moments of a shared host; the ratio of the two medians per trial,
then the median ratio over trials. Also the seconds one account takes whole (profiler start and
stop, the replayed iterations, reading the events).

    python benchmarks/account_overhead.py [EXECUTION_ID ...] [--trials 12]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.bench import account  # noqa: E402
from pipeline.bench.work import build_work  # noqa: E402
from pipeline.matrix import EXECUTION_BY_ID  # noqa: E402
from pipeline.matrix.scale import scale_from_config, shape_for  # noqa: E402

DEFAULT = (
    "inference-ep8-f1536-bf16-mok-native",
    "inference-ep16-f3072-mxfp8-dist-moe-fp8-dispatch",
    "training-ep32-f3072-bf16-dist-moe-bf16",
    "training-ep32-f3072-mxfp8-mok-native",
    "packing-ep32-f3072-profile-a-bf16-mok-native",
)
ITERATIONS = 10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("executions", nargs="*", default=list(DEFAULT))
    parser.add_argument("--trials", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as a gloo rank of the sweep
    import yaml

    scale = scale_from_config(
        yaml.safe_load((Path(__file__).parents[1] / "conf/scale/cpu.yaml").read_text()), 1
    )
    device = torch.device("cpu")
    for execution_id in args.executions:
        execution = EXECUTION_BY_ID[execution_id]
        work = build_work(execution, shape_for(execution.workload, scale), 0, device, 0)
        steps = work.steps()
        steps.warm_up(3)
        ratios, plain_ms, profiled_ms, whole_s = [], [], [], []
        for _ in range(args.trials):
            plain = []
            for _ in range(ITERATIONS):
                began = time.perf_counter()
                steps.iteration()
                plain.append((time.perf_counter() - began) * 1e3)
            began = time.perf_counter()
            found, why = account.profiled(steps, steps, device, ITERATIONS)
            whole_s.append(time.perf_counter() - began)
            assert why is None, why
            spans = [it.span / 1e3 for it in found]
            plain_ms.append(statistics.median(plain))
            profiled_ms.append(statistics.median(spans))
            ratios.append(profiled_ms[-1] / plain_ms[-1])
        print(
            f"{execution_id}: plain {statistics.median(plain_ms):.3f} ms, profiled "
            f"{statistics.median(profiled_ms):.3f} ms, profiled / plain {statistics.median(ratios):.3f} "
            f"(trials {min(ratios):.3f}-{max(ratios):.3f}); one account of {ITERATIONS} iterations "
            f"{statistics.median(whole_s):.3f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
