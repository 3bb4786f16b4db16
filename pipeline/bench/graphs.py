"""CUDA graphs of the timed steps: on a GPU, the forward and the backward are each captured once and
replayed in the timing windows, as the report's implementations run.

Capture needs steps without host synchronization, which the layers give once their routing is fixed
(the dispatch plan is built in warm-up and reused; group offsets stay on the device). Both graphs share
one memory pool and are captured in execution order, so replaying forward then backward reuses memory
exactly as the eager steps did. If any rank cannot capture, every rank runs eagerly (a collective
decision, so the ranks' collectives stay matched) and the shard records why.

The all-to-alls of dispatch and combine are captured with the steps (NCCL collectives in a graph);
the warm-up's eager collectives have finished on the device before a capture begins, so NCCL's
watchdog thread has no pending work of theirs to query while it runs (the crash class of an event
query during a capture). ``python -m pipeline.bench.loopback`` rehearses this on one GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from pipeline.bench.steps import Steps


def capture(eager: Steps, device: torch.device, warmup: int) -> Steps:
    """Graph-replaying steps on CUDA after ``warmup`` eager iterations on a side stream; the
    ``eager`` steps elsewhere or when capture fails on any rank."""
    forward, backward = eager.forward, eager.backward
    if device.type != "cuda":
        return replace(eager, graphs=False, reason=f"no CUDA graphs on {device.type}")
    reason = None
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            eager.warm_up(max(warmup, 2))
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)  # every eager collective done before the capture
        pool = torch.cuda.graph_pool_handle()
        forward_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(forward_graph, pool=pool):
            captured_out = forward()
        backward_graph = None
        if backward is not None:
            backward_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(backward_graph, pool=pool):
                backward(captured_out)
    except Exception as err:  # noqa: BLE001 - recorded in the shard, then the steps run eagerly
        reason = f"capture failed: {type(err).__name__}: {err}"
    if not _everyone(reason is None, device):
        return replace(eager, graphs=False, reason=reason or "capture failed on another rank")

    def replay_forward() -> Any:
        forward_graph.replay()
        return captured_out

    return Steps(replay_forward, None if backward_graph is None else _replayer(backward_graph), True, None)


def _replayer(graph: torch.cuda.CUDAGraph) -> Callable[[Any], None]:
    """A backward step that replays ``graph`` (its input is the captured forward's output)."""

    def replay(_: Any) -> None:
        graph.replay()

    return replay


def _everyone(ok: bool, device: torch.device) -> bool:
    if not dist.is_initialized():
        return ok
    flag = torch.tensor([int(ok)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())
