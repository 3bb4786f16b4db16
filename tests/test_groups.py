"""One job runs a group of executions (``hydra.launcher.group=shape``, the default): how a sweep is
packed into groups, and on real local jobs that a failure (an error, or a wrong exchange of rows
between ranks that the gate finds) costs one execution while status shows the group's members waiting
as pending in its job, that a hang costs the rest of its group (missing, for
resubmission), and that sharing a job changes no execution's numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.data.scan import scan_shards
from pipeline.launch import groups as grouping
from tests.plans import LOCAL, planned_sweep

FIVE = ("workload=inference-ep8-f1536", "variant=glob(*)", "scale=ci")
DIST = "inference-ep8-f1536-bf16-dist-moe-bf16"
SPLIT, PERM = "inference-ep8-f1536-bf16-mok-native", "inference-ep8-f1536-mxfp8-dist-moe-fp8-dispatch"


def sweep(dataset: Path, *overrides: str, plant: str = "", background: bool = False):
    command = [sys.executable, "-m", "pipeline.run", "--multirun", *overrides, f"dataset_dir={dataset}"]
    env = {**os.environ, "MOE_BENCH_PLANT": plant}
    if background:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)


def states(dataset: Path) -> dict[str, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.status", str(dataset), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {e["execution_id"]: e for e in json.loads(done.stdout)["executions"]}


def jobs(dataset: Path) -> set[str]:
    return {r.job_id for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Submitted)}


def test_a_sweep_is_packed_by_resource_shape_within_its_minutes_and_size(tmp_path):
    """Executions of one resource shape share a job while their estimates fit ``group_minutes`` and
    ``group_size``; those that draw the same weights sit next to each other; ``group=none`` gives
    each its own; a group of another shape never mixes in."""
    arguments = ["workload=inference-ep8-f1536,training-ep32-f1536,inference-ep16-f1536", "variant=glob(*)"]
    planned = planned_sweep(tmp_path, [*arguments, "scale=ci"])
    local = LOCAL
    packed = grouping.groups(planned, local)
    assert len(packed) == 1 and len(packed[0].members) == 15  # one shape (2 ranks), 15 x 3-6 s
    names = [p.execution.workload.name for p in packed[0].members]
    assert names == sorted(names, key=names.index)  # each workload's five in a row
    assert all(p.deadline_s == grouping.DEADLINE_FLOOR_S for p in packed[0].members)
    small = replace(local, group_minutes=0.25)  # 15 s: a few executions of 3-4 s each
    cut = grouping.groups(planned, small)
    assert [p for g in cut for p in g.members] == list(packed[0].members)  # the same order, cut up
    for g, after in zip(cut, cut[1:], strict=False):
        held = sum(grouping.estimate_s(p) for p in g.members)
        assert held <= 15 < held + grouping.estimate_s(after.members[0])  # full: the next would not fit
    assert [len(g.members) for g in cut] == [5, 3, 4, 3]  # 5 x 3 s; 3 x 4 s; 2 x 4 + 2 x 3 s; 3 x 3 s
    sized = replace(local, group_size=4)
    assert [len(g.members) for g in grouping.groups(planned, sized)] == [4, 4, 4, 3]
    assert [len(g.members) for g in grouping.groups(planned, replace(local, group="none"))] == [1] * 15
    assert {p.deadline_s for p in grouping.groups(planned, replace(local, deadline_s=7.0))[0].members} == {
        7.0
    }
    one_rank = planned_sweep(
        tmp_path / "other", ["workload=inference-ep8-f1536", "variant=mok-bf16", "scale=ci"]
    )
    one_rank = [replace(p, shape=replace(p.shape, ranks=1), dataset=Dataset(tmp_path)) for p in one_rank]
    both = grouping.groups([*planned, *one_rank], local)
    assert sorted(len(g.members) for g in both) == [1, 15]  # another shape: a job of its own


@pytest.mark.slow
def test_a_failure_costs_its_execution_alone_and_members_waiting_are_pending_in_its_job(tmp_path):
    """On four gloo ranks: an error planted on rank 1 of one execution, as rank 0 enters the gate's
    collectives, and in two others a wrong exchange of rows across ranks (a wrong split on rank 2, a
    regrouping off by one row on rank 1): those three executions fail, the first with rank 1's error,
    the others their correctness gate; every other member of the group publishes, all in one job;
    while the job runs, status shows the members not yet started as pending in it."""
    dataset = tmp_path / "dataset"
    plants = f"error:{DIST}:1,split:{SPLIT}:2,perm:{PERM}:1"
    running = sweep(dataset, *FIVE, "max_ranks=4", plant=plants, background=True)
    seen: set[str] = set()
    deadline = time.monotonic() + 300
    while running.poll() is None and time.monotonic() < deadline:
        if (dataset / "ledger").is_dir() and jobs(dataset):
            (job,) = jobs(dataset)
            seen |= {s["detail"] for s in states(dataset).values() if s["state"] == "pending"}
            if f"pending in job {job}" in seen:
                break
        time.sleep(0.3)
    out, err = running.communicate(timeout=600)
    assert any(detail.startswith("pending in job ") for detail in seen), seen
    assert running.returncode == 1, err[-2000:]
    found = states(dataset)
    assert (
        found[DIST]["state"] == "failed"
        and "PlantedError: planted error on rank 1 (rank 1)" in found[DIST]["detail"]
    )
    for wrong in (SPLIT, PERM):
        assert found[wrong]["state"] == "failed" and "SanityError: sanity: " in found[wrong]["detail"]
    assert sorted(e for e, s in found.items() if s["state"] != "done") == sorted([DIST, SPLIT, PERM])
    assert len(jobs(dataset)) == 1
    # each published shard says where its four ranks ran and how many of its gate's rows crossed them
    published = scan_shards(Dataset(dataset)).newest.values()
    assert len(published) == 2
    for shard in published:
        topology, verdict = shard.meta.topology, shard.meta.sanity
        assert topology is not None and verdict is not None
        assert (topology.nodes, topology.ranks_per_node, topology.env_differs) == (1, (4,), ())
        assert [(b.rank, b.local_rank, b.device, b.uuid) for b in topology.bindings] == [
            (r, r, "cpu", None) for r in range(4)
        ]
        assert topology.hosts == shard.meta.provenance.hosts
        crossed, checked = verdict.crossed_rows, verdict.slice_rows
        assert checked == 4 * 32 * shard.meta.shape.top_k
        assert crossed is not None and 0 < crossed < checked


@pytest.mark.slow
def test_a_hang_costs_the_rest_of_its_group_which_resubmit_completes(tmp_path):
    """A hang planted in the second execution: it fails when its deadline passes, the job ends, the
    members after it are missing (never started), and ``resubmit`` runs exactly those."""
    (group,) = grouping.groups(planned_sweep(tmp_path / "planned", list(FIVE)), LOCAL)
    order = [p.execution_id for p in group.members]  # the order its job runs them in
    second = tmp_path / "hung"
    hung = sweep(second, *FIVE, "hydra.launcher.deadline_s=15", plant=f"hang:{order[1]}:0")
    assert hung.returncode == 1, hung.stderr[-2000:]
    found = states(second)
    assert found[order[0]]["state"] == "done"
    assert found[order[1]]["state"] == "failed" and "still running after 15 s" in found[order[1]]["detail"]
    for e in order[2:]:
        assert found[e]["state"] == "missing" and "never started" in found[e]["detail"], found[e]
    resubmit = subprocess.run(
        [sys.executable, "-m", "pipeline.resubmit", str(second), "--only", "missing"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resubmit.returncode == 0, resubmit.stderr[-2000:]
    assert {e for e, s in states(second).items() if s["state"] != "done"} == {order[1]}


@pytest.mark.slow
def test_sharing_a_job_changes_no_executions_numbers(tmp_path):
    """The same five executions in one group, in the planned order and in its reverse (a group runs in
    the order of its overrides): every execution's gate errors are equal to the last bit whichever
    members ran before it in its job (same weights, inputs and routing; the shared weights are never
    written)."""
    (group,) = grouping.groups(planned_sweep(tmp_path / "planned", list(FIVE)), LOCAL)
    planned = [p.execution_id for p in group.members]
    variants = [p.execution.variant.name for p in group.members]
    forward, reverse = tmp_path / "forward", tmp_path / "reverse"
    for dataset, step in ((forward, 1), (reverse, -1)):
        done = sweep(dataset, FIVE[0], f"variant={','.join(variants[::step])}", FIVE[2])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        started = [r.execution_id for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Started)]
        assert started == planned[::step] and len(jobs(dataset)) == 1

    def gates(dataset: Path) -> dict[str, object]:
        newest = scan_shards(Dataset(dataset)).newest
        return {e: (s.meta.sanity.errors, s.meta.sanity.tolerance) for e, s in newest.items()}

    assert gates(forward) == gates(reverse) and len(gates(forward)) == 5
