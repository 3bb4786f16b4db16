"""The full-scale estimate (pipeline.estimate): its fake device counts what a GPU would do, its host
planning is what a real group exchanges, a planted host synchronization or full-weights draw shows,
a packing execution's weights are exactly its local experts', a published estimate is kept as it
ends, and what makes the command fail. The whole matrix on the report's hardware (no host sync in a
timed iteration, every execution fits) is CI's own step, ``python -m pipeline.estimate
cluster=gb300`` in ``.ci/run``, beside the tests: these read what it has kept by then (an estimate it
has not reached yet, or an h200 one, is computed here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pipeline import REPO_ROOT
from pipeline.tools.estimate import table
from pipeline.tools.estimate.jobs import Job
from pipeline.tools.estimate.pool import run_jobs
from pipeline.tools.estimate.presets import Preset
from pipeline.tools.ranks import run_ranks

GIB = 2**30
MIB = 2**20


@pytest.fixture(scope="module")
def checks() -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests.fake_device_checks"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_views_and_allocations_launch_no_kernel(checks: dict) -> None:
    assert checks["views_launch_nothing"]["ops"] == {
        "aten.add_": 1,
        "aten.mul": 1,
        "aten.clone": 1,
        "aten.zeros": 1,
    }


@pytest.mark.slow
def test_every_read_of_device_data_is_one_host_sync(checks: dict) -> None:
    got = checks["every_read_of_the_device_is_a_sync"]
    # .tolist() (one sync for all its elements), int(), bool(), nonzero, float(), a branch, .cpu()
    assert got["syncs"] == ["aten._local_scalar_dense"] * 3 + ["aten.nonzero"] + [
        "aten._local_scalar_dense"
    ] * 2 + ["aten._to_copy"]
    # host data moved to the device reads back its true values; device-only data reads as zero
    assert got["value"] == [[3, 1, 4, 1, 5], 14, True, 5, 0.0, 0]


@pytest.mark.slow
def test_memory_is_the_live_storages_rounded_to_blocks(checks: dict) -> None:
    got = checks["memory_is_what_lives"]
    assert (
        got["peak"] == MIB + 2 * MIB + 512
    )  # the second 2 MiB (+1 byte, a block more) once the first is freed
    assert got["held"] == {"weights": MIB, "temporaries": 2 * MIB + 512}


def _plans(rank: int, world: int) -> dict:
    from pipeline.moe.comm import Group
    from pipeline.moe.dispatch import DispatchPlan
    from pipeline.moe.routing import routing_plan
    from pipeline.tools.estimate.run import rank0_plan

    plan = routing_plan(64, 48, 6, world, 2.5, seed=9)
    exchanged = DispatchPlan.build(plan.for_rank(rank)[0], 48, Group.resolve(None))
    host = rank0_plan(plan)
    return {"exchanged": exchanged, "host": host}


@pytest.mark.slow
def test_rank0_plan_on_the_host_is_the_plan_the_group_exchanges() -> None:
    got = run_ranks(4, _plans)[0]
    exchanged, host = got["exchanged"], got["host"]
    assert exchanged.send_splits == host.send_splits and exchanged.recv_splits == host.recv_splits
    for name in ("order", "token_of_row", "perm", "perm_inverse", "offs"):
        assert torch.equal(getattr(exchanged, name), getattr(host, name)), name


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["scale=ci"], "error: the estimate is of scale=full; got scale=ci"),
        (["max_ranks=1"], "error: the estimate runs each execution's EP world size; max_ranks=1 is not "
                          "allowed"),
        (["cluster=local-slurm"], "error: cluster=local-slurm is not a GPU preset (gpus=False); allowed: "
                                  "gb300, h200"),
        (["cluster=gb300", "cluster.arch=sm_80"], "error: cluster=gb300: arch='sm_80'; allowed: sm_90a, "
                                                  "sm_100a"),
        (["cluster=h200", "cluster.gpu_memory_gb=-1"], "error: cluster=h200: gpu_memory_gb=-1; allowed: a "
                                                       "positive number of GB"),
        (["--swiglu-form", "loop"], "error: --swiglu-form 'loop'; allowed: blocked, whole-tensor, "
                                    "cute-kernel"),
        (["--workers", "0"], "error: --workers '0': allowed: a positive integer"),
        (["cluster=h200", "cluster.gpus.peaks.hbm_tb_s.value=0"], "error: cluster=h200: "
                                  "gpus.peaks.hbm_tb_s.value=0; allowed: a positive TB/s"),
        (["--fast"], "error: unknown option '--fast'; allowed: --json, --swiglu-form, --workers, --dataset, "
                     "--config-dir, --help"),
        (["--dataset", "outputs/x", "cluster=h200"], "error: --dataset estimates what the dataset publishes, "
                     "on its preset with the GPU's own SwiGLU form: cluster=h200 is not allowed with it"),
        (["--dataset", "/no/such/dataset"], "error: dataset directory '/no/such/dataset' does not exist"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipeline.tools.estimate.cli import main

    code = main(arguments)  # refused before any worker starts
    out, err = capsys.readouterr()
    assert (code, err.strip(), out) == (2, message, "")


def test_problems_name_each_failure_sync_and_overflow() -> None:
    """What makes the command (and CI's run of the whole matrix) exit 1, one line each."""
    from pipeline.tools.estimate.report import problems

    ok = {"execution_id": "a", "cluster": "h200", "host_syncs": 0, "host_sync_sites": [], "fits": True}
    synced = ok | {"execution_id": "b", "host_syncs": 2, "host_sync_sites": ["aten.nonzero at moe/x.py:3"]}
    big = ok | {"execution_id": "c", "fits": False, "peak_gib": 150.0, "peak_phase": "build",
                "gpu_memory_gb": 141.0, "held_bytes": {"weights": 150 * GIB, "scratch": 0}}  # fmt: skip
    failed = {"execution_id": "d", "error": "RuntimeError: x"}
    assert problems([ok]) == []
    assert problems([ok, synced, big, failed]) == [
        "b (h200): 2 host synchronization(s) per timed iteration: aten.nonzero at moe/x.py:3",
        "c (h200): does not fit: peak 150.0 GiB in build > 141 GB (at the timed peak: weights 150.0, "
        "scratch 0.0 GiB)",
        "d (?): failed: RuntimeError: x",
    ]


def test_a_published_estimate_is_kept_as_it_arrives_and_no_other(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a run computes is in the kept table at once (another process finds it before the run
    ends): a published job's result; not a failure, nor a key that a job of another form shares."""
    from pipeline.data import estimates

    monkeypatch.setenv("MOE_BENCH_CACHE", str(tmp_path))
    h200 = Preset.named("h200")
    plain, failing, both = (
        "inference-ep8-f1536-bf16-mok-native",
        "inference-ep16-f1536-bf16-mok-native",
        "training-ep32-f1536-bf16-dist-moe-bf16",
    )
    jobs = [Job(plain, h200), Job(failing, h200), Job(both, h200), Job(both, h200, swiglu="blocked")]
    seen: list[dict] = []
    arrived = table.keeping(jobs, seen.append)
    results = [
        {"execution_id": plain, "cluster": "h200", "device_ops": 7},
        {"execution_id": failing, "error": "RuntimeError: x"},
        {"execution_id": both, "cluster": "h200", "device_ops": 9},
    ]
    arrived(results[0])
    assert estimates.kept([(plain, "h200")]) == {(plain, "h200"): results[0]}
    for result in results[1:]:
        arrived(result)
    assert seen == results
    assert list(estimates.read()) == [f"{plain}|h200"]


PLANTS = textwrap.dedent(
    """
    # Plants in the estimate's workers, picked by MOE_BENCH_PLANT (comma-separated): "sync" reads a
    # device value in the combine of every forward; "weights" draws a layer's full weights where it
    # needs its own.
    import importlib.abc, importlib.util, os, sys

    PLANTS = os.environ.get("MOE_BENCH_PLANT", "").split(",")
    TARGETS = {"pipeline.moe.dispatch": "sync", "pipeline.moe.weights": "weights"}


    def plant(module, what):
        if what == "sync":
            combine = module.combine

            def combine_and_read(y, *args, **kwargs):
                y.sum().item()
                return combine(y, *args, **kwargs)

            module.combine = combine_and_read
        else:
            weights = module.ExpertWeights

            def local(cls, cfg, rank, ranks, seed=0, device="cpu", layer=0):
                full, n = cls.random(cfg, seed, device, layer), cfg.local_experts(ranks)
                lo = rank * n
                return cls(full.w1[lo : lo + n].clone(), full.w2[lo : lo + n].clone(),
                           full.shared_w1, full.shared_w2, lo)

            weights.local = classmethod(local)


    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if TARGETS.get(name) not in PLANTS:
                return None
            what = TARGETS.pop(name)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                plant(module, what)

            spec.loader.exec_module = exec_module
            return spec


    if set(TARGETS.values()) & set(PLANTS):
        sys.meta_path.insert(0, Finder())
    """
)


PLANTED = "inference-ep16-f1536-bf16-mok-native"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One inference execution estimated plain (from the kept table where it is there) and
    with both plants (one worker: a host sync in every combine, a full-weights draw in the build)."""
    folder = tmp_path_factory.mktemp("plants")
    (folder / "sitecustomize.py").write_text(PLANTS)
    (plain,) = table.estimates([(PLANTED, "h200")]).values()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
        patch.setenv("MOE_BENCH_PLANT", "sync,weights")
        (both,) = run_jobs([Job(PLANTED, Preset.named("h200"))], workers=1)
    return {"plain": plain, "planted": both}


@pytest.mark.slow
def test_a_planted_host_sync_in_the_timed_step_is_counted(planted: dict[str, dict]) -> None:
    plain, sync = planted["plain"], planted["planted"]
    assert plain["host_syncs"] == 0 and plain["host_sync_sites"] == []
    assert sync["host_syncs"] == 1  # one forward per inference iteration, one combine in it
    (site,) = sync["host_sync_sites"]
    assert site.startswith("aten._local_scalar_dense at moe/layer.py:")  # the project frame that called it
    assert sync["device_ops"] == plain["device_ops"] + 1  # the planted sum


@pytest.mark.slow
def test_a_planted_full_weights_draw_shows_in_the_peak(planted: dict[str, dict]) -> None:
    plain, weights = planted["plain"], planted["planted"]
    d, f, e = 7168, 1536, 384
    full = e * 3 * d * f * 2  # every routed expert's w1 and w2 in BF16
    assert weights["phase_peak_gib"]["build"] * GIB >= plain["phase_peak_gib"]["build"] * GIB + 0.9 * full
    assert weights["peak_phase"] == "build" and plain["peak_phase"] != "build"
    # the draw is gone before timing (the planted sum's scalar aside)
    assert weights["timed_peak_gib"] == pytest.approx(plain["timed_peak_gib"], abs=MIB / GIB)


@pytest.mark.slow
def test_packing_weights_are_the_local_experts_exactly() -> None:
    """The hot rank of EP64 MXFP8 packing holds 6 local experts + the shared one in each of 10 layers,
    and MXFP8's prepared forms of the routed ones: E4M3 values, E8M0 scales, BF16 values (the kept
    table's estimate: CI's run of the matrix made it; else one run, about a minute)."""
    (got,) = table.estimates([("packing-ep64-f3072-profile-a-mxfp8-mok-native", "gb300")]).values()
    d, f, local, shared, layers = 7168, 3072, 384 // 64, 1, 10
    per_expert = 3 * d * f  # w1 [2F, D] and w2 [D, F]
    assert got["weights_bytes"] == layers * (local + shared) * per_expert * 2
    assert got["held_bytes"]["weights"] == got["weights_bytes"]
    assert got["held_bytes"]["quantized weights"] == layers * local * (
        per_expert * (1 + 2) + per_expert // 32
    )
