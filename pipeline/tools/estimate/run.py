"""One execution's GPU path at full scale on fake tensors: the hot (tracked, rank 0) rank of a fake
process group of the nominal EP size, through the code an execution runs.

In order, as :mod:`pipeline.bench.execute` runs them: ``build`` (``build_work``: this rank's weights,
the prepared quantized weights, the policy's buffers, inputs and routing), ``gate`` (the correctness
gate's slice, :func:`pipeline.bench.sanity.check_layer`, and where its suite checks the case, the
timed input against the naive formulation, :func:`pipeline.bench.naive.case_error`), ``warm-up`` (one
iteration) and ``iteration``, the timed one (``Work.steps().iteration``: one forward; forward +
backward; ten forwards, then the backwards in reverse order). Routing is host-side planning: the
plans and rank 0's dispatch plan (what every source sends it, which a fake process group cannot
exchange) are computed on the host before the warm-up, as a real execution's warm-up builds them
before timing.

Needs fake CUDA (:mod:`pipeline.tools.estimate.fake_cuda`): run it in a worker
(:mod:`pipeline.tools.estimate.worker`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict
from functools import lru_cache
from typing import Any

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from pipeline.base.vocabulary import has_backward
from pipeline.bench import sanity
from pipeline.bench.naive import case_error
from pipeline.bench.work import Work, build_work, routing_plans
from pipeline.matrix import Execution, Variant, Workload
from pipeline.matrix.scale import Shape, scale_from_config, shape_for
from pipeline.moe import MoELayer, RoutingPlan
from pipeline.moe.dispatch import DispatchPlan
from pipeline.moe.swiglu import forced_form
from pipeline.tools.estimate.device import FakeDevice
from pipeline.tools.estimate.jobs import Job
from pipeline.tools.estimate.memory import CATEGORIES, Tracker

GIB = 2**30
DEVICE = torch.device("cuda", 0)
PHASES = ("build", "gate", "warm-up", "iteration")
# What a shard's peak allocated covers: the gate resets the peak statistics before the steps run.
TIMED = ("warm-up", "iteration")
TORCH_KERNELS = "torch reference (CuTe planning unavailable)"


def planned_launches() -> Callable[[str], Any] | None:
    """``cutlass_kernels.planning.planned_launches`` (the CuTe wrappers of an arch on fake tensors:
    their allocations run, each launch is recorded instead), or None until it exists."""
    try:
        return importlib.import_module("cutlass_kernels.planning").planned_launches
    except ImportError:
        return None


@contextlib.contextmanager
def kernels(arch: str | None) -> Iterator[tuple[str, list]]:
    """(what runs the GEMMs, the launch records) for the preset's ``arch`` (None: no planning)."""
    plan = planned_launches()
    if plan is None or arch is None:
        yield TORCH_KERNELS, []
        return
    with plan(arch) as launches:
        yield f"CuTe DSL {arch}", launches


def estimate(job: Job) -> dict[str, Any]:
    """The estimate of one job, as a JSON-ready dict (see ``docs/ARCHITECTURE.md``, pipeline/estimate).
    The torch reference runs the same on every arch, so presets then share one run."""
    start = time.perf_counter()
    preset = job.preset
    arch = preset.arch if planned_launches() is not None else None
    cell = json.dumps(asdict(job.resolved()), sort_keys=True)
    scale = json.dumps(job.scale, sort_keys=True)
    result = dict(_measured(cell, scale, job.seed, job.swiglu, arch, job.check))
    peak = result.pop("peak_bytes")
    timed = result.pop("timed_peak_bytes")
    return {
        "execution_id": job.execution,
        "cluster": preset.name,
        "arch": preset.arch,
        "kernels": result.pop("kernels"),
        "timed_peak_gib": timed / GIB,
        "peak_gib": peak / GIB,
        **result,
        "gpu_memory_gb": preset.gpu_memory_gb,
        "fits": peak <= preset.gpu_memory_bytes,
        "seconds": time.perf_counter() - start,
    }


@lru_cache(maxsize=16)
def _measured(
    cell: str, scale: str, seed: int, swiglu: str | None, arch: str | None, check: str
) -> dict[str, Any]:
    fields = json.loads(cell)
    execution = Execution(Workload(**fields["workload"]), Variant(**fields["variant"]))
    shape = shape_for(execution.workload, scale_from_config(json.loads(scale), None))
    dispatch_plans = [rank0_plan(p) for p in routing_plans(shape, seed)]
    forced = forced_form(swiglu) if swiglu else contextlib.nullcontext()
    with _world(shape.ranks), forced, kernels(arch) as (which, launches):
        return {
            "kernels": which,
            "ep": shape.ep,
            **_run(execution, shape, seed, dispatch_plans, launches, check),
        }


@lru_cache(maxsize=64)
def rank0_plan(plan: RoutingPlan) -> DispatchPlan:
    """Rank 0's dispatch plan (on the host): its own routing and what every source sends it."""
    idx, _ = plan.for_rank(0)
    sent = torch.bincount(idx.reshape(-1), minlength=plan.num_experts).view(plan.world_size, -1)
    received = torch.stack([plan.sent_to(source, 0) for source in range(plan.world_size)])
    return DispatchPlan.from_counts(idx, sent, received)


@contextlib.contextmanager
def _world(ranks: int) -> Iterator[None]:
    """torch.distributed's fake process group of ``ranks`` ranks, as rank 0."""
    dist.init_process_group("fake", rank=0, world_size=ranks, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def _run(
    execution: Execution, shape: Shape, seed: int, plans: list[DispatchPlan], launches: list, check: str
) -> dict[str, Any]:
    tracker = Tracker()
    training = has_backward(execution.workload.kind)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def enter(phase: str) -> None:
        nonlocal clock
        seconds[device.phase], clock = time.perf_counter() - clock, time.perf_counter()
        device.phase = phase

    with FakeDevice(tracker, shape.ranks) as device:
        work = build_work(execution, shape, 0, DEVICE, seed)
        _name_build(tracker, work, execution.variant.precision)
        _watch(tracker, work)
        enter("gate")
        sanity.check_layer(work.stack.layers[0], training, seed)
        if check == "case":  # the timed input against the naive formulation (pipeline.bench.naive)
            layer = work.stack.layers[0]
            layer.use_plan(work.routes[0][0], plans[0].to(DEVICE))
            case_error(layer, work.xs[0], *work.routes[0], seed)
        for layer, (idx, _), plan in zip(work.stack.layers, work.routes, plans, strict=True):
            moved = plan.to(DEVICE)
            tracker.name(_plan_tensors(moved), "inputs")
            layer.use_plan(idx, moved)
        steps = work.steps()
        enter("warm-up")
        steps.iteration()
        enter("iteration")
        before = len(launches)
        steps.iteration()
        launched = len(launches) - before
        enter("done")
    layer0 = work.stack.layers[0]
    timed, held = tracker.held(TIMED)
    syncs = device.host_syncs("iteration")
    return {
        "peak_bytes": tracker.held()[0],
        "timed_peak_bytes": timed,
        "peak_phase": tracker.peak_phase(),
        "held_bytes": {c: held[c] for c in CATEGORIES},
        "largest_at_timed_peak": tracker.largest(TIMED),
        "phase_peak_gib": {p: tracker.held((p,))[0] / GIB for p in PHASES},
        "device_ops": device.device_ops("iteration") + launched,
        "aten_ops": device.device_ops("iteration"),
        "kernel_launches": launched,
        "ops_by_name": dict(device.ops.get("iteration", Counter()).most_common()),
        "host_syncs": len(syncs),
        "host_sync_sites": sorted({f"{s.op} at {s.where}" for s in syncs}),
        "host_syncs_before_timing": {p: len(device.host_syncs(p)) for p in PHASES[:-1]},
        "swiglu_backward": layer0.swiglu_backward_form if training else None,
        "weights_bytes": sum(p.numel() * p.element_size() for p in work.stack.parameters()),
        "routed_rows": [state.routed_rows for state in work.stack.saved_state],
        "phase_seconds": seconds,
    }


def _plan_tensors(plan: DispatchPlan) -> list[torch.Tensor | None]:
    return [plan.order, plan.token_of_row, plan.perm, plan.perm_inverse, plan.offs]


def _name_build(tracker: Tracker, work: Work, precision: str) -> None:
    """Name what the build left alive: weights, policy buffers, scratch, inputs; what else lives is
    the prepared quantized weights (MXFP8) or would be a leftover (a temporary)."""
    tracker.name(work.stack.parameters(), "weights")
    policy = work.stack.policy
    tracker.name([policy.receive_scratch], "scratch")
    tracker.name(
        [b for b in (getattr(policy, "slot", None), *getattr(policy, "saved", ())) if b is not None],
        "policy buffers",
    )
    routes = [t for route in work.routes for t in route]
    tracker.name([*work.xs, *(work.grads or []), *routes], "inputs")
    if precision == "mxfp8":
        for record in tracker.since(0):
            if record.identity is None:
                record.identity = "quantized weights"


def _watch(tracker: Tracker, work: Work) -> None:
    """Hooks that move storages into their roles: what a layer's forward leaves alive is saved
    activations (its output: layer outputs), what autograd accumulates into ``.grad``, gradients."""
    for layer in work.stack.layers:
        assert isinstance(layer, MoELayer)
        start: list[int] = []
        layer.register_forward_pre_hook(lambda _m, _a, start=start: start.append(len(tracker.records)))
        layer.register_forward_hook(lambda _m, _a, out, start=start: _kept(tracker, start.pop(), out))
    leaves = [*work.stack.parameters(), *(x for x in work.xs if x.requires_grad)]
    for leaf in leaves:
        leaf.register_post_accumulate_grad_hook(lambda t: tracker.become(t.grad, "gradients"))


def _kept(tracker: Tracker, start: int, out: torch.Tensor) -> None:
    output = tracker.record_of(out)
    for record in tracker.since(start):
        if record is not output:
            tracker.event += 1
            record.roles.append((tracker.event, "saved activations"))
    tracker.become(out, "layer outputs")
