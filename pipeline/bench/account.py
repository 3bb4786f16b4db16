"""The phase account of an execution: where one iteration's time goes, phase by phase.

After the timing windows, separately from them (as the NVLink rates are read), every rank replays a
few iterations of its timed steps under ``torch.profiler`` and classifies the time of each into the
layer's phases (:data:`pipeline.base.vocabulary.LAYER_PHASES`), which the layer names as profiler
ranges (:mod:`pipeline.moe.ranges`). What reads the profile is the profiler's own event table (each
event's name, thread, start and end, autograd sequence number, correlation), not a trace file.

The profiler records the user-scope ranges and the autograd backward nodes only, not every op, so
that profiling costs the iteration little (each recorded op costs about half a microsecond, and the
torch reference's grouped GEMMs run hundreds of small ones).

- **On CPUs** each instant of an iteration belongs to the innermost recorded event there: a layer
  range gives its phase; an autograd backward node of a built-in op (no range of its own) belongs to
  the phase of the forward range that made it (by its sequence number,
  :data:`pipeline.moe.ranges.MADE`); inside an MXFP8 GEMM's range what is not the GEMM itself (the
  operands' conversion, outside the reference's :data:`GEMM_RANGE`) is quantization. So the phases and
  the time no phase claims (``unclaimed``: the autograd engine, the loop, the gradients' reset) add
  up to the iteration exactly.
- **On GPUs** the time is the kernels': each instant of an iteration goes to the kernel running then
  (the one started last where streams overlap), idle time is unclaimed. A kernel launched eagerly
  belongs to the phase of the op that launched it (its correlation); inside a CUDA graph no range
  reaches, so the replayed kernels are named by their eager twins: one eager iteration is profiled
  first, and each replay's sequence of kernel names is aligned to its sequence (``difflib``); a
  kernel without a twin, or launched outside the layer, is unclaimed (the account counts the
  kernels it named). An MXFP8 GEMM range's kernels are that GEMM's when their name
  is a GEMM's, else quantization.

An iteration's span on a GPU runs from its first kernel to the next iteration's first kernel (one
replay more than accounted is run), on a CPU over its range. The account of a rank is per iteration
of the run of consecutive profiled iterations, at most a timing window's, whose mean is nearest its
timed median (a window's mean is what the median is of; on a shared host a burst of other work moves
single iterations by tens of percent, often in two modes a window's mean lies between): its phases
and unclaimed time, the run's means, add up to the profiled iteration it states; every span is kept.
"""

from __future__ import annotations

import difflib
import gzip
import math
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import torch
import torch.autograd.profiler as autograd_profiler
import torch.distributed as dist
from torch.autograd.profiler import record_function

from cutlass_kernels.torch_backend import GEMM_RANGE
from pipeline.base.vocabulary import GEMM_PHASES, LAYER_PHASES, UNCLAIMED, layer_phase
from pipeline.bench.steps import Steps
from pipeline.data.atomic import atomic_write
from pipeline.data.meta import RankAccount
from pipeline.moe import ranges

ITERATION_RANGE = "moe_bench:iteration"  # one accounted iteration
EAGER_RANGE = "moe_bench:eager"  # the eager iteration whose kernels name a graph's
PROFILE_MS = 100.0  # iterations are profiled until about this long (at least MIN_ITERATIONS)
MIN_ITERATIONS, MAX_ITERATIONS = 2, 10
# The names of GEMM kernels: the CuTe DSL's grouped GEMMs, cuBLAS's and CUTLASS's.
GEMM_KERNEL = re.compile(r"gemm|nvjet|xmma|wgmma|grouped_mm", re.IGNORECASE)


@dataclass(frozen=True)
class Event:
    """One event of the profiler's table: an op or a range on a host thread, or a kernel (``device``),
    times in microseconds; ``seq`` the autograd sequence number (-1: none), ``forward_thread`` the
    thread of the forward op a backward node belongs to (0 on forward ops), ``correlation`` the
    event's own id and ``linked`` the launching op's (kernels)."""

    name: str
    thread: int
    start: float
    end: float
    seq: int = -1
    forward_thread: int = 0
    correlation: int = 0
    linked: int = 0
    device: bool = False


@dataclass(frozen=True)
class Context:
    """What an event is part of: the layer phase (None: none), inside an MXFP8 GEMM's range, inside a
    GEMM op."""

    phase: str | None = None
    mx: bool = False
    gemm: bool = False

    def host_phase(self) -> str | None:
        """The phase of a host event's own time."""
        return "quantize" if self.mx and not self.gemm else self.phase

    def kernel_phase(self, kernel: str) -> str | None:
        """The phase of a kernel this event launched."""
        if self.mx and not self.gemm and not GEMM_KERNEL.search(kernel):
            return "quantize"
        return self.phase


NONE = Context()


@dataclass
class Iteration:
    """One profiled iteration: its span (microseconds), each phase's time and the unclaimed time; on
    a GPU also its kernels and how many had an eager twin to name them."""

    span: float
    phases: dict[str, float] = field(default_factory=dict)
    unclaimed: float = 0.0
    kernels: int | None = None
    named: int | None = None


def contexts(events: Sequence[Event], made: Sequence[tuple[str, int, int]] = ()) -> dict[int, Context]:
    """The context of every host event (by index), from the ranges around it, in time order over all
    threads; a backward node outside any range takes the phase of the forward range that made it
    (``made``: :data:`pipeline.moe.ranges.MADE`)."""
    order = sorted(
        (i for i, e in enumerate(events) if not e.device), key=lambda i: (events[i].start, -events[i].end)
    )
    stacks: dict[int, list[tuple[float, Context]]] = {}
    out: dict[int, Context] = {}
    for i in order:
        e = events[i]
        stack = stacks.setdefault(e.thread, [])
        while stack and stack[-1][0] <= e.start:
            stack.pop()
        parent = stack[-1][1] if stack else NONE
        ctx = _derive(parent, e, made)
        out[i] = ctx
        stack.append((e.end, ctx))
    return out


def _derive(parent: Context, e: Event, made: Sequence[tuple[str, int, int]]) -> Context:
    named = layer_phase(e.name)
    if named is not None:
        return Context(named[0], named[1])
    if e.name == GEMM_RANGE and parent.phase in GEMM_PHASES:
        return Context(parent.phase, parent.mx, gemm=True)
    if e.seq >= 0 and e.forward_thread != 0 and parent.phase is None:  # a backward node, unranged
        return Context(maker(e.seq, made))
    return parent


def maker(seq: int, made: Sequence[tuple[str, int, int]]) -> str | None:
    """The phase of the innermost forward range that made autograd node ``seq`` (None: none did)."""
    around = [(first, -past, name) for name, first, past in made if first <= seq < past]
    if not around:
        return None
    named = layer_phase(max(around)[2])
    return None if named is None else named[0]


def partition(start: float, end: float, claims: Iterable[tuple[float, float, str | None]]) -> Iteration:
    """[start, end) divided among ``claims`` (start, end, phase; None: unclaimed), sorted by start
    then longest first: each instant goes to the claim that began last of those covering it, and no
    claim's to unclaimed; the parts add up to ``end - start``."""
    out = Iteration(span=end - start)
    cursor, stack = start, list[tuple[float, str | None]]()

    def give(until: float, phase: str | None) -> None:
        nonlocal cursor
        until = min(max(until, cursor), end)
        key = UNCLAIMED if phase is None else phase
        if key == UNCLAIMED:
            out.unclaimed += until - cursor
        else:
            out.phases[key] = out.phases.get(key, 0.0) + until - cursor
        cursor = until

    for c_start, c_end, phase in claims:
        if c_end <= start or c_start >= end:
            continue
        while stack and stack[-1][0] <= c_start:
            closing = stack.pop()
            give(closing[0], closing[1])
            while stack and stack[-1][0] <= cursor:
                stack.pop()
        give(c_start, stack[-1][1] if stack else None)
        stack.append((c_end, phase))
    while stack:
        closing = stack.pop()
        give(closing[0], closing[1])
        while stack and stack[-1][0] <= cursor:
            stack.pop()
    give(end, None)
    return out


def host_iterations(events: Sequence[Event], ctx: dict[int, Context]) -> list[Iteration]:
    """Each iteration range's account from the host events of its thread (CPUs)."""
    ranges = sorted((e for e in events if e.name == ITERATION_RANGE and not e.device), key=lambda e: e.start)
    out = []
    for it in ranges:
        claims = sorted(
            (
                (e.start, e.end, ctx[i].host_phase())
                for i, e in enumerate(events)
                if not e.device and e.thread == it.thread and e is not it and it.start <= e.start < it.end
            ),
            key=lambda c: (c[0], -c[1]),
        )
        out.append(partition(it.start, it.end, claims))
    return out


def device_iterations(events: Sequence[Event], ctx: dict[int, Context], graphs: bool) -> list[Iteration]:
    """Each iteration's account from the kernels (GPUs): the iterations begin at their first kernels,
    and the last iteration profiled only ends the one before it. With ``graphs`` the kernels are named
    by their twins in the eager iteration (:data:`EAGER_RANGE`), else by the ops that launched them."""
    host = [(e.start, e.end, e.name, i) for i, e in enumerate(events) if not e.device]
    ranges = sorted((s, t, n) for s, t, n, _ in host if n in (ITERATION_RANGE, EAGER_RANGE))
    launcher = {events[i].correlation: i for _, _, _, i in host if events[i].linked == 0}

    def where(kernel: Event) -> int | None:
        """The range (by index) whose time holds the host event that launched ``kernel``."""
        i = launcher.get(kernel.linked)
        if i is None:
            return None
        at = events[i].start
        return next((r for r, (s, t, _) in enumerate(ranges) if s <= at <= t), None)

    def launched(kernel: Event) -> str | None:
        i = launcher.get(kernel.linked)
        return None if i is None else ctx.get(i, NONE).kernel_phase(kernel.name)

    kernels = sorted((e for e in events if e.device), key=lambda e: (e.start, -e.end))
    placed = [(k, where(k)) for k in kernels]
    eager = [k for k, r in placed if r is not None and ranges[r][2] == EAGER_RANGE]
    twins = {id(k) for k in eager}
    firsts: dict[int, float] = {}
    for k, r in placed:
        if r is not None and ranges[r][2] == ITERATION_RANGE:
            firsts.setdefault(r, k.start)
    starts = sorted(firsts.values())
    out = []
    twin_phases = [launched(k) for k in eager]
    for begin, stop in zip(starts, starts[1:], strict=False):
        mine = [k for k in kernels if begin <= k.start < stop and id(k) not in twins]
        if graphs:
            phases, named = _aligned([k.name for k in eager], twin_phases, [k.name for k in mine])
        else:
            phases = [launched(k) for k in mine]
            named = sum(k.linked in launcher for k in mine)
        # a kernel no op and no twin names, or one launched outside the layer, is unclaimed
        it = partition(begin, stop, [(k.start, k.end, p) for k, p in zip(mine, phases, strict=True)])
        it.kernels, it.named = len(mine), named
        out.append(it)
    return out


def _aligned(eager: list[str], phases: list[str | None], replayed: list[str]) -> tuple[list[str | None], int]:
    """The phase of each replayed kernel from its twin in the eager sequence (the same kernel name at
    the aligned place), None where it has none; and how many had one."""
    out: list[str | None] = [None] * len(replayed)
    named = 0
    matcher = difflib.SequenceMatcher(None, eager, replayed, autojunk=False)
    for block in matcher.get_matching_blocks():
        for j in range(block.size):
            out[block.b + j] = phases[block.a + j]
            named += 1
    return out, named


def nearest(iterations: Sequence[Iteration], timed_ms: float, window: int) -> tuple[int, int]:
    """(first, length) of the run of consecutive iterations, at most ``window`` long (the timing
    window's iterations), whose mean span is nearest ``timed_ms`` (the rank's timed median: the median
    of windows' means); of runs as near, the longer. A host's noise moves single iterations, often in
    two modes a window's mean lies between, and the account is of the run most like a window timed."""
    if not iterations:
        raise ValueError("no iteration was profiled")
    spans = [it.span / 1e3 for it in iterations]
    runs = [
        (abs(sum(spans[i : i + n]) / n - timed_ms), -n, i)
        for n in range(1, min(window, len(spans)) + 1)
        for i in range(len(spans) - n + 1)
    ]
    _, length, first = min(runs)
    return first, -length


def count(iteration_ms: float, device: torch.device) -> int:
    """How many iterations to profile, the same on every rank (one collective): as many as last about
    PROFILE_MS on the slowest rank, within MIN_ITERATIONS and MAX_ITERATIONS."""
    want = min(MAX_ITERATIONS, max(MIN_ITERATIONS, math.ceil(PROFILE_MS / max(iteration_ms, 1e-3))))
    agreed = torch.tensor([want], device=device)
    if dist.is_initialized():
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return int(agreed.item())


def profiled(
    steps: Steps,
    eager: Steps,
    device: torch.device,
    iterations: int,
    trace: Callable[[Path], None] | None = None,
) -> tuple[list[Iteration], str | None]:
    """Profile ``iterations`` iterations of ``steps`` (on a GPU one more, and first one iteration of the
    ``eager`` steps when ``steps`` replay graphs) and account each; ``trace`` receives the profile as a
    Chrome trace file. Every rank runs the same iterations whatever its profiler does; a profiler that
    cannot run leaves the iterations unaccounted and says why."""
    cuda = device.type == "cuda"
    runs = iterations + (1 if cuda else 0)
    try:
        session = _Session(cuda)
    except Exception as err:  # no profiler here: the same work, unaccounted
        for _ in range(runs + (1 if cuda and steps.graphs else 0)):
            steps.iteration()
        return [], f"the profiler did not start: {type(err).__name__}: {err}"
    with session:
        if cuda and steps.graphs:
            with record_function(EAGER_RANGE):
                eager.iteration()
            torch.cuda.synchronize(device)
        for _ in range(runs):
            with record_function(ITERATION_RANGE):
                steps.iteration()
        if cuda:
            torch.cuda.synchronize(device)
    events = _events(session.result)
    if trace is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            session.result.save(str(path))
            trace(path)
    ctx = contexts(events, session.made)
    found = device_iterations(events, ctx, steps.graphs) if cuda else host_iterations(events, ctx)
    return found, None


class _Session:
    """torch.profiler's engine (kineto) recording the user-scope ranges and the autograd backward
    nodes, and kernels on a GPU; started on construction (a ValueError or RuntimeError where it cannot
    be), stopped on exit, its events in ``result`` and the ranges' sequence numbers in ``made``."""

    def __init__(self, cuda: bool) -> None:
        from torch._C._profiler import RecordScope
        from torch.autograd import _enable_profiler, _prepare_profiler

        # torch.profiler's own configuration and activities, as its profile context would start them
        engine = autograd_profiler.profile(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True)
        config, activities = engine.config(), engine.kineto_activities
        _prepare_profiler(config, activities)
        ranges.MADE.clear()
        autograd_profiler._run_on_profiler_start()  # the layers' ranges record from now on
        try:
            # the scopes argument (pybind's since torch 1.10) is missing from torch's stub
            scopes = {RecordScope.USER_SCOPE, RecordScope.BACKWARD_FUNCTION}
            _enable_profiler(config, activities, scopes)  # type: ignore[call-arg]
        except BaseException:
            autograd_profiler._run_on_profiler_stop()
            raise
        self.result: Any = None
        self.made: list[tuple[str, int, int]] = []

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        from torch.autograd import _disable_profiler

        try:
            self.result = _disable_profiler()
        finally:
            autograd_profiler._run_on_profiler_stop()
            self.made = list(ranges.MADE)
            ranges.MADE.clear()


# Device events that are no work of the device: the device-side images of the host's ranges (kineto's
# ``gpu_user_annotation``, named as the ranges are). Kernels, copies and fills count.
_RANGES = (ITERATION_RANGE, EAGER_RANGE, GEMM_RANGE)


def _events(result: Any) -> list[Event]:
    """The profiler's event table (its result's ``events()``) as :class:`Event` records: host events
    that begin and end on one thread, and the device's kernels, copies and fills."""
    out = []
    for e in result.events():
        device = e.device_type() != torch.autograd.DeviceType.CPU
        name = e.name()
        if device:
            activity = str(getattr(e, "activity_type", lambda: "")())
            if "annotation" in activity or name in _RANGES or layer_phase(name) is not None:
                continue
        elif e.start_thread_id() != e.end_thread_id() or e.is_async():
            continue  # an event that ends on another thread is no part of a thread's nesting
        out.append(
            Event(
                name=name,
                thread=e.start_thread_id(),
                start=e.start_ns() / 1e3,
                end=e.end_ns() / 1e3,
                seq=e.sequence_nr(),
                forward_thread=e.fwd_thread_id(),
                correlation=e.correlation_id(),
                linked=e.linked_correlation_id(),
                device=device,
            )
        )
    return out


def rank_account(
    rank: int, found: list[Iteration], routed_rows: tuple[int, ...], timed_ms: float, window: int
) -> RankAccount:
    """This rank's account: per iteration, the mean of its profiled run nearest its timed median
    ``timed_ms`` (:func:`nearest`), in ms."""
    first, length = nearest(found, timed_ms, window)
    run = found[first : first + length]
    kernels = [it.kernels for it in run]
    named = [it.named for it in run]
    return RankAccount(
        rank=rank,
        iterations=len(found),
        spans_ms=tuple(i.span / 1e3 for i in found),
        first=first,
        length=length,
        profiled_ms=sum(it.span for it in run) / length / 1e3,
        phases={p: sum(it.phases.get(p, 0.0) for it in run) / length / 1e3 for p in LAYER_PHASES},
        unclaimed_ms=sum(it.unclaimed for it in run) / length / 1e3,
        routed_rows=routed_rows,
        kernels=None if None in kernels else round(sum(k for k in kernels if k is not None) / length),
        named_kernels=None if None in named else round(sum(n for n in named if n is not None) / length),
    )


def gzipped(source: Path, target: Path) -> None:
    """``source`` compressed into ``target``, whole or not at all."""

    def write(out: BinaryIO) -> None:
        with open(source, "rb") as f, gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as g:
            shutil.copyfileobj(f, g)

    atomic_write(target, write)
