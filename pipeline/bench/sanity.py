"""The correctness gate of an execution (ReFrame's "sanity" check): before anything is timed, every rank
runs its first timed layer on a small slice — fresh tokens routed to a few of its own experts, one of
them left empty, so groups are ragged — and compares the forward output and, where the kind has a
backward, the input and expert-weight gradients with a float64 reference that never touches
``cutlass_kernels``' GEMMs: token repeat + masked indexing, one expert at a time, with the layer's
quantization applied (MXFP8 operands fake-quantized, straight-through). The slice goes through the
real layer, its process group and its kernels, on the rank's own device.

Tolerances (normwise relative error) are those of the layer tests, where they are derived: float32
1e-5; bfloat16 2^-6 (about four bf16 roundings per output); bfloat16 MXFP8 0.04 (a bf16 rounding that
moves an operand across an E4M3 boundary adds ~0.011 normwise). Float32 MXFP8 adds the same effect for
the rare intermediate activation whose float32 value sits within rounding of an E4M3 boundary (the
layer's and the reference's GEMM-1 outputs differ in the last bits, so it quantizes one E4M3 step,
2^-3, apart): measured in 2 of 40 fresh slices at scale=cpu, errors 7e-5 and 1.6e-4 instead of
3e-7; the tolerance allows up to FLIPS such activations of rms size with 2x headroom,
2^-2 sqrt(FLIPS / activations). Experts outside the slice must get exactly zero gradient. A failure on
any rank fails every rank with :class:`SanityError`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from cutlass_kernels.mxfp8 import fake_quantize
from pipeline.bench.naive import case_error
from pipeline.data.meta import Sanity
from pipeline.moe import LayerStack, MoELayer

SLICE_TOKENS = 32  # x top-6 = 192 routed rows over <= 8 experts: every group has an M tail
EXTRA_EXPERTS = 2  # experts in the slice beyond top_k (one of them left empty)
FLIPS = 4  # float32 MXFP8: activations allowed to round to the neighbouring E4M3 value


class SanityError(RuntimeError):
    """An execution's layer disagrees with the reference beyond the tolerance."""


def tolerance(dtype: torch.dtype, precision: str, activations: int) -> float:
    """Normwise tolerance of a slice whose routed rows hold ``activations`` SwiGLU outputs."""
    if dtype == torch.float32:
        return 1e-5 + (2.0**-2 * math.sqrt(FLIPS / activations) if precision == "mxfp8" else 0.0)
    return 0.04 if precision == "mxfp8" else 2.0**-6


def gate(
    stack: LayerStack,
    backward: bool,
    seed: int,
    case: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> Sanity:
    """Check the first layer of ``stack`` on every rank (collective); the verdict, worst over ranks.
    With ``case`` (this rank's input of that layer: tokens, expert ids, weights), its forward of them
    too, against the naive formulation (:func:`pipeline.bench.naive.case_error`, error ``case``, held
    to the slice's tolerance). Raises :class:`SanityError` on every rank when any rank fails."""
    layer = stack.layers[0]
    assert isinstance(layer, MoELayer)
    device = layer.w1.device
    start = time.perf_counter()
    errors = check_layer(layer, backward, seed)
    if case is not None:
        errors["case"] = case_error(layer, *case, seed)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)  # the slice's reference is not the execution's memory
    mine = RankCheck(layer.group.rank, errors, time.perf_counter() - start)
    ranks = [mine]
    if layer.group.size > 1:
        gathered: list[RankCheck | None] = [None] * layer.group.size
        dist.all_gather_object(gathered, mine, group=layer.group.handle)
        ranks = [r for r in gathered if r is not None]
    tol = tolerance(layer.cfg.dtype, layer.cfg.precision, SLICE_TOKENS * layer.cfg.top_k * layer.cfg.d_ff)
    worst = {name: max(r.errors[name] for r in ranks) for name in errors}
    max_error = max(worst.values())
    verdict = Sanity(
        passed=bool(max_error <= tol),
        max_error=max_error,
        tolerance=tol,
        errors=worst,
        tokens=SLICE_TOKENS,
        seconds=max(r.seconds for r in ranks),
    )
    if not verdict.passed:
        error, name, rank = max((r.errors[n], n, r.rank) for r in ranks for n in r.errors)
        raise SanityError(
            f"sanity: {name} error {error:.3g} > tolerance {tol:.3g} on rank {rank} "
            f"({layer.cfg.implementation} {layer.cfg.precision} {layer.cfg.pipeline})"
        )
    return verdict


@dataclass(frozen=True)
class RankCheck:
    """One rank's errors per tensor and the seconds its check took."""

    rank: int
    errors: dict[str, float]
    seconds: float


def check_layer(layer: MoELayer, backward: bool, seed: int) -> dict[str, float]:
    """Normwise relative errors of this rank's slice: ``y`` and, with ``backward``, ``dx``, ``dw1``,
    ``dw2``. NaN errors count as infinite."""
    cfg, rank, local = layer.cfg, layer.group.rank, layer.w1.shape[0]
    if local < cfg.top_k:
        raise ValueError(f"the sanity slice needs >= top_k={cfg.top_k} local experts, the rank has {local}")
    device = layer.w1.device
    gen = torch.Generator().manual_seed(seed * 7919 + rank)
    chosen = torch.randperm(local, generator=gen)[: min(local, cfg.top_k + EXTRA_EXPERTS)]
    routed = chosen[:-1] if len(chosen) > cfg.top_k else chosen  # the last chosen one stays empty
    choice = torch.stack(
        [routed[torch.randperm(len(routed), generator=gen)[: cfg.top_k]] for _ in range(SLICE_TOKENS)]
    )
    weight = torch.rand(SLICE_TOKENS, cfg.top_k, generator=gen).to(device)
    x = torch.randn(SLICE_TOKENS, cfg.d_model, generator=gen).to(device, cfg.dtype)
    dy = torch.randn(SLICE_TOKENS, cfg.d_model, generator=gen).to(device, cfg.dtype)
    idx = (choice + rank * local).to(device)

    x.requires_grad_(backward)
    with torch.set_grad_enabled(backward):
        y = layer(x, idx, weight)
        if backward:
            torch.autograd.backward(y, dy)
    got = {"y": y.detach()}
    if backward:
        assert x.grad is not None and layer.w1.grad is not None and layer.w2.grad is not None
        got |= {"dx": x.grad, "dw1": layer.w1.grad.clone(), "dw2": layer.w2.grad.clone()}
        for p in layer.parameters():
            p.grad = None
    ref = reference(layer, x.detach(), choice.to(device), weight, dy, backward)
    errors = {name: _rel_fro(got[name], ref[name]) for name in got}
    if backward:  # experts outside the slice received no rows: their gradients must be exactly zero
        outside = torch.ones(local, dtype=torch.bool)
        outside[chosen] = False
        for name in ("dw1", "dw2"):
            stray = float(got[name][outside.to(device)].float().abs().max()) if outside.any() else 0.0
            errors[name] = errors[name] if stray == 0 else float("inf")
    return errors


def reference(
    layer: MoELayer,
    x: torch.Tensor,
    choice: torch.Tensor,
    weight: torch.Tensor,
    dy: torch.Tensor,
    backward: bool,
) -> dict[str, torch.Tensor]:
    """float64 y (and dx, dw1, dw2 of the local experts) of the slice: token repeat + masked indexing."""
    cfg = layer.cfg
    mode = cfg.mx_scale_mode if cfg.precision == "mxfp8" else None
    tokens, k = choice.shape
    x64 = x.double().requires_grad_(backward)
    x_routed = _ste(x64.repeat_interleave(k, dim=0), mode, cfg.dtype)
    flat = choice.reshape(-1)
    out = torch.zeros_like(x_routed)
    leaves: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for e in flat.unique().tolist():
        rows = (flat == e).nonzero()[:, 0]
        w1 = layer.w1[e].detach().double().requires_grad_(backward)
        w2 = layer.w2[e].detach().double().requires_grad_(backward)
        leaves[e] = (w1, w2)
        out = out.index_put((rows,), _ffn(x_routed[rows], w1, w2, mode, cfg.dtype))
    y = (out.view(tokens, k, -1) * weight.double().unsqueeze(-1)).sum(dim=1)
    for s in range(layer.shared_w1.shape[0]):
        y = y + _ffn(
            x64, layer.shared_w1[s].detach().double(), layer.shared_w2[s].detach().double(), None, cfg.dtype
        )
    result = {"y": y.detach()}
    if not backward:
        return result
    experts = sorted(leaves)
    grads = torch.autograd.grad(
        y, [x64, *(leaves[e][0] for e in experts), *(leaves[e][1] for e in experts)], dy.double()
    )
    dw1 = torch.zeros_like(layer.w1, dtype=torch.float64)
    dw2 = torch.zeros_like(layer.w2, dtype=torch.float64)
    for i, e in enumerate(experts):
        dw1[e], dw2[e] = grads[1 + i], grads[1 + len(experts) + i]
    return result | {"dx": grads[0], "dw1": dw1, "dw2": dw2}


def _ste(t: torch.Tensor, mode: str | None, dtype: torch.dtype) -> torch.Tensor:
    """The MXFP8 values of ``t`` as the layer (in its dtype) quantizes it; straight-through gradient."""
    if mode is None:
        return t
    return t + (fake_quantize(t.detach().to(dtype), mode).double() - t).detach()


def _ffn(
    x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, mode: str | None, dtype: torch.dtype
) -> torch.Tensor:
    gate, up = (x @ _ste(w1, mode, dtype).T).chunk(2, dim=-1)
    return _ste(torch.nn.functional.silu(gate) * up, mode, dtype) @ _ste(w2, mode, dtype).T


def _rel_fro(got: torch.Tensor, ref: torch.Tensor) -> float:
    diff = float(torch.linalg.vector_norm(got.double() - ref))
    scale = float(torch.linalg.vector_norm(ref))
    err = diff / scale if scale > 0 else diff
    return float("inf") if err != err else err
