"""Faults planted in a group's execution, so that what a failure, a hang, a wrong exchange and a slow
phase cost can be shown on the real processes, process group and ledger
(``MOE_BENCH_PLANT=KIND:EXECUTION_ID:RANK``, in the environment the jobs inherit; several separated by
commas). The first five act on that rank while the execution's correctness gate runs: ``error``
raises as the gate begins, while the other ranks enter its collectives; ``hang`` sleeps there for good;
``hold`` waits there while the file ``MOE_BENCH_HOLD`` names exists (a test keeps an execution running
for as long as it needs, then lets it go on); ``split`` counts one row the rank receives to the next
of its experts (the all-to-all's splits per source stay whole, the experts' groups are off by one
row); ``perm`` regroups the received rows off by one row (on more than one rank, where rows are
regrouped). ``slow-<phase>`` (a layer phase, e.g. ``slow-combine``) makes that phase :data:`SLOW_S`
longer on that rank every time it runs, timed windows and phase account alike
(:func:`pipeline.moe.ranges.slow`).
Nothing is planted unless the variable names the execution."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch

from pipeline.base.vocabulary import LAYER_PHASES
from pipeline.moe.dispatch import DispatchPlan

PLANT_ENV = "MOE_BENCH_PLANT"
HOLD_ENV = "MOE_BENCH_HOLD"
HOLD_POLL_S = 0.1
SLOW = "slow-"
KINDS = ("error", "hang", "hold", "split", "perm", *(f"{SLOW}{p}" for p in LAYER_PHASES))
SLOW_S = 0.04  # a slow phase's extra seconds each time it runs: far above a CPU host's noise


class PlantedError(RuntimeError):
    """The planted failure of one rank."""


@contextlib.contextmanager
def planted(execution_id: str, rank: int) -> Iterator[None]:
    """Apply, for the block (the gate), a fault planted for ``execution_id`` on ``rank``, if any: an
    error, a hang, a hold, a wrong split or regrouping; a ValueError for a plant that names no kind of
    :data:`KINDS`."""
    kinds = [kind for kind in _mine(execution_id, rank) if not kind.startswith(SLOW)]
    if "error" in kinds:
        raise PlantedError(f"planted error on rank {rank}")
    while "hang" in kinds:
        time.sleep(3600)
    if "hold" in kinds:
        held = os.environ.get(HOLD_ENV, "")
        if not held:
            raise ValueError(f"{PLANT_ENV}: a hold of {execution_id} waits on the file {HOLD_ENV} names")
        while os.path.exists(held):
            time.sleep(HOLD_POLL_S)
    with contextlib.ExitStack() as stack:
        for kind in kinds:
            if kind in ("split", "perm"):
                stack.enter_context(_wrong_plans(wrong_split if kind == "split" else off_by_one))
        yield


def slowed(execution_id: str, rank: int) -> dict[str, float]:
    """The layer phases planted slow for ``execution_id`` on ``rank``, each with its extra seconds."""
    return {kind.removeprefix(SLOW): SLOW_S for kind in _mine(execution_id, rank) if kind.startswith(SLOW)}


def _mine(execution_id: str, rank: int) -> list[str]:
    """The kinds planted for ``execution_id`` on ``rank``; a ValueError for a plant of no kind."""
    kinds = []
    for text in filter(None, os.environ.get(PLANT_ENV, "").split(",")):
        kind, execution, where = (text.split(":") + ["", ""])[:3]
        if kind not in KINDS or not where.isdigit():
            raise ValueError(f"{PLANT_ENV} entry {text!r}: want KIND:EXECUTION_ID:RANK, KIND one of {KINDS}")
        if (execution, int(where)) == (execution_id, rank):
            kinds.append(kind)
    return kinds


def wrong_split(recv_counts: torch.Tensor) -> torch.Tensor:
    """What each source sends each local expert [W, E/W], with one row of the first source's first
    non-empty expert (that has a next one) counted to the next expert: each source's total stays."""
    counts = recv_counts.clone()
    for source, expert in (counts[:, :-1] > 0).nonzero().tolist()[:1]:
        counts[source, expert] -= 1
        counts[source, expert + 1] += 1
    return counts


def off_by_one(plan: DispatchPlan) -> DispatchPlan:
    """The plan with its regrouping of the received rows rolled by one row."""
    if plan.perm is None:
        return plan
    perm = plan.perm.roll(1)
    return replace(plan, perm=perm, perm_inverse=torch.argsort(perm))


@contextlib.contextmanager
def _wrong_plans(fault: Any) -> Iterator[None]:
    """Every dispatch plan built in the block, made wrong by ``fault``: a function of the received
    counts (:func:`wrong_split`) or of the plan (:func:`off_by_one`)."""
    original = DispatchPlan.__dict__["from_counts"]

    def from_counts(
        cls: type[DispatchPlan], topk_idx: torch.Tensor, send: torch.Tensor, recv: torch.Tensor, **kw: Any
    ) -> DispatchPlan:
        if fault is wrong_split:
            return original.__func__(cls, topk_idx, send, wrong_split(recv), **kw)
        return fault(original.__func__(cls, topk_idx, send, recv, **kw))

    DispatchPlan.from_counts = classmethod(from_counts)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        DispatchPlan.from_counts = original  # type: ignore[method-assign]
