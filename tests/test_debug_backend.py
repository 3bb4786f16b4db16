"""The debug backend (``hydra.launcher.backend=debug``): one execution run in the sweep's own process
by submitit's DebugExecutor, so a profiler sees its code and an error opens pdb's post-mortem at the
frame that raised it; its shard and ledger are those of any backend. Beyond one rank it is refused
before anything is written."""

import cProfile
import os
import pstats
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.data.scan import scan_shards
from pipeline.launch.settings import LaunchSettings
from pipeline.launch.sweep import claimed, run
from tests.plans import planned_sweep
from tests.slurm_support import REPO

MOK = "inference-ep8-f1536-bf16-mok-native"
ONE = ["workload=inference-ep8-f1536", "variant=mok-bf16", "scale=ci", "max_ranks=1"]
DEBUG = "hydra.launcher.backend=debug"
DEBUG_SETTINGS = LaunchSettings(backend="debug", cluster="local", gpus=None)


def python(
    *arguments: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, **env},
    )


@pytest.mark.slow
def test_one_execution_runs_in_this_process_under_a_profiler(tmp_path):
    planned = planned_sweep(tmp_path, ONE, DEBUG_SETTINGS)
    profiler = cProfile.Profile()
    with claimed(planned) as sweep:
        profiler.enable()
        try:
            (outcome,) = run(sweep.to_run, DEBUG_SETTINGS)
        finally:
            profiler.disable()
    # the profile of this process holds the execution's own code: it ran here
    ran = {(Path(file).as_posix(), name) for file, _, name in pstats.Stats(profiler).stats}
    assert any(f.endswith("pipeline/bench/execute.py") and name == "execute" for f, name in ran)
    assert any(f.endswith("pipeline/moe/layer.py") for f, _ in ran)
    assert outcome.summary is not None and outcome.error is None
    (shard,) = scan_shards(Dataset(tmp_path)).newest.values()
    assert str(Dataset(tmp_path).shard_path(MOK, 1)) == outcome.summary.shard
    assert shard.meta.execution_id == MOK and shard.meta.provenance.backend == "debug"
    assert len(shard.window_ms) > 0 and (shard.window_ms > 0).all() and set(shard.rank) == {0}
    (job_id,) = shard.meta.provenance.job_ids
    records = ledger.read(Dataset(tmp_path))
    assert [type(r).__name__ for r in records] == ["Intended", "Submitted", "Started", "Finished"]
    assert {r.job_id for r in records[1:]} == {job_id} and job_id.startswith("DEBUG_")


@pytest.mark.slow
def test_an_error_opens_the_post_mortem_where_it_was_raised(tmp_path):
    dataset = tmp_path / "dataset"
    done = python(
        "-m",
        "pipeline.run",
        *ONE,
        f"dataset_dir={dataset}",
        DEBUG,
        stdin="p rank\nq\n",
        env={"MOE_BENCH_PLANT": f"error:{MOK}:0"},
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    # pdb stands in the planted fault's frame, its locals there to read (rank 0), then the sweep goes on
    assert "-> raise PlantedError(" in done.stdout and "(Pdb) 0\n" in done.stdout
    assert f"FAILED  {MOK}  PlantedError: planted error on rank 0" in done.stdout
    assert f"{MOK} failed on rank 0:\nTraceback" in done.stderr  # the traceback, as a job's log holds it
    (failed,) = [r for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Failed)]
    assert failed.reason == "PlantedError: planted error on rank 0"
    assert not list(Dataset(dataset).shard_files())


def test_more_than_one_rank_is_refused_before_anything_is_written(tmp_path):
    debug = LaunchSettings(backend="debug", cluster="local", gpus=None)
    two = [a for a in ONE if not a.startswith("max_ranks")]  # scale=ci runs two ranks
    with pytest.raises(
        ValueError, match="backend=debug runs one rank, in this process; .* has 2: add max_ranks=1"
    ):
        planned_sweep(tmp_path, two, debug)
    assert [p.backend for p in planned_sweep(tmp_path, ONE, debug)] == ["debug"]
    assert not list(tmp_path.iterdir())
