"""Layer cases run on real gloo ranks and checked against the float64 reference (tests/moe_reference.py).

Every rank rebuilds every rank's inputs and routing from seeds, so it can compute the whole reference
itself and compare its own slice: outputs and input gradients for its tokens, expert-weight gradients
for its local experts, shared-expert gradients summed over ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from pipeline.moe import ExpertWeights, MoEConfig, build_layer, routing_plan
from tests.moe_reference import reference_moe

VARIANTS = [
    ("mok", "bf16", "native"),
    ("mok", "mxfp8", "native"),
    ("dist-moe", "bf16", "bf16"),
    ("dist-moe", "mxfp8", "fp8-dispatch"),
    ("dist-moe", "mxfp8", "bf16-dispatch"),
]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SCENARIOS = ("plan", "ragged")
D, F, E, K, T = 64, 32, 8, 3, 24
WEIGHT_NAMES = ("w1", "w2", "shared_w1", "shared_w2")


@dataclass(frozen=True)
class Case:
    implementation: str
    precision: str
    pipeline: str
    dtype: str
    scenario: str
    d_model: int = D
    d_ff: int = F

    @property
    def name(self) -> str:
        shape = "" if (self.d_model, self.d_ff) == (D, F) else f"-d{self.d_model}-f{self.d_ff}"
        return f"{self.implementation}-{self.precision}-{self.pipeline}-{self.dtype}-{self.scenario}{shape}"


ALL_CASES = [Case(*v, d, s) for v in VARIANTS for d in DTYPES for s in SCENARIOS]

# (d_model, d_ff) whose rows are not 16 bytes in at least one GEMM dimension of the given dtype: D is
# GEMM-1's K and GEMM-2's N, F is GEMM-2's K (and 2F GEMM-1's N). The first twelve are unaligned in
# float32 (a dimension not a multiple of 4) and so in bfloat16; the last three only in bfloat16 (a
# multiple of 4, not of 8). Layer dtypes only: MXFP8 needs multiples of 32, which are aligned.
UNALIGNED_SHAPES = [
    (32, 18), (34, 16), (30, 15), (64, 10), (18, 32), (48, 6), (22, 24), (33, 64), (64, 33), (36, 26),
    (40, 14), (26, 40), (40, 20), (36, 24), (32, 12),
]  # fmt: skip


def unaligned(shape: tuple[int, int], dtype: str) -> bool:
    """Whether a GEMM dimension of ``shape`` has rows that are not a multiple of 16 bytes in ``dtype``."""
    size = DTYPES[dtype].itemsize
    return any(n * size % 16 for n in shape)


UNALIGNED_CASES = [
    Case(i, p, pl, d, s, *shape)
    for shape in UNALIGNED_SHAPES
    for i, p, pl in VARIANTS
    if p == "bf16"
    for d in DTYPES
    if unaligned(shape, d)
    for s in SCENARIOS
]


def routing(scenario: str, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``plan``: the seeded plan with rank 0 at 2x (1x alone). ``ragged``: random distinct experts
    that never use experts 3 and 7 (zero-token experts), favour rank 0's experts (overloaded rank), and
    give the last of several ranks no tokens at all (a rank that sends nothing)."""
    if scenario == "plan":
        return routing_plan(T, E, K, world, 2.0 if world > 1 else 1.0, seed=7).for_rank(rank)
    tokens = 0 if world > 1 and rank == world - 1 else T + 5 * rank
    gen = torch.Generator().manual_seed(1000 + rank)
    probs = torch.ones(E, dtype=torch.float64)
    probs[: E // world] = 4.0
    probs[[3, 7]] = 0.0
    idx = (
        torch.stack([torch.multinomial(probs, K, generator=gen) for _ in range(tokens)])
        if tokens
        else (torch.empty(0, K, dtype=torch.int64))
    )
    weight = torch.softmax(torch.randn(tokens, K, generator=gen), dim=-1)
    return idx, weight


def _inputs(rank: int, tokens: int, d_model: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(500 + rank)
    x = torch.randn(tokens, d_model, generator=gen)
    return x.to(dtype), torch.randn(tokens, d_model, generator=gen).to(dtype)


def _errors(got: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    got, ref = got.detach().cpu().double(), ref.detach().double()
    diff = (got - ref).abs()
    return {
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
        "rel_fro": float(diff.norm() / ref.norm().clamp_min(1e-30)),
        "ref_norm": float(ref.norm()),
    }


def run_case(rank: int, world: int, case: Case, device: str = "cpu") -> dict:
    """Forward + backward of one case on this rank; errors against the float64 reference (with the
    MXFP8 operand values for MXFP8 cases) and, for MXFP8, output errors against unquantized math."""
    dtype = DTYPES[case.dtype]
    dev = torch.device(device)
    cfg = MoEConfig(
        d_model=case.d_model,
        d_ff=case.d_ff,
        num_experts=E,
        top_k=K,
        num_shared=1,
        implementation=case.implementation,
        pipeline=case.pipeline,
        precision=case.precision,
        dtype=dtype,
        # planned routing runs the policies' real buffers (T known); ragged routing only counts rows
        budget_tokens=T if case.scenario == "plan" else None,
    )
    weights = ExpertWeights.random(cfg, seed=3)
    layer = build_layer(cfg, ExpertWeights(*(getattr(weights, n).to(dev) for n in WEIGHT_NAMES)))
    routes = [routing(case.scenario, r, world) for r in range(world)]
    inputs = [_inputs(r, routes[r][0].shape[0], case.d_model, dtype) for r in range(world)]

    x = inputs[rank][0].to(dev).clone().requires_grad_()
    y = layer(x, *(t.to(dev) for t in routes[rank]))
    torch.autograd.backward(y, inputs[rank][1].to(dev))
    shared = [layer.shared_w1.grad.clone(), layer.shared_w2.grad.clone()]
    if dist.is_initialized():
        for g in shared:
            dist.all_reduce(g)

    def reference(mx_mode: str | None):
        x64 = torch.cat([i[0] for i in inputs]).double().requires_grad_()
        params = [getattr(weights, n).double().requires_grad_() for n in WEIGHT_NAMES]
        idx = torch.cat([r[0] for r in routes])
        wt = torch.cat([r[1] for r in routes])
        y64 = reference_moe(x64, idx, wt, *params, mx_mode=mx_mode, dtype=dtype)
        torch.autograd.backward(y64, torch.cat([i[1] for i in inputs]).double())
        return y64, x64.grad, [p.grad for p in params]

    mode = cfg.mx_scale_mode if case.precision == "mxfp8" else None
    y64, dx64, (dw1, dw2, dsw1, dsw2) = reference(mode)
    start = sum(r[0].shape[0] for r in routes[:rank])
    rows = slice(start, start + x.shape[0])
    local = E // world
    experts = slice(rank * local, (rank + 1) * local)
    out = {
        "y": _errors(y, y64[rows]),
        "dx": _errors(x.grad, dx64[rows]),
        "dw1": _errors(layer.w1.grad, dw1[experts]),
        "dw2": _errors(layer.w2.grad, dw2[experts]),
        "dshared_w1": _errors(shared[0], dsw1),
        "dshared_w2": _errors(shared[1], dsw2),
        "saved_state": layer.saved_state,
        "expert_grad_norms": layer.w1.grad.detach().cpu().double().norm(dim=(1, 2)),
        "tokens": x.shape[0],
    }
    if mode is not None:
        y_exact = reference(None)[0][rows]
        out["y_vs_unquantized"] = {
            "diff": (y.detach().cpu().double() - y_exact).abs(),
            "envelope": _envelope(inputs, routes, rank, weights),
        }
    return out


def _envelope(inputs, routes, rank, weights) -> torch.Tensor:
    """Magnitude envelope of the routed output: sum_k w_k |W2| (|silu(g)| |W1u| |x| + 1.1 |u| |W1g| |x|
    + |silu(g) u|), in float64. Rounding every operand to E4M3 (relative error u) perturbs the
    output by at most about 3u times this envelope to first order (see test_mxfp8_error_bound)."""
    x = inputs[rank][0].double()
    idx, wt = routes[rank]
    w1, w2 = weights.w1.double(), weights.w2.double()
    env = torch.zeros_like(x)
    for k in range(idx.shape[1]):
        e = idx[:, k]
        gate_w, up_w = w1[e].chunk(2, dim=1)
        g = torch.einsum("tfd,td->tf", gate_w, x)
        u = torch.einsum("tfd,td->tf", up_w, x)
        g_abs = torch.einsum("tfd,td->tf", gate_w.abs(), x.abs())
        u_abs = torch.einsum("tfd,td->tf", up_w.abs(), x.abs())
        silu = torch.nn.functional.silu(g)
        a_env = silu.abs() * u_abs + 1.1 * u.abs() * g_abs + (silu * u).abs()
        env += wt[:, k, None].double() * torch.einsum("tdf,tf->td", w2[e].abs(), a_env)
    return env
