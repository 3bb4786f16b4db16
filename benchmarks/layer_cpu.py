"""CPU benchmark: one-rank MoE layer forward (float32) against the same GEMM work as two dense matmuls,
and against the naive token-repeat formulation.

    python benchmarks/layer_cpu.py [--tokens 2048 --d-model 512 --d-ff 256 --experts 48 --top-k 6]

Prints medians over repeats and the ratios; the layer's rate counts the useful work 6 T (K+1) D F.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from pipeline.moe import ExpertWeights, MoEConfig, build_layer, routing_plan


def median_ms(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def naive_forward(x, idx, weight, w: ExpertWeights) -> torch.Tensor:
    """Token repeat + masked indexing, one expert at a time (the reference workload's formulation)."""
    t, k = idx.shape
    x_rep = x.repeat_interleave(k, dim=0)
    flat = idx.reshape(-1)
    out = torch.zeros_like(x_rep)
    for e in range(w.w1.shape[0]):
        mask = flat == e
        if mask.any():
            gate, up = (x_rep[mask] @ w.w1[e].T).chunk(2, dim=-1)
            out[mask] = (torch.nn.functional.silu(gate) * up) @ w.w2[e].T
    y = (out.view(t, k, -1) * weight.unsqueeze(-1)).sum(dim=1)
    gate, up = (x @ w.shared_w1[0].T).chunk(2, dim=-1)
    return y + (torch.nn.functional.silu(gate) * up) @ w.shared_w2[0].T


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--d-ff", type=int, default=256)
    p.add_argument("--experts", type=int, default=48)
    p.add_argument("--top-k", type=int, default=6)
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args()
    t, d, f, e, k = a.tokens, a.d_model, a.d_ff, a.experts, a.top_k
    cfg = MoEConfig(d_model=d, d_ff=f, num_experts=e, top_k=k, dtype=torch.float32, backend="torch")
    w = ExpertWeights.random(cfg, seed=0)
    layer = build_layer(cfg, w)
    idx, weight = routing_plan(t, e, k, 1, 1.0, seed=0).for_rank(0)
    x = torch.randn(t, d)
    rows = t * (k + 1)
    a1, b1 = torch.randn(rows, d), torch.randn(d, 2 * f)
    a2, b2 = torch.randn(rows, f), torch.randn(f, d)
    flops = 6 * t * (k + 1) * d * f

    with torch.inference_mode():
        ref = naive_forward(x, idx, weight, w)
        err = float((layer(x, idx, weight) - ref).abs().max() / ref.abs().max())
        layer_ms = median_ms(lambda: layer(x, idx, weight), a.repeats)
        dense_ms = median_ms(lambda: (a1 @ b1, a2 @ b2), a.repeats)
        naive_ms = median_ms(lambda: naive_forward(x, idx, weight, w), max(a.repeats // 3, 3))

    threads = torch.get_num_threads()
    print(f"shape: T={t} D={d} F={f} E={e} K={k}, float32, {threads} threads, torch {torch.__version__}")
    print(f"layer vs naive max rel diff: {err:.2e}")
    print(f"{'path':<28}{'median ms':>10}{'GFLOP/s':>10}")
    paths = (
        ("layer forward (grouped)", layer_ms),
        ("two dense matmuls", dense_ms),
        ("naive token repeat", naive_ms),
    )
    for name, ms in paths:
        print(f"{name:<28}{ms:>10.2f}{flops / ms / 1e6:>10.1f}")
    print(f"layer / dense rate: {dense_ms / layer_ms:.2f}   layer over naive: {naive_ms / layer_ms:.2f}x")


if __name__ == "__main__":
    main()
