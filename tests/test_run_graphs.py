"""CUDA graphs of the timed steps: eager on CPUs (with the reason), replays that match eager on GPUs."""

from __future__ import annotations

import pytest
import torch

from pipeline.bench.graphs import capture
from pipeline.bench.steps import Steps
from pipeline.moe import ExpertWeights, MoEConfig, build_layer, routing_plan


def test_cpu_steps_stay_eager_and_say_why() -> None:
    calls: list[str] = []

    def forward() -> str:
        calls.append("forward")
        return "out"

    eager = Steps(forward, lambda out: calls.append(f"backward {out}"))
    steps = capture(eager, torch.device("cpu"), warmup=3)
    assert (steps.graphs, steps.reason) == (False, "no CUDA graphs on cpu")
    steps.backward(steps.forward())
    assert calls == ["forward", "backward out"]  # nothing ran at capture time
    steps.iteration()  # what NVLink sampling repeats: the timed steps, forward then backward
    assert calls == ["forward", "backward out"] * 2
    inference = capture(Steps(forward, None), torch.device("cpu"), warmup=0)
    inference.iteration()
    assert calls[-1] == "forward"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_replay_matches_eager_steps(seed: int) -> None:
    device = torch.device("cuda")
    gen = torch.Generator(device).manual_seed(seed)
    cfg = MoEConfig(d_model=256, d_ff=128, num_experts=8, top_k=2, dtype=torch.bfloat16)
    layer = build_layer(cfg, ExpertWeights.random(cfg, 0, device))
    idx, weight = (t.to(device) for t in routing_plan(64, 8, 2, 1).for_rank(0))
    x = torch.randn(64, 256, device=device, dtype=torch.bfloat16, generator=gen, requires_grad=True)
    grad = torch.randn(64, 256, device=device, dtype=torch.bfloat16, generator=gen)
    grads: list[tuple[torch.Tensor, ...]] = []  # the last backward's (dx, dW1): static under replay
    eager_forwards = [0]

    def forward() -> torch.Tensor:
        eager_forwards[0] += 1
        return layer(x, idx, weight)

    def backward(y: torch.Tensor) -> None:
        grads[:] = [torch.autograd.grad(y, (x, layer.w1), grad)]

    steps = capture(Steps(forward, backward), device, warmup=2)
    assert steps.graphs, steps.reason
    captured = eager_forwards[0]
    steps.iteration()  # NVLink samples these: graph replays, no eager forward
    assert eager_forwards[0] == captured
    with torch.no_grad():
        # new inputs, written in place as a benchmark would
        x.copy_(torch.randn(x.shape, device=device, dtype=x.dtype, generator=gen))
    y = steps.forward().clone()
    steps.backward(y)
    replayed = [g.clone() for g in grads[0]]
    y_eager = forward()
    backward(y_eager)
    torch.testing.assert_close(y, y_eager)
    for got, want in zip(replayed, grads[0], strict=True):
        torch.testing.assert_close(got, want)
