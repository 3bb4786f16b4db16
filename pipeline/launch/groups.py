"""Which executions share one job: a sweep's plan packed into groups.

Every job pays for its start (a scheduler's queue, process start, imports, the device, the process
group, each kernel's compile) before its first timed window. So the executions of one resource shape
(nodes x tasks per node, GPUs or not, the device word) go out together, as many to a job as its time
allows: each group's estimated seconds (:func:`estimate_s`) stay within
:attr:`LaunchSettings.group_limit_s`, and at most ``group_size`` executions. In a group, executions of
one shape and seed run back to back (the weights they share are built once), in the plan's order
otherwise. ``group=none`` gives each execution a job of its own.

An execution's estimate is a nominal one per kind and scale (:data:`NOMINAL_S`), or, where the
dataset holds a valid shard of it, what that attempt took; its deadline (after which it counts as
hung) is a multiple of that, never less than :data:`DEADLINE_FLOOR_S`, or the launcher's
``deadline_s``. A ``deadline_s`` or a time limit shorter than an execution's estimate is one no job
could meet: :func:`check_limits` refuses it before anything is launched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from pipeline.bench.spec import JobSpec
from pipeline.data.dataset import Dataset
from pipeline.data.scan import scan_shards
from pipeline.launch.settings import LaunchSettings

# Seconds one execution takes from its job's start to its shard, by scale and kind: measured on this
# project's reference machines (scale=cpu on a 2-core host, scale=full on one H200: docs/performance.md)
# with room to spare; a scale not named here takes the full scale's.
NOMINAL_S = {
    ("ci", "inference"): 3.0,
    ("ci", "training"): 4.0,
    ("ci", "packing"): 6.0,
    ("cpu", "inference"): 6.0,
    ("cpu", "training"): 10.0,
    ("cpu", "packing"): 14.0,
    ("full", "inference"): 20.0,
    ("full", "training"): 30.0,
    ("full", "packing"): 240.0,
}
HISTORY_MARGIN = 1.5  # a measured attempt's seconds, times this, is the estimate
HISTORY_EXTRA_S = 2.0  # plus what its shard does not time (its start, the gate's compiles)
DEADLINE_FACTOR = 5.0  # an execution that takes this many times its estimate is hung
DEADLINE_FLOOR_S = 60.0
History = dict[tuple[Dataset, str], float]  # (dataset, execution id) -> seconds its last attempt took


@dataclass(frozen=True)
class Group:
    """Executions that one job runs, one after another, on ``nodes`` x ``per_node`` tasks."""

    members: tuple[JobSpec, ...]
    nodes: int
    per_node: int

    @property
    def dataset(self) -> Dataset:
        return self.members[0].dataset


def groups(planned: list[JobSpec], settings: LaunchSettings) -> list[Group]:
    """``planned`` in groups, in the order their first member was planned."""
    history = _history({p.dataset for p in planned})
    shapes: dict[tuple[Dataset, int, int, str], list[JobSpec]] = {}
    for p in planned:
        p = replace(p, deadline_s=deadline_s(p, settings, history))
        nodes, per_node = resource_shape(p.shape.ranks, settings.tasks_per_node)
        shapes.setdefault((p.dataset, nodes, per_node, p.device), []).append(p)
    out: list[Group] = []
    for (_, nodes, per_node, _), members in shapes.items():
        if settings.group == "none":
            out += [Group((p,), nodes, per_node) for p in members]
            continue
        run: list[JobSpec] = []
        seconds = 0.0
        for p in sorted(members, key=_sharing_order(members)):
            cost = estimate_s(p, history)
            full = settings.group_size is not None and len(run) >= settings.group_size
            if run and (full or seconds + cost > settings.group_limit_s):
                out.append(Group(tuple(run), nodes, per_node))
                run, seconds = [], 0.0
            run.append(p)
            seconds += cost
        out.append(Group(tuple(run), nodes, per_node))
    first = {(p.dataset, p.execution_id): i for i, p in enumerate(planned)}
    return sorted(out, key=lambda g: min(first[p.dataset, p.execution_id] for p in g.members))


def resource_shape(ranks: int, tasks_per_node: int | None) -> tuple[int, int]:
    """(nodes, tasks per node) holding ``ranks`` tasks, at most ``tasks_per_node`` per node."""
    per_node = ranks if tasks_per_node is None else min(ranks, tasks_per_node)
    if per_node < 1 or ranks % per_node:
        raise ValueError(f"{ranks} ranks cannot be spread evenly at {tasks_per_node} tasks per node")
    return math.ceil(ranks / per_node), per_node


def check_limits(planned: list[JobSpec], settings: LaunchSettings) -> None:
    """Refuse (ValueError, one line) a ``deadline_s`` or ``timeout_min`` shorter than what an execution
    of ``planned`` is estimated to take: every execution would fail, or its job die, for the limit."""
    history = _history({p.dataset for p in planned})
    longest = max(planned, key=lambda p: estimate_s(p, history), default=None)
    if longest is None:
        return
    need = estimate_s(longest, history)
    for key, given in (("deadline_s", settings.deadline_s), ("timeout_min", settings.timeout_min * 60)):
        if given is not None and given < need:
            value = given if key == "deadline_s" else given / 60
            raise ValueError(
                f"{key}={value:g} is shorter than the {need:g} s {longest.execution_id} is estimated to "
                f"take: no job could meet it; allowed: at least {need:g} s"
                + (
                    " (or leave it unset: a multiple of each execution's estimate)"
                    if key == "deadline_s"
                    else ""
                )
            )


def job_folder(group: Group) -> Path:
    """Where a group's job keeps its logs: its only member's attempt folder, or a folder of the
    group's own under ``logs/arrays/`` that every member's attempt folder links to."""
    if len(group.members) == 1:
        return group.members[0].log_dir
    folder = group.dataset.new_array_dir(group.nodes, group.per_node)
    for p in group.members:
        p.dataset.link_log_dir(p.execution_id, p.attempt, folder)
    return folder


def _sharing_order(members: list[JobSpec]) -> Callable[[JobSpec], tuple[int, int]]:
    """Sort key: executions that build the same weights (workload shape, seed) next to each other,
    each run of them where its first member was planned."""
    place: dict[tuple[str, int], int] = {}
    for i, p in enumerate(members):
        place.setdefault((p.execution.workload.name, p.seed), i)
    order = {id(p): i for i, p in enumerate(members)}
    return lambda p: (place[(p.execution.workload.name, p.seed)], order[id(p)])


def _history(datasets: Iterable[Dataset]) -> History:
    """(dataset, execution id) -> the seconds its newest valid attempt's body took."""
    found = {}
    for dataset in datasets:
        if not dataset.shards_dir.is_dir():
            continue
        for execution_id, shard in scan_shards(dataset).newest.items():
            began, ended = (datetime.fromisoformat(t) for t in (shard.meta.started_at, shard.meta.ended_at))
            found[dataset, execution_id] = max(0.0, (ended - began).total_seconds())
    return found


def estimate_s(p: JobSpec, history: History | None = None) -> float:
    """The seconds ``p`` is expected to take: what its dataset measured, else the nominal figure."""
    measured = (history or {}).get((p.dataset, p.execution_id))
    if measured is not None:
        return measured * HISTORY_MARGIN + HISTORY_EXTRA_S
    scale = p.config.get("scale", {}).get("name", "full")
    kind = p.execution.workload.kind
    return NOMINAL_S.get((scale, kind), NOMINAL_S[("full", kind)])


def deadline_s(p: JobSpec, settings: LaunchSettings, history: History | None = None) -> float:
    """The seconds after which ``p`` counts as hung: the launcher's ``deadline_s``, else
    :data:`DEADLINE_FACTOR` times its estimate, never less than :data:`DEADLINE_FLOOR_S`."""
    if settings.deadline_s is not None:
        return settings.deadline_s
    return max(DEADLINE_FLOOR_S, math.ceil(DEADLINE_FACTOR * estimate_s(p, history)))
