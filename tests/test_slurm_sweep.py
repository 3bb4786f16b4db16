"""The Slurm launcher end to end: a two-execution sweep spanning nodes, then status and resubmission
of exactly the execution whose shard was deleted, after the launching process is gone; and one job
array per resource shape."""

import functools
import json
import subprocess
from collections.abc import Mapping
from typing import Any

import pyarrow.parquet as pq
from hydra import compose, initialize_config_dir

from pipeline.compose import CONFIG_DIR, CONFIG_NAME, composed, register
from pipeline.compose.launcher import cluster_of, launcher_settings
from pipeline.data.dataset import Dataset
from pipeline.data.schema import METADATA_KEY
from pipeline.data.topology import Topology
from pipeline.launch.plan import Composed, plan
from pipeline.launch.settings import LaunchSettings
from pipeline.launch.slurm import submit as submit_arrays
from tests.slurm_support import (
    needs_cluster,
    python_module,
    records,
    sacct_ended,
    sacct_state,
    states,
    wait_for,
)

pytestmark = needs_cluster

MOK = "inference-ep8-f1536-bf16-mok-native"
DIST = "inference-ep8-f1536-bf16-dist-moe-bf16"


def all_done(dataset) -> bool:
    code, seen = states(dataset)
    return code == 0 and sorted(seen) == sorted([MOK, DIST]) and all(v[0] == "done" for v in seen.values())


def test_sweep_spans_nodes_and_resubmit_reruns_only_the_lost_shard(tmp_path):
    done = python_module(
        "pipeline.run",
        "--multirun",
        "workload=inference-ep8-f1536",
        "variant=mok-bf16,dist-moe-bf16",
        "scale=ci",
        f"dataset_dir={tmp_path}",
        "hydra/launcher=slurm",
        "cluster=local-slurm",
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "2 executions: 2 done, 0 failed"
    for execution_id in (MOK, DIST):
        (submitted,) = records(tmp_path, "submitted", execution_id)
        meta = json.loads(
            pq.read_schema(Dataset(tmp_path).shard_path(execution_id, 1)).metadata[METADATA_KEY]
        )
        assert meta["job_id"] == submitted["job_id"]
        assert meta["provenance"]["job_ids"] == [submitted["job_id"]]
        assert len(meta["provenance"]["hosts"]) >= 2, meta["provenance"]["hosts"]
        assert set(meta["provenance"]["hosts"]) <= {"n1", "n2", "n3", "n4"}
        # accounting records the job's end a moment after the sweep has read its members' ends
        job_id = submitted["job_id"]
        said = functools.partial(lambda j: f"sacct to record job {j}'s end: {sacct_state(j)!r}", job_id)
        wait_for(said, functools.partial(sacct_ended, job_id), 60)
        assert sacct_state(job_id).startswith("COMPLETED|0:0|")
        # the job's log says where its ranks ran: one rank on each of two nodes, gloo on CPUs; so does
        # the shard
        logs = Dataset(tmp_path).log_dir(execution_id, 1)
        (line,) = [
            ln for f in logs.glob("*.out") for ln in f.read_text().splitlines() if ln.startswith("topology ")
        ]
        said = json.loads(line.removeprefix("topology "))
        topology = Topology.from_json(said)
        assert (said["collective"], said["nccl"]) == ("gloo", None)
        assert (topology.nodes, topology.ranks_per_node) == (2, (1, 1))
        assert sorted(topology.hosts) == meta["provenance"]["hosts"]
        assert [(b.rank, b.device) for b in topology.bindings] == [(0, "cpu"), (1, "cpu")]
        assert Topology.from_json(meta["topology"]) == topology
    assert all_done(tmp_path)

    Dataset(tmp_path).shard_path(DIST, 1).unlink()
    code, seen = states(tmp_path)
    assert code == 1
    assert seen[MOK][0] == "done"
    assert seen[DIST][:3] == ["missing", DIST, "attempt"]

    again = python_module("pipeline.resubmit", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"resubmitting {DIST} as attempt 2 (was missing)"
    assert again.stdout.splitlines()[-1] == "1 execution(s) resubmitted"
    assert [r["attempt"] for r in records(tmp_path, "submitted", DIST)] == [1, 2]
    assert [r["attempt"] for r in records(tmp_path, "submitted", MOK)] == [1]
    wait_for("the resubmitted execution to finish", lambda: all_done(tmp_path))
    assert Dataset(tmp_path).shard_path(DIST, 2).exists()
    assert not Dataset(tmp_path).shard_path(MOK, 2).exists()


def composed_on_slurm(*overrides: str) -> tuple[LaunchSettings, Mapping[str, Any]]:
    """(launcher settings, job config) that ``pipeline.run`` would hand the launcher for these
    overrides."""
    overrides = (*overrides, "hydra/launcher=slurm", "cluster=local-slurm")
    cfg = compose(CONFIG_NAME, overrides=list(overrides), return_hydra_config=True)
    return launcher_settings(cfg.hydra.launcher, cluster_of(cfg)), composed(overrides, cfg).config


def test_each_resource_shape_goes_out_as_its_own_job_array(tmp_path):
    """A 2-node and a 4-node shape, each its own array whose one task runs the shape's two executions
    as a group (in datasets of their own: a dataset holds one setting of max_ranks); queued on the
    debug partition (the bench one refuses a job of more ranks than the host has cores) and
    cancelled."""
    jobs = []
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for workload, max_ranks in (("inference-ep8-f1536", 2), ("inference-ep16-f1536", 4)):
            for variant in ("mok-bf16", "dist-moe-bf16"):
                overrides = [
                    f"workload={workload}",
                    f"variant={variant}",
                    "scale=ci",
                    f"max_ranks={max_ranks}",
                ]
                launcher, config = composed_on_slurm(
                    *overrides,
                    f"dataset_dir={tmp_path / f'ranks{max_ranks}'}",
                    "hydra.launcher.partition=debug",
                )
                jobs.append(Composed(tuple(overrides), config))
    submitted = submit_arrays(plan(jobs, launcher), launcher)
    assert sorted(len(group.members) for group, _ in submitted) == [2, 2]  # each shape's two: one job
    arrays = sorted({job.job_id.split("_")[0] for _, job in submitted}, key=int)
    try:
        listing = ["squeue", "-h", "-r", "-j", ",".join(arrays), "-o", "%i %D"]
        tasks = subprocess.run(listing, capture_output=True, text=True, check=True).stdout.split()
    finally:
        subprocess.run(["scancel", *arrays], check=True)
    first, second = arrays
    # one task each: sbatch makes a one-task batch a plain job (no _0 suffix)
    nodes = {job.split("_")[0]: count for job, count in zip(tasks[::2], tasks[1::2], strict=True)}
    assert nodes == {first: "2", second: "4"} and len(tasks) == 4
