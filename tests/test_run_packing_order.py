"""Packing issues all ten forwards before any backward, and the backwards in reverse layer order."""

import torch

from pipeline.bench.graphs import capture
from pipeline.bench.timing import Clock, time_windows
from pipeline.bench.work import build_work
from pipeline.matrix import VARIANT_BY_NAME, WORKLOAD_BY_NAME, Execution
from pipeline.matrix.scale import Scale, TimingPlan, shape_for

ONE_RANK_CI = Scale("ci", 16, 64, 48, 384, 6, 1, 1, "float32", 0, 1, 1)


def test_packing_iteration_order():
    workload = WORKLOAD_BY_NAME["packing-ep32-f3072-profile-balanced"]
    execution = Execution(workload, VARIANT_BY_NAME["mok-mxfp8"])
    shape = shape_for(execution.workload, ONE_RANK_CI)
    work = build_work(execution, shape, rank=0, device=torch.device("cpu"), seed=0)
    log: list[tuple[str, int]] = []

    def watch(i: int):
        def hook(module, inputs, output):
            log.append(("forward", i))
            output.register_hook(lambda grad: log.append(("backward", i)))

        return hook

    for i, layer in enumerate(work.stack.layers):
        layer.register_forward_hook(watch(i))
    time_windows(work.steps(), Clock(torch.device("cpu")), TimingPlan(warmup=0, windows=1, iterations=1))

    forwards = [("forward", i) for i in range(10)]
    backwards = [("backward", i) for i in reversed(range(10))]
    # the forward and backward windows' iteration, then the combined window's
    assert log == (forwards + backwards) * 2
    # gradients are cleared after every backward, as a fresh training step would start
    assert all(p.grad is None for p in work.stack.parameters())
    log.clear()
    # NVLink sampling repeats the timed steps' whole iterations, in the same order
    capture(work.steps(), torch.device("cpu"), warmup=0).iteration()
    assert log == forwards + backwards


def test_inference_builds_no_autograd_graph():
    execution = Execution(WORKLOAD_BY_NAME["inference-ep8-f1536"], VARIANT_BY_NAME["dist-moe-bf16"])
    work = build_work(execution, shape_for(execution.workload, ONE_RANK_CI), 0, torch.device("cpu"), 0)
    (y,) = work.forward()
    assert work.grads is None and not y.requires_grad
    assert y.shape == (16, 64)
