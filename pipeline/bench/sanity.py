"""The correctness gate of an execution (ReFrame's "sanity" check): before anything is timed, every rank
runs its first timed layer on a small slice — fresh tokens routed to a few experts, its own and other
ranks', as on a cluster (:func:`routes`: one expert left empty, one receiving rows from two ranks, so
groups are ragged and rows cross ranks through the real dispatch, regrouping and combine) — and
compares the forward output and, where the kind has a backward, the input and expert-weight gradients
with a float64 reference of the whole layer that never touches ``cutlass_kernels``' GEMMs: token
repeat + masked indexing, one expert at a time, with the layer's quantization applied (MXFP8 operands
fake-quantized, straight-through). Another rank's experts are drawn from their seed
(:meth:`pipeline.moe.weights.ExpertWeights.drawn`) and the slices other ranks sent this rank's experts are
rebuilt from theirs, so no collective beyond the layer's own and one gather of the verdicts is added;
the extra cost is those few experts' draws. The slice goes through the real layer, its process group
and its kernels, on the rank's own device; a wrong split, a regrouping off by a row or a combine
that returns rows to the wrong tokens fails it.

Tolerances (normwise relative error) are those of the layer tests, where they are derived: float32
1e-5; bfloat16 2^-6 (about four bf16 roundings per output); bfloat16 MXFP8 0.04 (a bf16 rounding that
moves an operand across an E4M3 boundary adds ~0.011 normwise). Float32 MXFP8 adds the same effect for
the rare intermediate activation whose float32 value sits within rounding of an E4M3 boundary (the
layer's and the reference's GEMM-1 outputs differ in the last bits, so it quantizes one E4M3 step,
2^-3, apart): measured in 2 of 40 fresh slices at scale=cpu, errors 7e-5 and 1.6e-4 instead of
3e-7; the tolerance allows up to FLIPS such activations of rms size with 2x headroom,
2^-2 sqrt(FLIPS / activations). Experts that received no row must get exactly zero gradient. A failure on
any rank fails every rank with :class:`SanityError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from cutlass_kernels.mxfp8 import fake_quantize
from pipeline.bench.naive import case_error
from pipeline.data.meta import Sanity
from pipeline.moe import LayerStack, MoEConfig, MoELayer
from pipeline.moe.weights import ExpertWeights

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
    weights: int | None = None,
    case: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> Sanity:
    """Check the first layer of ``stack`` on every rank (collective); the verdict, worst over ranks.
    ``weights``: the seed the weights were drawn with (:func:`check_layer`). With ``case`` (this rank's
    input of that layer: tokens, expert ids, weights), its forward of them too, against the naive
    formulation (:func:`pipeline.bench.naive.case_error`, error ``case``, held to the slice's
    tolerance). The verdict counts the slices' routed rows and those that crossed ranks
    (:func:`rows_across`). Raises :class:`SanityError` on every rank when any rank fails."""
    layer = stack.layers[0]
    assert isinstance(layer, MoELayer)
    device = layer.w1.device
    start = time.perf_counter()
    errors = check_layer(layer, backward, seed, weights)
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
    crossed, checked = rows_across(layer.cfg, layer.group.size, seed)
    verdict = Sanity(
        passed=bool(max_error <= tol),
        max_error=max_error,
        tolerance=tol,
        errors=worst,
        tokens=SLICE_TOKENS,
        seconds=max(r.seconds for r in ranks),
        crossed_rows=crossed,
        slice_rows=checked,
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


@dataclass(frozen=True)
class Slice:
    """One rank's slice: its tokens ``x`` [T, D], their experts ``idx`` [T, K] (global ids), routing
    weights [T, K] and output gradient ``dy`` [T, D], on the rank's device."""

    x: torch.Tensor
    idx: torch.Tensor
    weight: torch.Tensor
    dy: torch.Tensor


def routes(local: int, ranks: int, top_k: int, seed: int) -> tuple[list[tuple[int, int]], torch.Tensor]:
    """The slice's routing, the same on every rank relative to it: the (rank offset, local expert)
    pairs its tokens go to (rank r's pair (j, l) is expert l of rank r + j), and each token's ``top_k``
    of them [T, K], indices into the pairs. Of ``top_k + 2`` local experts chosen, the last receives no
    row; the others go to ranks at random offsets, the first to the rank itself, and on several ranks
    a further pair sends rows to the first one's expert on another rank, so that expert receives rows
    from two sources. Every rank receiving what it sends (``W - j`` sends to it what it sends to
    ``j``) keeps the counts symmetric, as the estimate's fake process group assumes."""
    gen = torch.Generator().manual_seed(2 * seed * 7919)
    chosen = torch.randperm(local, generator=gen)[: min(local, top_k + EXTRA_EXPERTS)].tolist()
    routed = chosen[:-1] if len(chosen) > top_k else chosen  # the last chosen one stays empty
    offsets = [0, *torch.randint(ranks, (len(routed) - 1,), generator=gen).tolist()]
    pairs = list(zip(offsets, routed, strict=True))
    if ranks > 1:
        pairs.append((int(torch.randint(1, ranks, (1,), generator=gen)), routed[0]))
    choice = torch.stack([torch.randperm(len(pairs), generator=gen)[:top_k] for _ in range(SLICE_TOKENS)])
    return pairs, choice


def expert_ids(cfg: MoEConfig, rank: int, ranks: int, seed: int) -> torch.Tensor:
    """The global expert ids [T, K] of rank ``rank``'s slice, on the CPU (no other draw of the slice)."""
    local = cfg.local_experts(ranks)
    pairs, choice = routes(local, ranks, cfg.top_k, seed)
    offset, expert = (torch.tensor(column) for column in zip(*pairs, strict=True))
    return (rank + offset[choice]) % ranks * local + expert[choice]


def slice_of(cfg: MoEConfig, rank: int, ranks: int, seed: int, device: torch.device) -> Slice:
    """Rank ``rank``'s slice (any rank can draw any rank's: what another rank sent its experts)."""
    idx = expert_ids(cfg, rank, ranks, seed)
    gen = torch.Generator().manual_seed(2 * (seed * 7919 + rank) + 1)
    weight = torch.rand(SLICE_TOKENS, cfg.top_k, generator=gen)
    x = torch.randn(SLICE_TOKENS, cfg.d_model, generator=gen).to(cfg.dtype)
    dy = torch.randn(SLICE_TOKENS, cfg.d_model, generator=gen).to(cfg.dtype)
    return Slice(x.to(device), idx.to(device), weight.to(device), dy.to(device))


def crossing_rows(cfg: MoEConfig, rank: int, ranks: int, seed: int) -> int:
    """How many of rank ``rank``'s routed slice rows go to another rank's experts."""
    return int((expert_ids(cfg, rank, ranks, seed) // cfg.local_experts(ranks) != rank).sum())


def rows_across(cfg: MoEConfig, ranks: int, seed: int) -> tuple[int, int]:
    """Of every rank's slice together: the routed rows that went to another rank's experts, and all
    routed rows checked."""
    crossed = sum(crossing_rows(cfg, r, ranks, seed) for r in range(ranks))
    return crossed, ranks * SLICE_TOKENS * cfg.top_k


def check_layer(layer: MoELayer, backward: bool, seed: int, weights: int | None = None) -> dict[str, float]:
    """Normwise relative errors of this rank's slice: ``y`` and, with ``backward``, ``dx``, ``dw1``,
    ``dw2``. NaN errors count as infinite. Collective: every rank of the layer's group calls it. The
    other ranks' experts are drawn from ``weights`` (the seed the layer's weights were drawn with;
    default ``seed``), so a rank that holds other values than its experts' fails the ranks that sent
    it rows."""
    cfg, rank, ranks, local = layer.cfg, layer.group.rank, layer.group.size, layer.w1.shape[0]
    if local < cfg.top_k:
        raise ValueError(f"the sanity slice needs >= top_k={cfg.top_k} local experts, the rank has {local}")
    device = layer.w1.device
    mine = slice_of(cfg, rank, ranks, seed, device)
    x = mine.x.clone().requires_grad_(backward)
    with torch.set_grad_enabled(backward):
        y = layer(x, mine.idx, mine.weight)
        if backward:
            torch.autograd.backward(y, mine.dy)
    got = {"y": y.detach()}
    if backward:
        assert x.grad is not None and layer.w1.grad is not None and layer.w2.grad is not None
        got |= {"dx": x.grad, "dw1": layer.w1.grad.clone(), "dw2": layer.w2.grad.clone()}
        for p in layer.parameters():
            p.grad = None
    pairs, _ = routes(local, ranks, cfg.top_k, seed)
    senders = {(rank - j) % ranks for j, _ in pairs} - {rank}  # whose rows my experts receive
    others = [slice_of(cfg, s, ranks, seed, device) for s in sorted(senders)] if backward else []
    drawn = seed if weights is None else weights

    def remote(expert: int) -> tuple[torch.Tensor, torch.Tensor]:
        w1, w2 = ExpertWeights.drawn(cfg, range(expert, expert + 1), drawn, device, layer.index)
        return w1[0], w2[0]

    ref = reference(layer, mine, others, remote, backward)
    errors = {name: _rel_fro(got[name], ref[name]) for name in got}
    if backward:  # experts that received no row from any rank: their gradients must be exactly zero
        outside = torch.ones(local, dtype=torch.bool)
        outside[[expert for _, expert in pairs]] = False
        for name in ("dw1", "dw2"):
            stray = float(got[name][outside.to(device)].float().abs().max()) if outside.any() else 0.0
            errors[name] = errors[name] if stray == 0 else float("inf")
    return errors


def reference(
    layer: MoELayer,
    mine: Slice,
    others: list[Slice],
    remote: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    backward: bool,
) -> dict[str, torch.Tensor]:
    """float64 y of this rank's slice through every expert its rows reach (this rank's own from the
    layer, another rank's from ``remote``) and, with ``backward``, dx and the local experts' dw1, dw2
    from the rows they received: this rank's and the ``others`` ranks' slices. Token repeat + masked
    indexing, one expert at a time."""
    cfg, rank, local = layer.cfg, layer.group.rank, layer.w1.shape[0]
    mode = cfg.mx_scale_mode if cfg.precision == "mxfp8" else None
    leaves: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # this rank's experts that got rows

    def weights(expert: int) -> tuple[torch.Tensor, torch.Tensor]:
        owner, own = divmod(expert, local)
        if owner != rank:
            w1, w2 = remote(expert)
            return w1.double(), w2.double()
        if own not in leaves:
            pair = (layer.w1[own].detach().double(), layer.w2[own].detach().double())
            if not backward:
                return pair
            leaves[own] = (pair[0].requires_grad_(), pair[1].requires_grad_())
        return leaves[own]

    x64 = mine.x.double().requires_grad_(backward)
    y = _routed(x64, mine.idx, mine.weight, weights, mode, cfg.dtype, None)
    for s in range(layer.shared_w1.shape[0]):
        y = y + _ffn(
            x64, layer.shared_w1[s].detach().double(), layer.shared_w2[s].detach().double(), None, cfg.dtype
        )
    result = {"y": y.detach()}
    if not backward:
        return result
    objective = (y * mine.dy.double()).sum()
    for other in others:  # the rows other ranks sent this rank's experts, and their gradients
        owned = range(rank * local, (rank + 1) * local)
        part = _routed(other.x.double(), other.idx, other.weight, weights, mode, cfg.dtype, owned)
        objective = objective + (part * other.dy.double()).sum()
    experts = sorted(leaves)
    grads = torch.autograd.grad(
        objective, [x64, *(leaves[e][0] for e in experts), *(leaves[e][1] for e in experts)]
    )
    dw1 = torch.zeros_like(layer.w1, dtype=torch.float64)
    dw2 = torch.zeros_like(layer.w2, dtype=torch.float64)
    for i, e in enumerate(experts):
        dw1[e], dw2[e] = grads[1 + i], grads[1 + len(experts) + i]
    return result | {"dx": grads[0], "dw1": dw1, "dw2": dw2}


def _routed(
    x: torch.Tensor,
    idx: torch.Tensor,
    weight: torch.Tensor,
    weights: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    mode: str | None,
    dtype: torch.dtype,
    owned: range | None,
) -> torch.Tensor:
    """sum_k weight[t, k] FFN_{idx[t, k]}(x[t]) in float64, over every expert, or only over the experts
    ``owned`` (rows to others' add nothing)."""
    tokens, k = idx.shape
    x_routed = _ste(x.repeat_interleave(k, dim=0), mode, dtype)
    flat = idx.reshape(-1)
    out = torch.zeros_like(x_routed)
    for e in flat.unique().tolist():
        if owned is not None and e not in owned:
            continue
        rows = (flat == e).nonzero()[:, 0]
        w1, w2 = weights(e)
        out = out.index_put((rows,), _ffn(x_routed[rows], w1, w2, mode, dtype))
    return (out.view(tokens, k, -1) * weight.double().unsqueeze(-1)).sum(dim=1)


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
