"""The expert-parallel MoE layer: routing -> dispatch -> grouped SwiGLU experts -> combine, plus the
shared expert. MoK and Dist-MoE are this one layer with different policies (see
:mod:`pipeline.moe.policy` and :class:`pipeline.moe.config.MoEConfig`)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from cutlass_kernels import quantize_mx
from pipeline.moe import ranges
from pipeline.moe.comm import Group
from pipeline.moe.config import MoEConfig
from pipeline.moe.dispatch import DispatchPlan, combine, dispatch
from pipeline.moe.experts import MXOperands, Release, grouped_swiglu, shared_swiglu
from pipeline.moe.policy import SavedState, SavedStatePolicy, make_policy
from pipeline.moe.routing import validate_routing
from pipeline.moe.swiglu import fused_form
from pipeline.moe.weights import ExpertWeights


class MoELayer(torch.nn.Module):
    """y[t] = sum_k w[t,k] FFN_{idx[t,k]}(x[t]) + sum_s FFN_shared_s(x[t]); rank r owns experts
    [r E/W, (r+1) E/W). ``saved_state`` holds the evidence of the last forward."""

    def __init__(
        self,
        cfg: MoEConfig,
        weights: ExpertWeights,
        group: dist.ProcessGroup | Group | None = None,
        policy: SavedStatePolicy | None = None,
        index: int = 0,
    ) -> None:
        super().__init__()
        self.cfg, self.group = cfg, Group.resolve(group)
        w1, w2, shared_w1, shared_w2 = _own_weights(cfg, weights, self.group)
        self.w1, self.w2 = torch.nn.Parameter(w1), torch.nn.Parameter(w2)
        self.shared_w1, self.shared_w2 = torch.nn.Parameter(shared_w1), torch.nn.Parameter(shared_w2)
        self.policy = policy if policy is not None else make_policy(cfg)
        self.index = index  # this layer's place in its stack (MoK's per-layer buffer)
        self.saved_state: SavedState | None = None
        self._mx_weights: tuple | None = None
        self._plan_cache: tuple[torch.Tensor, int, DispatchPlan] | None = None
        self.prepare()

    @property
    def swiglu_backward_form(self) -> str:
        """The SwiGLU backward this layer runs: ``unfused`` (MoK's), else the fused form of its device
        (:func:`pipeline.moe.swiglu.fused_form`; Dist-MoE's)."""
        cfg = self.cfg
        return fused_form(self.w1.device, cfg.dtype, cfg.d_ff) if cfg.fused_swiglu_backward else "unfused"

    def prepare(self) -> None:
        """Quantize the expert weights once (MXFP8); call again after changing the weights."""
        if self.cfg.precision != "mxfp8":
            return
        mode = self.cfg.mx_scale_mode
        w1, w2 = quantize_mx(self.w1.detach(), mode), quantize_mx(self.w2.detach(), mode)
        self._mx_weights = (w1, w2, w1.dequantize(self.cfg.dtype), w2.dequantize(self.cfg.dtype))

    def mx_value_bytes(self) -> int:
        """Bytes of the dequantized weight values an MXFP8 layer keeps beside its quantized weights
        (for backward and for kernels that multiply BF16 values); 0 for a BF16 layer."""
        if self._mx_weights is None:
            return 0
        return sum(t.numel() * t.element_size() for t in self._mx_weights[2:])

    def forward(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weight: torch.Tensor) -> torch.Tensor:
        with ranges.layer():
            return self._forward(x, topk_idx, topk_weight)

    def _forward(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weight: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        self._check_input(x)
        tokens = x.shape[0]
        plan = self._dispatch_plan(topk_idx, topk_weight, tokens)
        scratch = self.policy.receive_scratch
        wire = cfg.mx_scale_mode if cfg.fp8_on_wire else None
        rows, rows_mx = dispatch(x, plan, self.group, wire, scratch=scratch)

        hold = torch.is_grad_enabled() and any(t.requires_grad for t in (x, self.w1, self.w2))
        budget_tokens = cfg.budget_tokens or tokens
        granted = self.policy.reserve(self.index, plan.received_rows, budget_tokens, cfg.top_k, hold)
        state = self.saved_state = granted.state
        release = Release(self.policy.release, state.retained_rows) if hold else None
        mx = None
        if self._mx_weights is not None:
            with ranges.phase("quantize"):
                mx = self._mx_operands(rows, rows_mx)
                if rows_mx is None:  # the GEMMs multiply these values (straight-through)
                    rows = _straight_through(rows, mx.rows.dequantize(cfg.dtype))
        kept = state.retained_rows if hold else 0  # without autograd nothing is saved
        out = grouped_swiglu(
            rows, self.w1, self.w2, plan.offs, kept, mx, cfg.backend, release, granted.store,
            cfg.fused_swiglu_backward,
        )  # fmt: skip

        y = combine(out, topk_weight, plan, self.group, tokens).to(x.dtype)
        with ranges.phase("shared"):
            shared = shared_swiglu(x, self.shared_w1, self.shared_w2)
        return y + shared

    def _dispatch_plan(self, topk_idx: torch.Tensor, topk_weight: torch.Tensor, tokens: int) -> DispatchPlan:
        """Validate the routing and build its plan (one count exchange, host-synchronizing); reused
        while the same, unmodified ``topk_idx`` comes back, so steady-state steps with fixed routing
        do no host synchronization and can be captured in a CUDA graph."""
        cached = self._plan_cache
        if cached is not None and cached[0] is topk_idx and cached[1] == topk_idx._version:
            if tuple(topk_weight.shape) != tuple(topk_idx.shape) or topk_weight.dtype != torch.float32:
                validate_routing(topk_idx, topk_weight, tokens, self.cfg.num_experts, self.cfg.top_k)
            return cached[2]
        validate_routing(topk_idx, topk_weight, tokens, self.cfg.num_experts, self.cfg.top_k)
        plan = DispatchPlan.build(topk_idx, self.cfg.num_experts, self.group)
        self._plan_cache = (topk_idx, topk_idx._version, plan)
        return plan

    def use_plan(self, topk_idx: torch.Tensor, plan: DispatchPlan) -> None:
        """Dispatch ``topk_idx`` (unmodified) with ``plan`` from now on, as if a forward had built it:
        for a caller that planned the routing elsewhere (the estimate plans on the host what a fake
        process group cannot exchange)."""
        if plan.order.shape[0] != topk_idx.numel() or plan.offs.device != self.w1.device:
            raise ValueError(
                f"the plan is for {plan.order.shape[0]} rows on {plan.offs.device}; this routing has "
                f"{topk_idx.numel()} rows and the layer is on {self.w1.device}"
            )
        self._plan_cache = (topk_idx, topk_idx._version, plan)

    def _mx_operands(self, rows: torch.Tensor, rows_mx) -> MXOperands:
        assert self._mx_weights is not None
        mode = self.cfg.mx_scale_mode
        w1, w2, w1_values, w2_values = self._mx_weights
        received = rows_mx if rows_mx is not None else quantize_mx(rows.detach(), mode)
        return MXOperands(w1, w2, w1_values, w2_values, received, mode)

    def _check_input(self, x: torch.Tensor) -> None:
        d = self.cfg.d_model
        if x.dim() != 2 or x.shape[1] != d:
            raise ValueError(f"x must have shape [T, {d}], got {list(x.shape)}")
        if x.dtype != self.cfg.dtype:
            raise ValueError(f"x has dtype {x.dtype}; this layer's dtype is {self.cfg.dtype}")
        if x.device != self.w1.device:
            raise ValueError(f"x is on {x.device}; this layer's weights are on {self.w1.device}")


def _straight_through(rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` in the forward, identity gradient to ``rows`` in the backward."""
    return rows + (values - rows).detach()


def _own_weights(cfg: MoEConfig, w: ExpertWeights, group: Group) -> tuple[torch.Tensor, ...]:
    """This rank's (w1, w2, shared_w1, shared_w2): cloned out of full weights, or taken as they are
    from this rank's own (``ExpertWeights.local``)."""
    local = cfg.local_experts(group.size)
    lo = group.rank * local
    experts = cfg.num_experts if w.first is None else local
    if w.first is not None and w.first != lo:
        raise ValueError(
            f"weights hold experts from {w.first}; rank {group.rank} of {group.size} owns "
            f"{lo}..{lo + local - 1}"
        )
    f, d, s = cfg.d_ff, cfg.d_model, cfg.num_shared
    expected = {
        "w1": (experts, 2 * f, d), "w2": (experts, d, f), "shared_w1": (s, 2 * f, d), "shared_w2": (s, d, f)
    }  # fmt: skip
    for name, shape in expected.items():
        t = getattr(w, name)
        if tuple(t.shape) != shape or t.dtype != cfg.dtype:
            raise ValueError(
                f"weights.{name} must be {cfg.dtype} of shape {list(shape)}, got {t.dtype} {list(t.shape)}"
            )
    if w.first is not None:
        return w.w1, w.w2, w.shared_w1, w.shared_w2
    return (
        w.w1[lo : lo + local].clone(),
        w.w2[lo : lo + local].clone(),
        w.shared_w1.clone(),
        w.shared_w2.clone(),
    )


def build_layer(
    cfg: MoEConfig, weights: ExpertWeights, group: dist.ProcessGroup | Group | None = None
) -> MoELayer:
    """One layer on ``group`` (None = the default group, or a single process when none is initialized;
    a :class:`~pipeline.moe.comm.Group`, such as a one-rank loopback, as it is),
    from full weights or this rank's own (``ExpertWeights.local``), with its policy's buffers
    allocated on the weights' device when T is known (``budget_tokens``)."""
    return MoELayer(cfg, weights, group, make_policy(cfg, 1, weights.w1.device))
