"""A group's job: one process per rank runs the group's executions one after another.

Imports, the device, the process group and its first collective are paid once per job, each kernel
is compiled once (the backends cache them in the process), and the weights are drawn once for the
executions that share them (:class:`pipeline.bench.work.Shared`); everything else an execution holds
is let go before the next, whose memory peaks start afresh. Each execution stays a unit of record:
its own ledger events, correctness gate, warm-up, windows and shard (:func:`execute`).

A failure costs one execution: a rank whose execution raises breaks the process group at once (so no
other rank waits in a collective for it), every rank then says through the job's store how its
execution ended, rank 0 records the failure (the earliest error of any rank), every rank joins a
fresh process group and the group goes on. A hang costs at most the rest of the group: every rank
watches its execution against the deadline the plan gave it; past it, rank 0 records the execution
as failed (hung) and every rank ends the job, leaving the members that never started missing, for
``pipeline.resubmit``. A rank that dies (killed, out of memory) ends its execution at once: the
watchdog of every other rank on its host sees its process gone (:class:`pipeline.bench.tether.Peers`),
the lowest rank left records the execution as failed naming the dead rank, and the job ends as after
a hang.

Rank 0 of a local job keeps the job's heartbeat beside its sweep's (:mod:`pipeline.data.claims`):
another host, which cannot see the job's processes, knows by it that the job still runs, and that the
sweep owns what it claimed even while the sweep itself is silent.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
import time
import traceback

import submitit
import torch
import torch.distributed as dist

from pipeline.bench import distributed
from pipeline.bench.diagnostics import versions
from pipeline.bench.execute import Phases, execute
from pipeline.bench.spec import JobSpec, Summary
from pipeline.bench.tether import POLL_S, Peer, Peers, tether
from pipeline.bench.work import Shared
from pipeline.data import claims, ledger

HUNG_EXIT = 3  # the job's exit status when an execution passed its deadline
DEAD_RANK_EXIT = 4  # the job's exit status when a rank died while an execution ran
GRACE_S = 10.0  # the ranks but rank 0 end a hung job this much after its deadline: rank 0 says why


def run_group(specs: list[JobSpec], debug: bool = False) -> list[Summary | None]:
    """Body of each task of a group's job: its executions in order; rank 0's summaries, else Nones.
    A failed execution is recorded (its traceback in the rank's log) and the group goes on; the job
    then ends in :class:`GroupFailed`. With ``debug`` (one rank, in the sweep's own process) the
    failed execution's error is raised where it happened, once recorded: a post-mortem opens there."""
    if not specs:
        raise ValueError("a group holds at least one execution")
    with contextlib.ExitStack() as beating:
        if specs[0].backend == "local":
            tether()  # a sweep or a controller killed outright takes its ranks with it
            env = submitit.JobEnvironment()
            if env.global_rank == 0 and specs[0].owner is not None:
                name = claims.job_beat_name(specs[0].owner, env.job_id)
                beating.enter_context(claims.Heartbeat(specs[0].dataset, name))
        return _run(specs, debug)


def _run(specs: list[JobSpec], debug: bool) -> list[Summary | None]:
    phases = Phases()
    timeout = max(s.deadline_s for s in specs)
    with phases("init"):  # the device and the process group
        ctx = distributed.init(specs[0].device, timeout, specs[0].log_dir, specs[0].attempt)
    if ctx.rank == 0:  # where the job's ranks ran and how they talk, once per job, in its log
        talk = {"collective": ctx.collective, "nccl": versions(ctx.device).nccl}
        print(f"topology {json.dumps(talk | ctx.topology.to_json())}", flush=True)
    results: list[Summary | None] = []
    failed: list[str] = []
    shared, round_ = Shared(), 0
    try:
        with phases("connect"):  # the first collective: NCCL builds its communicator here
            dist.barrier()
        assert ctx.store is not None
        peers = Peers.exchange(ctx.store, ctx.rank, ctx.world_size)
        for index, spec in enumerate(specs):
            if index:
                phases = Phases(first=False)
            summary, error, raised = None, None, None
            with Watchdog(ctx, spec, peers):
                try:
                    summary = execute(ctx, spec, phases, shared)
                except Exception as err:  # this rank's; the group agrees on it below
                    error, raised = (time.time(), f"{type(err).__name__}: {err}"), err
                    print(f"{spec.execution_id} failed on rank {ctx.rank}:", file=sys.stderr, flush=True)
                    traceback.print_exc()  # into the rank's log: where it failed
                    distributed.abort()  # no other rank waits for this one in a collective
                except BaseException as err:  # the job is being stopped (a requeue, a signal): so is this
                    # unless the requeue recorded it first (pipeline.launch.slurm)
                    if ctx.rank == 0 and not ledger.ended(
                        ledger.read(spec.dataset), spec.execution_id, spec.attempt
                    ):
                        _record_failure(spec, ctx.job_id, [(time.time(), 0, f"{type(err).__name__}: {err}")])
                    raise
                failures = agree(ctx, index, error)
            if failures:
                if ctx.rank == 0:
                    _record_failure(spec, ctx.job_id, failures)
                if debug and raised is not None:
                    raise raised
                round_ += 1
                distributed.rejoin(ctx, round_)
                summary = None
            elif ctx.rank == 0:
                print(phases.line(spec.execution_id), flush=True)
            if failures:
                failed.append(spec.execution_id)
            results.append(summary)
            gc.collect()  # what this execution held is gone before the next one builds
            if ctx.device.type == "cuda":
                torch.cuda.empty_cache()
        dist.barrier()
    finally:
        distributed.close()
    if failed:  # the job's own status says so too (a scheduler's accounting, an operator's eye)
        raise GroupFailed(f"{len(failed)} of {len(specs)} executions failed: {', '.join(failed)}")
    return results


class GroupFailed(RuntimeError):
    """Some executions of the group failed (each recorded in the ledger with its own reason); the
    others ran and published."""


def agree(
    ctx: distributed.Context, index: int, error: tuple[float, str] | None
) -> list[tuple[float, int, str]]:
    """How execution ``index`` ended on every rank, through the job's store (the process group may
    be broken): each rank's error as (when, rank, what), earliest first; empty when none failed."""
    assert ctx.store is not None
    key = f"ended-{index}"
    ctx.store.set(f"{key}/{ctx.rank}", json.dumps(error))
    keys = [f"{key}/{r}" for r in range(ctx.world_size)]
    ctx.store.wait(keys)  # bounded by the execution's watchdog
    said = [json.loads(ctx.store.get(k)) for k in keys]
    return sorted((when, rank, what) for rank, e in enumerate(said) if e is not None for when, what in [e])


def _record_failure(spec: JobSpec, job_id: str, failures: list[tuple[float, int, str]]) -> None:
    """Rank 0: the execution failed with the earliest error of any rank (later ones follow from it)."""
    _, rank, what = failures[0]
    reason = what if rank == 0 else f"{what} (rank {rank})"
    ledger.append(spec.dataset, ledger.Failed(spec.execution_id, spec.attempt, job_id, reason=reason))


class Watchdog:
    """While ``spec`` runs: a peer rank of this host that died ends the execution at once (the lowest
    rank left records it as failed, naming the dead one); past the deadline rank 0 records it as
    failed (hung). Either way every rank ends the job: a kernel or a collective that never returns
    cannot be interrupted from inside. The ranks but rank 0 wait :data:`GRACE_S` longer at a
    deadline, so that rank 0, not a rank that saw it go, says why the job ended."""

    def __init__(self, ctx: distributed.Context, spec: JobSpec, peers: Peers) -> None:
        self.ctx, self.spec, self.peers, self.done = ctx, spec, peers, threading.Event()
        self.thread = threading.Thread(target=self._watch, name="deadline", daemon=True)

    def __enter__(self) -> Watchdog:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _watch(self) -> None:
        ends = time.monotonic() + self.spec.deadline_s + (GRACE_S if self.ctx.rank else 0.0)
        while not self.done.wait(max(0.0, min(POLL_S, ends - time.monotonic()))):
            if (dead := self.peers.dead()) is not None:
                self._end_for(dead)
            if time.monotonic() >= ends:
                self._end_hung()

    def _end_hung(self) -> None:
        if self.ctx.rank == 0:
            reason = f"still running after {self.spec.deadline_s:g} s, its deadline: hung"
            self._record(reason, "the job ends")
        os._exit(HUNG_EXIT)

    def _end_for(self, dead: Peer) -> None:
        if self.peers.says(dead):
            records = ledger.read(self.spec.dataset)
            if not ledger.ended(records, self.spec.execution_id, self.spec.attempt):  # not ended by rank 0
                reason = f"rank {dead.rank} (pid {dead.pid} on {dead.host}) died while it ran"
                self._record(reason, "the job ends")
        os._exit(DEAD_RANK_EXIT)

    def _record(self, reason: str, then: str) -> None:
        spec = self.spec
        record = ledger.Failed(spec.execution_id, spec.attempt, self.ctx.job_id, reason=reason)
        try:
            ledger.append(spec.dataset, record)
        finally:
            print(f"{spec.execution_id}: {reason}; {then}", flush=True)
