"""The full-scale estimate (pipeline.estimate): its fake device counts what a GPU would do, its host
planning is what a real group exchanges, a planted host synchronization or full-weights draw shows,
a packing execution's weights are exactly its local experts', and the whole matrix on each preset
synchronizes nowhere in a timed iteration and fits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pipeline import REPO_ROOT
from pipeline.estimate import table
from pipeline.estimate.jobs import Job
from pipeline.estimate.pool import run_jobs
from pipeline.estimate.presets import Preset
from pipeline.matrix import EXECUTIONS
from tests.distributed import run_ranks

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


def test_views_and_allocations_launch_no_kernel(checks: dict) -> None:
    assert checks["views_launch_nothing"]["ops"] == {
        "aten.add_": 1,
        "aten.mul": 1,
        "aten.clone": 1,
        "aten.zeros": 1,
    }


def test_every_read_of_device_data_is_one_host_sync(checks: dict) -> None:
    got = checks["every_read_of_the_device_is_a_sync"]
    # .tolist() (one sync for all its elements), int(), bool(), nonzero, float(), a branch, .cpu()
    assert got["syncs"] == ["aten._local_scalar_dense"] * 3 + ["aten.nonzero"] + [
        "aten._local_scalar_dense"
    ] * 2 + ["aten._to_copy"]
    # host data moved to the device reads back its true values; device-only data reads as zero
    assert got["value"] == [[3, 1, 4, 1, 5], 14, True, 5, 0.0, 0]


def test_memory_is_the_live_storages_rounded_to_blocks(checks: dict) -> None:
    got = checks["memory_is_what_lives"]
    assert (
        got["peak"] == MIB + 2 * MIB + 512
    )  # the second 2 MiB (+1 byte, a block more) once the first is freed
    assert got["held"] == {"weights": MIB, "temporaries": 2 * MIB + 512}


def _plans(rank: int, world: int) -> dict:
    from pipeline.estimate.run import rank0_plan
    from pipeline.moe.comm import Group
    from pipeline.moe.dispatch import DispatchPlan
    from pipeline.moe.routing import routing_plan

    plan = routing_plan(64, 48, 6, world, 2.5, seed=9)
    exchanged = DispatchPlan.build(plan.for_rank(rank)[0], 48, Group.resolve(None))
    host = rank0_plan(plan)
    return {"exchanged": exchanged, "host": host}


def test_rank0_plan_on_the_host_is_the_plan_the_group_exchanges() -> None:
    got = run_ranks(4, _plans)[0]
    exchanged, host = got["exchanged"], got["host"]
    assert exchanged.send_splits == host.send_splits and exchanged.recv_splits == host.recv_splits
    for name in ("order", "token_of_row", "perm", "perm_inverse", "offs"):
        assert torch.equal(getattr(exchanged, name), getattr(host, name)), name


def _estimate(*arguments: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.estimate", *arguments],
        capture_output=True, text=True, timeout=1200, cwd=REPO_ROOT, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["scale=ci"], "error: the estimate is of scale=full; got scale=ci"),
        (["max_ranks=1"], "error: the estimate runs each execution's EP world size; max_ranks=1 is not "
                          "allowed"),
        (["cluster=local-slurm"], "error: cluster=local-slurm is not a GPU preset with gpu_memory_gb and "
                                  "arch; allowed: gb300, h200"),
        (["cluster=gb300", "cluster.arch=sm_80"], "error: cluster=gb300: arch='sm_80'; allowed: sm_90a, "
                                                  "sm_100a"),
        (["cluster=h200", "cluster.gpu_memory_gb=-1"], "error: cluster=h200: gpu_memory_gb=-1; allowed: a "
                                                       "positive number of GB"),
        (["--swiglu-form", "loop"], "error: --swiglu-form 'loop'; allowed: blocked, whole-tensor"),
        (["--workers", "0"], "error: --workers '0': allowed: a positive integer"),
        (["--fast"], "error: unknown option '--fast'; allowed: --json, --swiglu-form, --workers, --help"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(arguments: list[str], message: str) -> None:
    done = _estimate(*arguments)
    assert (done.returncode, done.stderr.strip(), done.stdout) == (2, message, "")


PLANTS = textwrap.dedent(
    """
    # Plants in the estimate's workers, picked by MOE_BENCH_PLANT: "sync" reads a device value in the
    # combine of every forward; "weights" draws a layer's full weights where it needs its own.
    import importlib.abc, importlib.util, os, sys

    PLANT = os.environ.get("MOE_BENCH_PLANT", "")
    TARGET = {"sync": "pipeline.moe.dispatch", "weights": "pipeline.moe.weights"}.get(PLANT)


    def plant(module):
        if PLANT == "sync":
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
            if name != TARGET:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                plant(module)

            spec.loader.exec_module = exec_module
            return spec


    if TARGET:
        sys.meta_path.insert(0, Finder())
    """
)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One inference execution estimated plain, with a host sync planted, with a full draw planted."""
    folder = tmp_path_factory.mktemp("plants")
    (folder / "sitecustomize.py").write_text(PLANTS)
    job = Job("inference-ep16-f1536-bf16-mok-native", Preset.named("h200"))
    results = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
        for plant in ("", "sync", "weights"):
            patch.setenv("MOE_BENCH_PLANT", plant)
            (results[plant],) = run_jobs([job], workers=1)
    return results


def test_a_planted_host_sync_in_the_timed_step_is_counted(planted: dict[str, dict]) -> None:
    plain, sync = planted[""], planted["sync"]
    assert plain["host_syncs"] == 0 and plain["host_sync_sites"] == []
    assert sync["host_syncs"] == 1  # one forward per inference iteration, one combine in it
    (site,) = sync["host_sync_sites"]
    assert site.startswith("aten._local_scalar_dense at moe/layer.py:")  # the project frame that called it
    assert sync["device_ops"] == plain["device_ops"] + 1  # the planted sum


def test_a_planted_full_weights_draw_shows_in_the_peak(planted: dict[str, dict]) -> None:
    plain, weights = planted[""], planted["weights"]
    d, f, e = 7168, 1536, 384
    full = e * 3 * d * f * 2  # every routed expert's w1 and w2 in BF16
    assert weights["phase_peak_gib"]["build"] * GIB >= plain["phase_peak_gib"]["build"] * GIB + 0.9 * full
    assert weights["peak_phase"] == "build" and plain["peak_phase"] != "build"
    assert weights["timed_peak_gib"] == plain["timed_peak_gib"]  # the draw is gone before timing


@pytest.mark.slow
def test_packing_weights_are_the_local_experts_exactly() -> None:
    """The hot rank of EP64 MXFP8 packing holds 6 local experts + the shared one in each of 10 layers,
    and MXFP8's prepared forms of the routed ones: E4M3 values, E8M0 scales, BF16 values."""
    (got,) = run_jobs(
        [Job("packing-ep64-f3072-profile-a-mxfp8-mok-native", Preset.named("gb300"))], workers=1
    )
    d, f, local, shared, layers = 7168, 3072, 384 // 64, 1, 10
    per_expert = 3 * d * f  # w1 [2F, D] and w2 [D, F]
    assert got["weights_bytes"] == layers * (local + shared) * per_expert * 2
    assert got["held_bytes"]["weights"] == got["weights_bytes"]
    assert got["held_bytes"]["quantized weights"] == layers * local * (
        per_expert * (1 + 2) + per_expert // 32
    )


@pytest.mark.slow
def test_the_whole_matrix_on_each_preset_syncs_nowhere_and_fits() -> None:
    """Every execution on both GPU presets, through the kept table the published columns come from
    (computed afresh when the code changed)."""
    keys = [(e.execution_id, p) for p in table.GPU_PRESETS for e in EXECUTIONS]
    found = table.estimates(keys)
    assert len(found) == 220
    failed = {k: r["error"] for k, r in found.items() if "error" in r}
    assert not failed
    assert {k: r["host_sync_sites"] for k, r in found.items() if r["host_syncs"]} == {}
    assert [k for k, r in found.items() if not r["fits"]] == []
    assert all(r["device_ops"] > 0 and r["timed_peak_gib"] > 0 for r in found.values())
