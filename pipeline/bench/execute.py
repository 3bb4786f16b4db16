"""One execution, run by every task of its group's job: time the layers, collect diagnostics, and let
rank 0 write the shard. A failure raises; the group (:mod:`pipeline.bench.group`) records it."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch.distributed as dist

from cutlass_kernels import compiles
from pipeline import REPO_ROOT
from pipeline.base.metrics import phase_ms
from pipeline.base.saved_state import LayerState, SavedState
from pipeline.bench import account, conditions, contention, distributed, graphs, nvlink, sanity
from pipeline.bench.diagnostics import (
    device_name,
    git_sha,
    peak_allocated_bytes,
    peak_rss_bytes,
    process_age_s,
    reset_peaks,
    versions,
)
from pipeline.bench.kernels import kernels
from pipeline.bench.plants import planted, slowed
from pipeline.bench.spec import JobSpec, Summary
from pipeline.bench.steps import Steps
from pipeline.bench.timing import Clock, calibrated, time_windows
from pipeline.bench.work import Shared, build_work
from pipeline.data import ledger
from pipeline.data.meta import (
    Account,
    Conditions,
    ExecutionMeta,
    Memory,
    NVLink,
    Provenance,
    RankAccount,
    Timing,
)
from pipeline.data.schema import Identity, RankWindows
from pipeline.data.writer import write_shard
from pipeline.moe import ranges

NVLINK_SAMPLE_S = 1.0


@dataclass(frozen=True)
class RankResult:
    """What one rank measured, gathered on rank 0 for the shard."""

    windows: RankWindows
    host: str
    cpu_wait_share: float | None
    saved_state: list[SavedState]
    nvlink: NVLink
    peak_allocated_bytes: int | None
    peak_rss_bytes: int
    conditions: Conditions  # the GPU's clocks, throttling and sharing during the windows
    account: RankAccount | str  # its phase account, or why it has none


def execute(ctx: distributed.Context, spec: JobSpec, phases: Phases, shared: Shared) -> Summary | None:
    """One execution on this rank of its group's job (:mod:`pipeline.bench.group`): build, gate, time
    and record it, rank 0 writing its ledger records and its shard. Returns rank 0's summary, else
    None; raises on a failure (the group records it once its ranks agree)."""
    execution_id, dataset, shape = spec.execution_id, spec.dataset, spec.shape
    if ctx.world_size != shape.ranks:
        raise ValueError(f"the job has {ctx.world_size} tasks but {execution_id} needs {shape.ranks}")
    reset_peaks(ctx.device)  # this execution's own peaks, whatever ran before it in the group
    if ctx.rank == 0:
        ledger.append(dataset, ledger.Started(execution_id, spec.attempt, ctx.job_id))
    started_at = ledger.now()
    with phases("build"):
        work = build_work(spec.execution, shape, ctx.rank, ctx.device, spec.seed, shared)
    ranges.slow(slowed(execution_id, ctx.rank))  # a slow phase a test plants; else none
    with phases("gate"), planted(execution_id, ctx.rank):  # a fault a test plants (bench.plants)
        case = (work.xs[0], *work.routes[0]) if spec.check == "case" else None
        verdict = sanity.gate(work.stack, work.grads is not None, spec.seed, case=case)
    clock = Clock(ctx.device)
    with phases("capture"):
        steps = graphs.capture(work.steps(), ctx.device, spec.timing.warmup)
    with phases("calibrate"):
        plan = calibrated(spec.timing, steps, clock)
    with phases("windows"), contention.sampled() as host:
        with conditions.sampled(ctx.device, ctx.hostname, ctx.rank) as gpu:
            times = time_windows(steps, clock, plan)
    ended_at = ledger.now()
    combined_ms = float(np.median(times["combined"])) / plan.iterations
    repetitions = nvlink.repetitions(combined_ms, NVLINK_SAMPLE_S, ctx.device)
    saved = work.saved_state()
    rates = nvlink.nvlink_rates(ctx.device, steps.iteration, repetitions)
    peaks = peak_allocated_bytes(ctx.device), peak_rss_bytes()  # before the account's eager iteration
    keep = spec.keep_traces
    with phases("account"):
        accounted = rank_account(ctx, spec, steps, work.steps(), (combined_ms, plan.iterations), saved, keep)
    mine = RankResult(
        windows=RankWindows(ctx.rank, ctx.job_id, device_name(ctx.device), times),
        host=ctx.hostname,
        cpu_wait_share=host.wait_share(),
        saved_state=saved,
        nvlink=rates,
        peak_allocated_bytes=peaks[0],
        peak_rss_bytes=peaks[1],
        conditions=gpu.record(),
        account=accounted,
    )
    gathered: list[RankResult | None] = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine)
    ranks = [r for r in gathered if r is not None]
    summary = None
    if ctx.rank == 0:
        meta = ExecutionMeta(
            schema_version=ExecutionMeta.VERSION,
            execution_id=execution_id,
            workload_id=spec.execution.workload_id,
            attempt=spec.attempt,
            job_id=ctx.job_id,
            config=spec.config,
            shape=shape,
            provenance=Provenance(
                git_sha=git_sha(REPO_ROOT),
                hosts=tuple(sorted({r.host for r in ranks})),
                job_ids=tuple(sorted({r.windows.job_id for r in ranks})),
                backend=spec.backend,
                cluster=spec.cluster,
                collective=ctx.collective,
                versions=versions(ctx.device),
            ),
            started_at=started_at,
            ended_at=ended_at,
            timing=Timing(clock.name, steps.graphs, steps.reason, requested=spec.timing, plan=plan),
            kernels=kernels(work.config, ctx.device, work.grads is not None),
            contention=contention.contention(
                [r.cpu_wait_share for r in ranks], ctx.world_size // len({r.host for r in ranks})
            ),
            memory=Memory(
                peak_allocated_bytes=_max(r.peak_allocated_bytes for r in ranks),
                peak_rss_bytes=_max(r.peak_rss_bytes for r in ranks),
                emulation=work.emulation_copies(),
            ),
            nvlink=nvlink.averaged([r.nvlink for r in ranks]),
            saved_state=layer_states(shape.layer_loads, ranks[0].saved_state),
            sanity=verdict,
            policy=work.policy(),
            conditions=conditions.merged([r.conditions for r in ranks]),
            account=merged_account([r.account for r in ranks], keep),
            topology=ctx.topology,
        )
        identity = Identity.of(spec.execution, shape.ranks, plan.iterations, spec.attempt)
        path = write_shard(dataset, identity, [r.windows for r in ranks], meta)
        summary = Summary(str(path), iteration_ms([r.windows for r in ranks], plan.iterations))
        shard = dataset.relative(path)
        ledger.append(
            dataset,
            ledger.Finished(
                execution_id, spec.attempt, ctx.job_id, shard=shard, iteration_ms=summary.iteration_ms
            ),
        )
    return summary


class Phases:
    """Wall seconds of each part of an execution on this rank, with the process's age when it began
    (interpreter start, imports, the job's unpickling), the kernel compiles inside the parts and the
    kernels loaded from the kernel cache instead: where an execution's time goes besides its windows,
    one line in the job's log."""

    def __init__(self, first: bool = True) -> None:
        # the process's start counts for the first execution of a group; the later ones share it
        self.seconds: dict[str, float] = {"process": process_age_s() if first else 0.0}
        self.began = time.monotonic()
        self.compiled = compiles.spent()  # what earlier executions of the group compiled is theirs
        self.loaded = compiles.loads()[1]  # and the kernels they loaded from the kernel cache

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = time.monotonic() - began

    def line(self, execution_id: str) -> str:
        compiling, kernels = (
            now - before for now, before in zip(compiles.spent(), self.compiled, strict=True)
        )
        timed = sum(v for k, v in self.seconds.items() if k != "process")
        parts = {**self.seconds, "record": time.monotonic() - self.began - timed, "compile": compiling}
        rounded = {k: round(v, 3) for k, v in parts.items()}
        loads = compiles.loads()[1] - self.loaded
        return f"phases {execution_id} " + json.dumps({**rounded, "compiles": kernels, "loads": loads})


def rank_account(
    ctx: distributed.Context,
    spec: JobSpec,
    steps: Steps,
    eager: Steps,
    timed: tuple[float, int],
    saved: list[SavedState],
    keep: bool,
) -> RankAccount | str:
    """This rank's phase account (:mod:`pipeline.bench.account`) of a few iterations replayed after the
    windows (``timed``: this rank's timed median and the iterations of a window), its profile kept in
    the dataset when ``keep``; or why it has none."""
    combined_ms, window = timed
    iterations = account.count(combined_ms, ctx.device)
    where = spec.dataset.trace_path(spec.execution_id, spec.attempt, ctx.rank)

    def trace(path: Path) -> None:
        try:  # only into the layout's own folder, inside the dataset (never through a link out)
            account.gzipped(path, spec.dataset.check_folder(where.parent) / where.name)
        except (OSError, ValueError) as err:  # a profile not kept costs the account nothing
            print(f"{spec.execution_id}: rank {ctx.rank}'s profile not kept: {err}", flush=True)

    found, why = account.profiled(steps, eager, ctx.device, iterations, trace if keep else None)
    if why is not None:
        return why
    try:
        return account.rank_account(ctx.rank, found, tuple(s.routed_rows for s in saved), combined_ms, window)
    except ValueError as err:  # an iteration the profile did not show whole
        return f"no account: {err}"


def merged_account(per_rank: list[RankAccount | str], traces: bool) -> Account:
    """Every rank's account, and the first reason a rank has none."""
    why = next((a for a in per_rank if isinstance(a, str)), None)
    return Account(tuple(a for a in per_rank if not isinstance(a, str)), why, traces)


def iteration_ms(ranks: list[RankWindows], iterations: int) -> dict[str, float]:
    """Slowest-rank median iteration time per phase (the published reduction)."""
    cells = [(phase, r.rank, ms) for r in ranks for phase, windows in r.times.items() for ms in windows]
    phase, rank, window_ms = (np.array(column) for column in zip(*cells, strict=True))
    return phase_ms(phase, rank, window_ms, np.full(window_ms.size, iterations))


def layer_states(loads: tuple[float, ...], states: list[SavedState]) -> tuple[LayerState, ...]:
    """Rank 0's (the tracked GPU's) state per timed layer; factors in units of the nominal T x K rows."""
    return tuple(
        LayerState(**asdict(s), layer=i, load_factor=load)
        for i, (s, load) in enumerate(zip(states, loads, strict=True))
    )


def _max(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None
