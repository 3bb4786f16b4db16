"""Faults planted in a group's execution, so that what a failure and a hang cost can be shown on the
real processes, process group and ledger (``MOE_BENCH_PLANT=KIND:EXECUTION_ID:RANK``, in the
environment the jobs inherit; several separated by commas). ``error`` raises on that rank as the
execution's gate begins, while the other ranks enter its collectives; ``hang`` sleeps there for good;
``hold`` waits there while the file ``MOE_BENCH_HOLD`` names exists (a test keeps an execution
running for as long as it needs, then lets it go on). Nothing is planted unless the variable names
the execution."""

from __future__ import annotations

import os
import time

PLANT_ENV = "MOE_BENCH_PLANT"
HOLD_ENV = "MOE_BENCH_HOLD"
KINDS = ("error", "hang", "hold")
HOLD_POLL_S = 0.1


class PlantedError(RuntimeError):
    """The planted failure of one rank."""


def planted(execution_id: str, rank: int) -> None:
    """Apply a fault planted for ``execution_id`` on ``rank``, if any; a ValueError for a plant
    that names no kind of :data:`KINDS`."""
    for text in filter(None, os.environ.get(PLANT_ENV, "").split(",")):
        kind, execution, where = (text.split(":") + ["", ""])[:3]
        if kind not in KINDS or not where.isdigit():
            raise ValueError(f"{PLANT_ENV} entry {text!r}: want KIND:EXECUTION_ID:RANK, KIND one of {KINDS}")
        if (execution, int(where)) != (execution_id, rank):
            continue
        if kind == "error":
            raise PlantedError(f"planted error on rank {rank}")
        if kind == "hold":
            held = os.environ.get(HOLD_ENV, "")
            if not held:
                raise ValueError(f"{PLANT_ENV} entry {text!r}: a hold waits on the file {HOLD_ENV} names")
            while os.path.exists(held):
                time.sleep(HOLD_POLL_S)
            continue
        while True:
            time.sleep(3600)
