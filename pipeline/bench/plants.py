"""Faults planted in a group's execution, so that what a failure, a hang and a slow phase cost can be
shown on the real processes, process group and ledger (``MOE_BENCH_PLANT=KIND:EXECUTION_ID:RANK``, in
the environment the jobs inherit; several separated by commas). ``error`` raises on that rank as the
execution's gate begins, while the other ranks enter its collectives; ``hang`` sleeps there for good;
``slow-<phase>`` (a layer phase, e.g. ``slow-combine``) makes that phase :data:`SLOW_S` longer on that
rank every time it runs, timed windows and phase account alike (:func:`pipeline.moe.ranges.slow`).
Nothing is planted unless the variable names the execution."""

from __future__ import annotations

import os
import time

from pipeline.base.vocabulary import LAYER_PHASES

PLANT_ENV = "MOE_BENCH_PLANT"
SLOW = "slow-"
KINDS = ("error", "hang", *(f"{SLOW}{p}" for p in LAYER_PHASES))
SLOW_S = 0.04  # a slow phase's extra seconds each time it runs: far above a CPU host's noise


class PlantedError(RuntimeError):
    """The planted failure of one rank."""


def planted(execution_id: str, rank: int) -> None:
    """Apply an error or a hang planted for ``execution_id`` on ``rank``, if any; a ValueError for a
    plant that names no kind of :data:`KINDS`."""
    for kind in _mine(execution_id, rank):
        if kind.startswith(SLOW):
            continue
        if kind == "error":
            raise PlantedError(f"planted error on rank {rank}")
        while True:
            time.sleep(3600)


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
