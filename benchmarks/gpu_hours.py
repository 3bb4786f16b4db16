"""Model: the GPU-hours one dataset of the whole matrix costs at the report's EP sizes, each execution in
a job of its own and grouped (``hydra.launcher.group=shape``), from per-execution costs of which each
is marked measured (on one H200, docs/gpu-runs/2026-12-04-h200.md) or assumed.

A job holds its GPUs from its start to its end: process start and imports, the device and the process
group, the first collective (NCCL's communicator), each kernel's compile, then per execution its build,
gate, capture, calibration, windows and records. Queue waits hold no GPU; they add to the wall time
only. Grouped, a job pays the first part once per group, and each distinct kernel's compile once.

    python benchmarks/gpu_hours.py [--queue-s 120] [--group-minutes 30]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.matrix import EXECUTIONS  # noqa: E402

# (value in seconds, measured or assumed, where from)
START = (3.0, "measured", "process start to the execution's body, 1 GPU")
INIT = (0.14, "measured", "CUDA device and process group, 1 rank")
CONNECT_1 = (0.25, "measured", "the first NCCL collective, 1 rank")
CONNECT_PER_NODE = (1.0, "assumed", "NCCL's communicator across nodes, per node")
COMPILE = (1.2, "measured", "one CuTe kernel's cute.compile")
KERNELS = {"inference": 1, "training": 3, "packing": 3}  # measured: compiles per execution of each kind
BODY = {  # build + gate (less its compiles) + capture + calibrate + record, measured, 1 GPU
    "inference": (3.6, "measured"),
    "training": (5.5, "measured"),
    "packing": (11.0, "measured"),
}
WINDOWS = {  # the timed windows at 1 GPU; at EP ranks assumed equal (all-to-all across nodes not measured)
    "inference": (2.3, "measured"),
    "training": (6.2, "measured"),
    "packing": (132.0, "measured"),
}
GPUS_PER_NODE = 8


@dataclass
class Cost:
    gpu_hours: float
    wall_s: float
    jobs: int


def job_fixed_s(ranks: int) -> float:
    nodes = math.ceil(ranks / GPUS_PER_NODE)
    return START[0] + INIT[0] + CONNECT_1[0] + CONNECT_PER_NODE[0] * (nodes - 1)


def execution_s(kind: str) -> float:
    return BODY[kind][0] + WINDOWS[kind][0]


def ungrouped(queue_s: float) -> Cost:
    gpu_s, wall = 0.0, 0.0
    for e in EXECUTIONS:
        held = (
            job_fixed_s(e.workload.ep) + KERNELS[e.workload.kind] * COMPILE[0] + execution_s(e.workload.kind)
        )
        gpu_s += e.workload.ep * held
        wall += queue_s + held
    return Cost(gpu_s / 3600, wall, len(EXECUTIONS))


def grouped(queue_s: float, group_minutes: float) -> Cost:
    by_ep: dict[int, list[str]] = {}
    for e in EXECUTIONS:
        by_ep.setdefault(e.workload.ep, []).append(e.workload.kind)
    gpu_s, wall, jobs = 0.0, 0.0, 0
    for ep, kinds in by_ep.items():
        groups: list[list[str]] = [[]]
        for kind in kinds:
            if groups[-1] and sum(map(execution_s, groups[-1])) + execution_s(kind) > group_minutes * 60:
                groups.append([])
            groups[-1].append(kind)
        for members in groups:
            compiles = max(KERNELS[k] for k in members) + (1 if len(set(members)) > 1 else 0)
            held = job_fixed_s(ep) + compiles * COMPILE[0] + sum(map(execution_s, members))
            gpu_s += ep * held
            wall += queue_s + held
            jobs += 1
    return Cost(gpu_s / 3600, wall, jobs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue-s", type=float, default=120.0, help="assumed queue wait per job (s)")
    parser.add_argument("--group-minutes", type=float, default=30.0, help="a group's time (min)")
    args = parser.parse_args()
    timed = sum(e.workload.ep * WINDOWS[e.workload.kind][0] for e in EXECUTIONS) / 3600
    print(f"timed windows alone: {timed:.2f} GPU-hours")
    for name, cost in (
        ("one job each", ungrouped(args.queue_s)),
        ("grouped", grouped(args.queue_s, args.group_minutes)),
    ):
        share = cost.gpu_hours / timed
        print(
            f"{name}: {cost.jobs} jobs, {cost.gpu_hours:.2f} GPU-hours ({share:.2f}x the windows), "
            f"{cost.wall_s / 3600:.2f} h of job time one after another with {args.queue_s:g} s queue each"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
