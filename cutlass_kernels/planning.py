"""Kernel launches planned instead of made, for estimating an execution without a GPU.

Inside ``planned_launches(arch)`` a CUDA tensor (a fake one, under torch's ``FakeTensorMode``, on a
machine without CUDA) counts as being on a GPU of ``arch``: ``backend="auto"`` resolves to that
arch's CuTe backend, whose wrappers run their host-side logic and their torch allocations and copies
(outputs, workspaces, row padding, MX scale layouts, the BF16 operands of Hopper's MX path) as on a
GPU, but neither compile nor launch a kernel: each launch they would make is recorded instead, in the
list the context yields. Outside the context nothing changes.

    with FakeTensorMode(), planned_launches("sm_90a") as launches:
        out = cutlass_kernels.api.grouped_gemm(a, b, offs)  # a, b, offs: fake cuda tensors
    launches  # [PlannedLaunch(kernel='grouped_fprop_bfloat16-bfloat16_128x256_sm_90a', ...)]

Fake CUDA tensors need no CUDA: under ``FakeTensorMode()``, ``torch.empty(..., device="cuda")`` (and
``randn``, ``zeros``, ``tensor``, ...) make them even with a torch built without CUDA. Most ops then
work on them, but not the few whose C++ code takes a CUDA device guard before dispatching, which such
a build lacks (torch registers a no-op one under ``FakeTensorMode`` only in a CUDA build without a
GPU): Python indexing and assignment and ``Tensor.contiguous``, which the wrappers use, run inside
the context with the fake tensors' devices set to the CPU's for the call's duration
(:class:`_CudaFakesGuardedAsCpu`); autograd on fake CUDA tensors aborts such a build's process. Where
a process has registered a CUDA device guard and accelerator of its own (``pipeline.estimate``'s fake
CUDA shim, which autograd needs), CUDA is torch's accelerator and the calls run as they are: the guard
mode would give autograd's nodes CPU inputs on CUDA streams.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree

from cutlass_kernels.vocabulary import check_arch


@dataclass(frozen=True)
class PlannedLaunch:
    """One kernel launch a wrapper would have made: the kernel (its compile-key name), the op it
    computes (``fprop``, ``dgrad``, ``wgrad``, ``mx``: block-scaled, ``swiglu-backward``: the fused
    SwiGLU backward of ``swiglu_kernel``, whose ``out_shape`` is dH's, or ``swiglu-forward``: the
    fused SwiGLU forward of ``swiglu_forward_kernel``, A's, the values' or the codes'), its variant and
    arch, and the output it writes."""

    kernel: str
    op: str
    variant: str
    arch: str
    out_shape: tuple[int, ...]
    out_dtype: str


@dataclass
class Plan:
    arch: str
    launches: list[PlannedLaunch] = field(default_factory=list)


# The plans of the open contexts, innermost last: process-wide, not per thread or context, because
# autograd runs the backward of CUDA tensors on a thread of its own, which a ContextVar does not reach.
_PLANS: list[Plan] = []


@contextmanager
def planned_launches(arch: str) -> Iterator[list[PlannedLaunch]]:
    """CUDA tensors count as on an ``arch`` GPU and kernel launches are recorded, not made (module
    docstring); yields the list of records, one per launch, in order."""
    plan = Plan(check_arch(arch))
    _PLANS.append(plan)
    try:
        with ExitStack() as stack:
            if not _has_cuda_guard():
                stack.enter_context(_CudaFakesGuardedAsCpu())
            yield plan.launches
    finally:
        _PLANS.remove(plan)


def _has_cuda_guard() -> bool:
    """Whether this process has a CUDA device guard: a build with CUDA, or one whose accelerator a
    shim made CUDA (an accelerator without a device guard does not exist)."""
    if torch.cuda._is_compiled():
        return True
    accelerator = torch.accelerator.current_accelerator()
    return accelerator is not None and accelerator.type == "cuda"


class _CudaFakesGuardedAsCpu(TorchFunctionMode):
    """Indexing, assignment and ``contiguous()`` of fake CUDA tensors on a torch built without CUDA:
    the same calls, with the fake tensors' devices set to the CPU while they run (the C++ device guard
    they take is then the CPU's no-op one), and their outputs' set back."""

    _GUARDED = frozenset({torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.contiguous})

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func not in self._GUARDED:
            return func(*args, **kwargs)
        fakes = [
            t
            for t in _pytree.tree_leaves((args, kwargs))
            if isinstance(t, FakeTensor) and t.fake_device.type == "cuda"
        ]
        if not fakes:
            return func(*args, **kwargs)
        devices = [t.fake_device for t in fakes]
        for t in fakes:
            t.fake_device = torch.device("cpu")
        try:
            out = func(*args, **kwargs)
        finally:
            for t, device in zip(fakes, devices, strict=True):
                t.fake_device = device
        for t in _pytree.tree_leaves(out):
            if isinstance(t, FakeTensor) and t.fake_device.type == "cpu":
                t.fake_device = devices[0]
        return out


def current() -> Plan | None:
    """The plan of the innermost ``planned_launches`` context (on any thread), or None outside one."""
    return _PLANS[-1] if _PLANS else None
