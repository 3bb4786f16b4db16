"""The report's saved-state facts, measured on real stacks of layers (packing: ten forwards, then the
backwards in reverse order), and recompute that really reproduces the retained computation."""

from __future__ import annotations

import pytest
import torch

from pipeline.data.codec import encode
from pipeline.matrix import PROFILES
from pipeline.moe import ExpertWeights, MoEConfig, build_stack, routing_plan

T, K, E, D, F = 2048, 6, 12, 32, 32


def _cfg(implementation: str, tokens: int = T, **kw) -> MoEConfig:
    pipeline = "native" if implementation == "mok" else "bf16"
    return MoEConfig(
        d_model=D,
        d_ff=F,
        num_experts=E,
        top_k=K,
        implementation=implementation,
        pipeline=pipeline,
        precision="bf16",
        dtype=torch.float32,
        budget_tokens=tokens,
        **kw,
    )


def _run_stack(cfg: MoEConfig, loads, tokens: int = T):
    """One process is the tracked GPU: feeding it f x T tokens gives it f x T x K routed rows."""
    stack = build_stack(cfg, [ExpertWeights.random(cfg, seed=i) for i in range(len(loads))])
    gen = torch.Generator().manual_seed(0)
    counts = [round(f * tokens) for f in loads]
    xs = [torch.randn(n, D, generator=gen).requires_grad_() for n in counts]
    routes = [routing_plan(n, E, K, 1, 1.0, seed=i).for_rank(0) for i, n in enumerate(counts)]
    ys = stack(xs, routes)
    states = stack.saved_state
    stack.backward(ys, [torch.randn(y.shape, generator=gen) for y in ys])
    return stack, states, xs


def test_mok_budget_is_32768_rows_about_2_67() -> None:
    _, states, _ = _run_stack(_cfg("mok"), [1.0])
    assert states[0].budget_rows == 32768
    assert states[0].factor == pytest.approx(2.6667, abs=1e-4)
    assert 2.5 * T * K == 30720


@pytest.mark.parametrize(("profile", "exceeding"), [("a", 2), ("b", 3), ("balanced", 0)])
def test_mok_layers_over_budget(profile: str, exceeding: int) -> None:
    _, states, _ = _run_stack(_cfg("mok"), PROFILES[profile])
    over = [s for s in states if s.recomputes]
    assert len(over) == exceeding
    assert all(s.capacity_flag is None for s in states)  # MoK has no capacity flag
    for s, f in zip(states, PROFILES[profile], strict=True):
        assert s.recomputes is (s.recomputed_rows > 0)
        assert s.routed_rows == round(f * T) * K
        assert s.retained_rows + s.recomputed_rows == s.routed_rows
        assert s.retained_rows == min(s.routed_rows, 32768)


@pytest.mark.parametrize("profile", ["balanced", "a", "b"])
def test_dist_moe_capacity_flag_is_zero(profile: str) -> None:
    stack, states, _ = _run_stack(_cfg("dist-moe"), PROFILES[profile])
    assert [s.capacity_flag for s in states] == [False] * 10
    assert all(s.recomputed_rows == 0 and s.retained_rows == s.routed_rows for s in states)
    assert not any(s.recomputes for s in states)
    # budget_rows and factor both mean one layer's share of the pooled slot
    assert all(s.budget_rows == 30720 and s.factor == 2.5 for s in states)
    assert encode(stack.policy.describe(T, K)) == {
        "implementation": "dist-moe",
        "layers": 10,
        "requested_factor": 2.5,
        "layer_budget_rows": 30720,
        "factor": 2.5,
        "pooled": True,
        "activation_rows": 10 * 30720,
        "scratch_factor": 8.0,
        "scratch_rows": 8 * T * K,
        "host_scratch_bytes": 0,
        "overflow": "capacity flag: raised when the shared slot or the receive scratch would overflow",
        # one slot of 2.5 x T x K rows per layer pooled over the ten layers, scratch 8 x T x K rows of D
        "buffers": [
            {
                "name": "activation-slot",
                "rows": 10 * 30720,
                "row_bytes": 2 * F * 4,
                "bytes": 10 * 30720 * 2 * F * 4,
            },
            {"name": "receive-scratch", "rows": 8 * T * K, "row_bytes": D * 4, "bytes": 8 * T * K * D * 4},
        ],
    }
    assert stack.layers[0].policy.used == 0  # every backward gave its rows back to the shared slot


def test_mok_stack_policy_is_ten_separate_budgets() -> None:
    stack, _, _ = _run_stack(_cfg("mok"), PROFILES["a"])
    described = stack.policy.describe(T, K)
    assert (described.layers, described.layer_budget_rows, described.pooled) == (10, 32768, False)
    assert described.activation_rows == 10 * 32768 and described.factor == pytest.approx(8 / 3)
    assert (described.scratch_factor, described.scratch_rows, described.host_scratch_bytes) == (
        None,
        0,
        0,
    )
    assert "recomputed" in described.overflow
    # one buffer of pow2(2.5 x T x K) rows of 2F per layer
    assert encode(described.buffers) == [
        {"name": f"saved-activations[{i}]", "rows": 32768, "row_bytes": 2 * F * 4, "bytes": 32768 * 2 * F * 4}
        for i in range(10)
    ]


@pytest.mark.parametrize("implementation", ["mok", "dist-moe"])
def test_retained_rows_live_in_the_policy_buffers_every_iteration(implementation: str) -> None:
    """Each layer's retained GEMM-1 rows are written into the policy's buffers (MoK: its own; Dist-MoE:
    consecutive rows of the one slot), the same storage in every iteration, and hold h = x W1^T."""
    tokens = 64
    cfg = _cfg(implementation, tokens)
    loads = PROFILES["a"]
    stack = build_stack(cfg, [ExpertWeights.random(cfg, seed=i) for i in range(len(loads))])
    policy = stack.policy
    gen = torch.Generator().manual_seed(1)
    counts = [round(f * tokens) for f in loads]
    xs = [torch.randn(n, D, generator=gen).requires_grad_() for n in counts]
    routes = [routing_plan(n, E, K, 1, 1.0, seed=i).for_rank(0) for i, n in enumerate(counts)]
    buffers = policy.saved if implementation == "mok" else [policy.slot]
    pointers = [b.data_ptr() for b in buffers]
    for _ in range(2):
        ys = stack(xs, routes)
        states = stack.saved_state
        offset = 0
        for i, (layer, x, (idx, _w), state) in enumerate(zip(stack.layers, xs, routes, states, strict=True)):
            plan = layer._dispatch_plan(idx, _w, x.shape[0])
            rows = x.detach().index_select(0, plan.token_of_row)
            ends = plan.offs.tolist()
            starts = [0, *ends[:-1]]
            h = torch.cat(
                [
                    rows[a:b] @ layer.w1.detach()[g].T
                    for g, (a, b) in enumerate(zip(starts, ends, strict=True))
                ]
            )
            kept = state.retained_rows
            where = policy.saved[i][:kept] if implementation == "mok" else policy.slot[offset : offset + kept]
            torch.testing.assert_close(where, h[:kept], rtol=1e-5, atol=1e-5)
            offset += kept
        stack.backward(ys, [torch.ones_like(y) for y in ys])
        assert [b.data_ptr() for b in buffers] == pointers
    assert sum(s.recomputed_rows > 0 for s in states) == (2 if implementation == "mok" else 0)


def test_dist_moe_flags_an_overflowing_slot() -> None:
    """A load beyond the receive scratch (8x) raises the capacity flag."""
    _, states, _ = _run_stack(_cfg("dist-moe", tokens=64), [9.0], tokens=64)
    assert states[0].capacity_flag is True


def test_recompute_gives_the_gradients_of_full_retention() -> None:
    """Profile A at T = 64 (budget 1024 rows): two layers recompute; a huge factor retains everything."""
    tokens = 64
    tight, tight_states, tight_x = _run_stack(_cfg("mok", tokens), PROFILES["a"], tokens)
    roomy, roomy_states, roomy_x = _run_stack(
        _cfg("mok", tokens, activation_factor=100.0), PROFILES["a"], tokens
    )
    assert sum(s.recomputed_rows > 0 for s in tight_states) == 2
    assert sum(s.recomputed_rows for s in roomy_states) == 0
    for a, b in zip(tight_x, roomy_x, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-6)
    for (name, p), q in zip(tight.named_parameters(), roomy.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-6, msg=name)
