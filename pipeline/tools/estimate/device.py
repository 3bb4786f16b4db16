"""The estimate's device: CUDA tensors are fake, CPU tensors are real, and every device op is seen.

Under :class:`FakeDevice` an op that touches a CUDA tensor (or creates one) runs under torch's
``FakeTensorMode``: shapes, dtypes, strides and aliasing are computed, no memory is allocated and no
arithmetic is done. Ops on CPU tensors only run for real, so host-side planning (routing plans, the
sanity slice's choices) computes real values as it does on a GPU node. Each device op is counted
(views and metadata-only ops launch no kernel), its new storages go to the memory
:class:`~pipeline.tools.estimate.memory.Tracker`, and a host synchronization is counted where it happens:
a device scalar read (``.item()``, ``.tolist()``, ``bool``, ``int``, ``float``, a Python branch on a
tensor), an op whose output shape depends on device data (``nonzero``, ``unique``, boolean masks,
``repeat_interleave`` without an output size, ``bincount``), or a copy to the host.

A synchronization needs a value. Small device tensors computed only from host data (the routing
moved to the GPU, a dispatch plan's indices, the sanity slice) carry a *shadow*: the same op run on
the real CPU values alongside, so such reads get their true value. A read of a tensor without one
(data that only a GPU would hold) gets zero / False / the largest possible size, and is counted all
the same; the count, not the value, is what the estimate reports of such a read. The fake process
group moves no data: a count exchange's shadow assumes every rank sent rank 0 what rank 0 sent to
its mirror rank (rank s receives from rank 0 what rank 0 receives from rank -s mod W), which holds
for the sanity slice, whose routing is the same on every rank relative to it
(:func:`pipeline.bench.sanity.routes`).
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections import Counter
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.weak import WeakTensorKeyDictionary

from pipeline.tools.estimate.memory import Tracker

aten = torch.ops.aten
SHADOW_ELEMENTS = 1 << 22  # tensors up to this size carry their real values when their inputs do
# Ops that launch no kernel though their schema says they make a new tensor.
NO_KERNEL = {
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten._unsafe_view.default,
    aten.lift_fresh.default,
    aten.resize_.default,
    aten.record_stream.default,
}
_SCALAR_READS = (aten._local_scalar_dense.default, aten.item.default)  # item: under inference mode
_PROJECT = "/pipeline/"  # frames of the project's code, for where a synchronization happened


@functools.cache
def launches_kernel(func: torch._ops.OpOverload) -> bool:
    """Whether a GPU would launch a kernel for ``func``: not a view (every output aliases an input,
    none written) nor a metadata-only op."""
    if func.namespace == "prim" or func in NO_KERNEL:
        return False
    returns = func._schema.returns
    views = returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
    return not views


@dataclass(frozen=True)
class Sync:
    """One host synchronization: the op, the phase it happened in, and the project frame that asked."""

    op: str
    phase: str
    where: str


class _NoShadow(Exception):
    """An input of the op carries no real values."""


class FakeDevice(TorchDispatchMode):
    """Fake CUDA, real CPU (see the module docstring). ``phase`` names what runs (the estimate sets
    it); ``ops[phase]`` counts kernel-launching device ops by name, ``syncs`` lists the host
    synchronizations."""

    def __init__(self, tracker: Tracker, world_size: int) -> None:
        super().__init__()
        self.fake = FakeTensorMode(allow_non_fake_inputs=True)
        self.tracker, self.world_size = tracker, world_size
        self.ops: dict[str, Counter[str]] = {}
        self.syncs: list[Sync] = []
        self._shadows = WeakTensorKeyDictionary()
        self._poisoned: weakref.WeakSet = weakref.WeakSet()  # storages whose shadows went stale
        self._last_read: Any = None  # the storage of the last scalar read, while nothing else ran

    @property
    def phase(self) -> str:
        return self.tracker.phase

    @phase.setter
    def phase(self, name: str) -> None:
        self.tracker.phase = name

    def __enter__(self) -> FakeDevice:
        self.fake.__enter__()  # below this mode: torch skips CUDA's lazy init while a fake mode is on
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self.fake.__exit__(*exc)

    def device_ops(self, phase: str) -> int:
        return sum(self.ops.get(phase, Counter()).values())

    def host_syncs(self, phase: str) -> list[Sync]:
        return [s for s in self.syncs if s.phase == phase]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "prim":  # metadata (``Tensor.device``): FakeTensorMode answers
            return func(*args, **kwargs)
        fake = _fakes((*args, *kwargs.values()))
        cuda = any(t.device.type == "cuda" for t in fake) or _cuda_device(kwargs.get("device"))
        if not fake and not cuda:
            with torch._C._DisableTorchDispatch():
                return func(*args, **kwargs)  # host work: real
        if func in _SCALAR_READS:
            return self._scalar_read(args[0])
        self._last_read = None
        try:
            out = func(*args, **kwargs)  # FakeTensorMode, the next mode on the stack
            shadowed = self._propagate(func, args, kwargs, fake, out)
        except (DataDependentOutputException, DynamicOutputShapeException):
            self._sync(func)
            out, shadowed = self._dynamic(func, args, kwargs), True
        if _to_host(func, args, kwargs):
            self._sync(func)  # a copy to the host waits for the device
        if not shadowed and (written := _written(func)):
            self._poison(args, written)
        if cuda and launches_kernel(func):
            self.ops.setdefault(self.phase, Counter())[_name(func)] += 1
        for t in _fakes(out if isinstance(out, (tuple, list)) else (out,)):
            if t.device.type == "cuda":
                self.tracker.saw(t, _name(func))
        return out

    # -- synchronizations -------------------------------------------------------------------------

    def _sync(self, func: Any) -> None:
        where = "?"
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:  # frames, not a traceback: no source lines read (~50 ms a sync)
            name = frame.f_code.co_filename
            if _PROJECT in name and "/estimate/" not in name:
                where = f"{name.split(_PROJECT)[-1]}:{frame.f_lineno}"
                break
            frame = frame.f_back
        self.syncs.append(Sync(_name(func), self.phase, where))

    def _scalar_read(self, t: FakeTensor) -> Any:
        """``.item()`` and its kin. The element reads of one ``.tolist()`` are one synchronization."""
        storage = t.untyped_storage()
        if t.device.type == "cuda" and storage is not self._last_read:
            self._sync(aten._local_scalar_dense.default)
        self._last_read = storage
        shadow = self._shadow(t)
        if shadow is not None:
            with torch._C._DisableTorchDispatch():
                return shadow.item()
        return False if t.dtype == torch.bool else (0 if not t.is_floating_point() else 0.0)

    def _dynamic(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """An op whose output size depends on device data: from the shadows when every input has one,
        a boolean index through its shadow's positions, else the largest size ``nonzero`` can have."""
        try:
            real = self._on_shadows(func, args, kwargs)
        except _NoShadow:
            pass
        else:
            return self._to_fake(real, _fake_device(args))
        if func is aten.index.Tensor:
            self_, indices = args[0], list(args[1])
            for i, index in enumerate(indices):
                if index is not None and index.dtype == torch.bool:
                    shadow = self._shadow(index)
                    if shadow is None:
                        raise _unresolved(func)
                    with torch._C._DisableTorchDispatch():
                        positions = shadow.nonzero().unbind(1)
                    indices[i] = self._to_fake(positions, index.device)
            flat = [j for i in indices for j in (i if isinstance(i, tuple) else (i,))]
            return func(self_, flat, **kwargs)
        if func is aten.nonzero.default:
            x = args[0]
            return torch.zeros(x.numel(), x.dim(), dtype=torch.int64, device=x.device)
        raise _unresolved(func)

    # -- shadows ----------------------------------------------------------------------------------

    def _shadow(self, t: FakeTensor) -> torch.Tensor | None:
        shadow = self._shadows.get(t)
        if shadow is None or t.untyped_storage() in self._poisoned:
            return None
        return shadow

    def _on_shadows(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """``func`` on the real values of its inputs (raises :class:`_NoShadow` if one has none)."""
        real_args, real_kwargs = self._real(args), self._real(kwargs)
        with torch._C._DisableTorchDispatch():
            return func(*real_args, **real_kwargs)

    def _real(self, tree: Any) -> Any:
        def real(x: Any) -> Any:
            if isinstance(x, FakeTensor):
                shadow = self._shadow(x)
                if shadow is None:
                    raise _NoShadow
                return shadow
            if isinstance(x, torch.device) and x.type == "cuda":
                return torch.device("cpu")
            return x

        return tree_map(real, tree)

    def _to_fake(self, real: Any, device: torch.device) -> Any:
        """Fake tensors on ``device`` for real results, each shadowed by its real value."""

        def convert(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            with torch._C._DisableTorchDispatch():
                meta = x.to("meta")
            fake = FakeTensor(self.fake, meta, device)
            self._shadows[fake] = x
            self.tracker.saw(fake, "host values")
            return fake

        return tree_map(convert, real)

    def _propagate(self, func: Any, args: tuple, kwargs: dict, fake: list, out: Any) -> bool:
        """Run ``func`` on the real values too when every input has them and the outputs are small;
        whether it did (an op that writes its inputs otherwise leaves their shadows stale)."""
        if func is torch.ops.c10d.alltoall_base_.default:
            return self._exchange(args)
        if not all(self._shadow(t) is not None for t in fake):
            return False
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if not outputs or sum(t.numel() for t in outputs) > SHADOW_ELEMENTS:
            return False
        try:
            real = self._on_shadows(func, args, kwargs)
        except _NoShadow:
            return False
        shadows = [t for t in tree_leaves(real) if isinstance(t, torch.Tensor)]
        for output, shadow in zip(outputs, shadows, strict=True):
            self._shadows[output] = shadow
        return True

    def _exchange(self, args: tuple) -> bool:
        """An all-to-all's received values (see the module docstring): equal splits only."""
        output, source, _, out_splits, in_splits = args[:5]
        shadow = self._shadow(source)
        if shadow is None or out_splits or in_splits:
            return False
        with torch._C._DisableTorchDispatch():
            chunks = shadow.chunk(self.world_size)
            received = torch.cat([chunks[-s % self.world_size] for s in range(self.world_size)])
            self._shadows[output] = received.view(output.shape)
        return True

    def _poison(self, args: tuple, written: tuple[int, ...]) -> None:
        """Inputs an op wrote without their real values being updated lose their shadows."""
        for i in written:
            if i < len(args) and isinstance(args[i], FakeTensor):
                self._poisoned.add(args[i].untyped_storage())


@functools.cache
def _written(func: torch._ops.OpOverload) -> tuple[int, ...]:
    """The positions of the arguments ``func`` writes (the collectives' schemas do not mark theirs:
    the first, their output)."""
    if func.namespace == "c10d":
        return (0,)
    arguments = func._schema.arguments
    return tuple(i for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write)


def _fakes(values: Any) -> list[FakeTensor]:
    """The fake tensors among an op's arguments or results (aten nests them one level deep at most)."""
    found = []
    for v in values:
        if isinstance(v, FakeTensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, FakeTensor))
    return found


@functools.cache
def _name(func: torch._ops.OpOverload) -> str:
    return str(func.overloadpacket)


def _cuda_device(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def _to_host(func: Any, args: tuple, kwargs: dict) -> bool:
    """A copy from the device to the host (``.cpu()``, ``.to("cpu")``, ``cpu_tensor.copy_(cuda)``)."""
    if func is aten._to_copy.default:
        return _cuda_device(args[0].device) and not _cuda_device(kwargs.get("device", args[0].device))
    if func is aten.copy_.default:
        return not _cuda_device(args[0].device) and _cuda_device(args[1].device)
    return False


def _fake_device(args: tuple) -> torch.device:
    return next(t.device for t in tree_leaves(args) if isinstance(t, FakeTensor))


def _unresolved(func: Any) -> RuntimeError:
    return RuntimeError(
        f"{func.overloadpacket}: its output size depends on device data the estimate does not have "
        f"(a host synchronization on a GPU)"
    )
