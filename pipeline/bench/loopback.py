"""One GPU rehearses the exchange of many: a process group of one rank whose layers still call every
collective of dispatch and combine (a loopback, :meth:`pipeline.moe.comm.Group.loopback_of`), so the
count exchange and NCCL's ``all_to_all_single`` with its splits run for real, and the timed steps are
captured in CUDA graphs with those collectives inside, next to the eager barriers and all-reduces of
the project's own capture (:func:`pipeline.bench.graphs.capture`) and windows
(:func:`pipeline.bench.timing.time_windows`: a barrier, then CUDA events). What a cluster's first run
would otherwise meet first: NCCL inside a graph, a watchdog beside a capture, the count exchange's
host synchronization kept out of the graph.

``python -m pipeline.bench.loopback [--device auto|cuda|cpu]`` opens its own group (NCCL for the GPU
this process binds, as an execution binds it; gloo on CPUs, where nothing is captured and the
collectives run eagerly), and for MoK BF16 and Dist-MoE with FP8 on the wire prints one JSON line:
the collectives seen eagerly and inside the captures, whether the steps were captured (and why not),
the median window per phase, the loopback's output against the same layer without collectives, and
a replay against the eager steps (forward output, input and expert-weight gradients). It exits 1 if
a case failed: on CUDA, a capture without its collectives, a replay off the eager steps beyond the
layer's tolerance, or a loopback that computes other values.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from pipeline.bench import graphs, sanity
from pipeline.bench.binding import bind
from pipeline.bench.distributed import resolve_device
from pipeline.bench.steps import Steps
from pipeline.bench.timing import Clock, time_windows
from pipeline.data.codec import JsonRecord
from pipeline.matrix.scale import TimingPlan
from pipeline.moe import ExpertWeights, MoEConfig, build_layer, routing_plan
from pipeline.moe.comm import Group

# (implementation, precision, pipeline): the native BF16 exchange, and MXFP8 payloads on the wire
CASES = (("mok", "bf16", "native"), ("dist-moe", "mxfp8", "fp8-dispatch"))
PLANS = {
    "cuda": TimingPlan(warmup=2, windows=5, iterations=10),
    "cpu": TimingPlan(warmup=1, windows=2, iterations=2),
}
SEED = 0


class Collectives(TorchDispatchMode):
    """Counts the collectives dispatched while it is on, apart those issued inside a CUDA graph's
    capture (recorded into the graph, replayed with it)."""

    def __init__(self) -> None:
        super().__init__()
        self.eager: Counter[str] = Counter()
        self.captured: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d":
            name = str(func.overloadpacket).split(".")[-1]
            capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
            (self.captured if capturing else self.eager)[name] += 1
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class Dims:
    """The rehearsed layer's shape: its tokens and the layer's dimensions and dtype."""

    tokens: int
    d_model: int
    d_ff: int
    num_experts: int
    top_k: int
    dtype: torch.dtype


# GEMM-sized and BF16 on a GPU (the CuTe kernels' alignment), small and float32 on CPUs
DIMS = {
    "cuda": Dims(tokens=512, d_model=1024, d_ff=512, num_experts=16, top_k=4, dtype=torch.bfloat16),
    "cpu": Dims(tokens=64, d_model=128, d_ff=64, num_experts=8, top_k=2, dtype=torch.float32),
}


@dataclass(frozen=True)
class Rehearsal(JsonRecord):
    """One case's rehearsal, one JSON line: the collective and its version (NCCL's; None for gloo), the
    collectives seen eagerly and inside the captures, whether the steps were captured (and why not),
    the median window per phase of ``iterations`` iterations, the replay's errors against the eager
    steps and the loopback's against one rank alone with the layer's tolerance, and what failed."""

    case: str
    collective: str
    version: str | None
    collectives_eager: dict[str, int]
    collectives_captured: dict[str, int]
    graphs: bool
    reason: str | None
    window_ms: dict[str, float]
    iterations: int
    replay_error: dict[str, float]
    loopback_error: float
    tolerance: float
    passed: bool
    problems: tuple[str, ...]


def rehearse(case: tuple[str, str, str], device: torch.device) -> Rehearsal:
    """One case on the loopback of the default (one-rank) group: see the module docstring."""
    implementation, precision, pipeline = case
    dims = DIMS[device.type]
    tokens = dims.tokens
    cfg = MoEConfig(
        d_model=dims.d_model, d_ff=dims.d_ff, num_experts=dims.num_experts, top_k=dims.top_k,
        dtype=dims.dtype, implementation=implementation, precision=precision, pipeline=pipeline,
        budget_tokens=tokens,
    )  # fmt: skip
    weights = ExpertWeights.random(cfg, SEED, device)
    layer = build_layer(cfg, weights, Group.loopback_of())
    alone = build_layer(cfg, weights, Group(None, 1, 0))  # the same layer, no collective
    idx, weight = (t.to(device) for t in routing_plan(tokens, cfg.num_experts, cfg.top_k, 1).for_rank(0))
    gen = torch.Generator(device).manual_seed(SEED)
    x = torch.randn(tokens, cfg.d_model, device=device, generator=gen).to(cfg.dtype).requires_grad_()
    dy = torch.randn(tokens, cfg.d_model, device=device, generator=gen).to(cfg.dtype)
    grads: list[torch.Tensor] = []  # the last backward's (dx, dW1, dW2): static under replay

    def forward() -> torch.Tensor:
        return layer(x, idx, weight)

    def backward(y: torch.Tensor) -> None:
        grads[:] = torch.autograd.grad(y, (x, layer.w1, layer.w2), dy)

    plan = PLANS[device.type]
    seen = Collectives()
    with seen:
        eager_y = forward()
        backward(eager_y)
        eager = [eager_y.detach().clone(), *(g.clone() for g in grads)]
        with torch.no_grad():
            local_y = alone(x, idx, weight)
        steps = graphs.capture(Steps(forward, backward), device, plan.warmup)
        times = time_windows(steps, Clock(device), plan)
        replay_y = steps.forward()
        assert steps.backward is not None
        steps.backward(replay_y)
        replayed = [replay_y.detach().clone(), *(g.clone() for g in grads)]
    tolerance = sanity.tolerance(cfg.dtype, precision, tokens * cfg.top_k * cfg.d_ff)
    replay_error = {
        name: _rel(got, want)
        for name, got, want in zip(("y", "dx", "dw1", "dw2"), replayed, eager, strict=True)
    }
    loopback_error = _rel(eager[0], local_y)
    captured = dict(seen.captured)
    problems = []
    if device.type == "cuda":
        if not steps.graphs:
            problems.append(f"not captured: {steps.reason}")
        elif captured.get("alltoall_base_", 0) < 4:  # dispatch and combine, and their backward
            problems.append(f"the captures hold {captured} collectives, not the exchange's four all-to-alls")
    if max(replay_error.values()) > tolerance:
        problems.append(f"replay off the eager steps: {replay_error} > {tolerance:g}")
    if loopback_error > tolerance:
        problems.append(f"the loopback computes other values than one rank alone: {loopback_error:g}")
    if seen.eager.get("alltoall_base_", 0) < 2:
        problems.append(f"no all-to-all called eagerly: {dict(seen.eager)}")
    return Rehearsal(
        case=f"{implementation} {precision} {pipeline}",
        collective=dist.get_backend(),
        version=".".join(map(str, torch.cuda.nccl.version())) if dist.get_backend() == "nccl" else None,
        collectives_eager=dict(seen.eager),
        collectives_captured=captured,
        graphs=steps.graphs,
        reason=steps.reason,
        window_ms={phase: float(np.median(ms)) for phase, ms in times.items()},
        iterations=plan.iterations,
        replay_error=replay_error,
        loopback_error=loopback_error,
        tolerance=tolerance,
        passed=not problems,
        problems=tuple(problems),
    )


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = float(torch.linalg.vector_norm(want.double()))
    diff = float(torch.linalg.vector_norm(got.double() - want.double()))
    err = diff / scale if scale > 0 else diff
    return float("inf") if err != err else err


@contextmanager
def one_rank(device: torch.device) -> Iterator[torch.device]:
    """A process group of this one process: NCCL for the GPU it binds (``device_id``), else gloo."""
    if device.type == "cuda":
        mine = bind(0, socket.gethostname(), int(os.environ.get("LOCAL_RANK", "0")), True, dict(os.environ))
        device = torch.device(mine.device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend, store=dist.HashStore(), rank=0, world_size=1, device_id=device if backend == "nccl" else None
    )
    try:
        yield device
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.bench.loopback", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", default="auto", help="auto (a GPU when there is one), cuda or cpu")
    args = parser.parse_args(argv)
    try:
        kind = resolve_device(args.device)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(min(4, torch.get_num_threads()))
    failed = 0
    with one_rank(torch.device(kind)) as device:
        for case in CASES:
            record = rehearse(case, device)
            print(json.dumps(record.to_json()), flush=True)
            failed += not record.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
