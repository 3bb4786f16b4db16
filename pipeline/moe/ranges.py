"""The layer's phases as profiler ranges, so that a profiler sees where an iteration's time goes.

Each phase of :data:`pipeline.base.vocabulary.LAYER_PHASES` is a user-scope range (what
``torch.profiler.record_function`` records) while a profiler runs (``torch.profiler``, or
``torch.autograd.profiler.emit_nvtx``, under which the same ranges are NVTX ranges for Nsight
Systems); with a GPU a profiled range is an NVTX range too. With no profiler running a range costs one
flag check, so the timed steps carry none, and a CUDA graph captured then holds only kernels (the
phase account names those by their eager twins, :mod:`pipeline.bench.account`). A profiled range
also notes the autograd sequence numbers of the nodes made inside it (:data:`MADE`), so the backward
of a built-in op is known by the phase of the forward that made it without recording every op.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from types import TracebackType

import torch
import torch.autograd.profiler as autograd_profiler

from pipeline.base.vocabulary import LAYER_RANGE, range_name

_OFF = contextlib.nullcontext()
_NVTX = torch.cuda.is_available()
# The profiler's own user-scope range, entered without a dispatcher call (record_function's costs
# about 7 us a range under a profiler, these about 2), and the next autograd sequence number; a torch
# without them records no range and notes no number (the account then claims less, and says so).
_enter = getattr(torch._C._autograd, "_record_function_with_args_enter", None)
_exit = getattr(torch._C._autograd, "_record_function_with_args_exit", None)
_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", lambda: 0)
# While a profiler runs: per profiled range that made autograd nodes (forward ranges, on the thread
# that runs the layers), its name and the first and past-last sequence numbers of those nodes, in the
# order the ranges ended.
MADE: list[tuple[str, int, int]] = []
# Phases planted slow (pipeline.bench.plants): phase -> extra seconds each time it runs.
_SLOW: dict[str, float] = {}


def phase(name: str, mx: bool = False) -> contextlib.AbstractContextManager[object]:
    """The range of phase ``name`` (``mx``: an MXFP8 GEMM's, whose operand conversions are
    quantization) while a profiler runs, else nothing."""
    if _SLOW and name in _SLOW:
        return _Slowed(range_name(name, mx), _SLOW[name])
    if not autograd_profiler._is_profiler_enabled:
        return _OFF
    return _Range(range_name(name, mx))


def slow(phases: Mapping[str, float]) -> None:
    """From now on each phase of ``phases`` runs that many seconds longer, inside its range (a fault
    a test plants, :mod:`pipeline.bench.plants`); an empty mapping plants none."""
    _SLOW.clear()
    _SLOW.update(phases)


def layer() -> contextlib.AbstractContextManager[object]:
    """The range of one whole layer forward (its work outside the named phases is ``other``)."""
    return _Range(LAYER_RANGE) if autograd_profiler._is_profiler_enabled else _OFF


class _Range:
    """One profiled range, with its NVTX twin on a GPU and the sequence numbers made inside it."""

    __slots__ = ("first", "handle", "name")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.handle = _enter(self.name) if _enter is not None else None
        if _NVTX:
            torch.cuda.nvtx.range_push(self.name)
        self.first = _sequence_nr()

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        made = _sequence_nr()
        if made > self.first:
            MADE.append((self.name, self.first, made))
        if _NVTX:
            torch.cuda.nvtx.range_pop()
        if _exit is not None:
            _exit(self.handle)


class _Slowed:
    """A planted slow phase: its range (while a profiler runs) around its work and the extra wait."""

    __slots__ = ("inner", "name", "seconds")

    def __init__(self, name: str, seconds: float) -> None:
        self.name, self.seconds = name, seconds

    def __enter__(self) -> None:
        self.inner = _Range(self.name) if autograd_profiler._is_profiler_enabled else _OFF
        self.inner.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        time.sleep(self.seconds)
        self.inner.__exit__(kind, err, tb)
