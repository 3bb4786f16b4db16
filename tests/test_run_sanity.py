"""The correctness gate of every execution, through real runs of the local launcher: a correct layer
passes and publishes its verdict; a grouped GEMM made wrong inside the job's own process (patched by a
``sitecustomize`` on its PYTHONPATH, which every Python process of the run imports at start and which
patches the job's tasks) fails the gate: the execution exits non-zero, writes no shard, and
``pipeline.status`` names the sanity error."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline.bench import sanity
from pipeline.data.dataset import Dataset
from pipeline.data.reader import read_shard
from pipeline.moe import ExpertWeights, MoEConfig, build_stack
from tests.moe_reference import reference_moe

ROOT = Path(__file__).resolve().parents[1]
# patched in the job's tasks alone (submitit names each task's rank in its environment): the sweep, the
# job's controller and ``pipeline.status`` never import the kernels, and would import torch for nothing
PERTURB = """
import os

if "SUBMITIT_LOCAL_GLOBALID" in os.environ:
    from cutlass_kernels import api

    _original = api.{name}

    def _perturbed(*args, **kwargs):
        out = _original(*args, **kwargs)
        return out * (1 + {factor})

    api.{name} = _perturbed
"""


def run(module: str, *arguments: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    path = [str(pythonpath)] if pythonpath else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", module, *arguments], capture_output=True, text=True, timeout=600, env=env
    )


def execution(dataset: Path, workload: str, variant: str, pythonpath: Path | None = None):
    overrides = (f"workload={workload}", f"variant={variant}", "scale=ci", f"dataset_dir={dataset}")
    return run("pipeline.run", *overrides, pythonpath=pythonpath)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("function", "factor", "workload", "broken"),
    [
        ("grouped_gemm", 1e-3, "inference-ep8-f1536", "y"),
        ("grouped_gemm_wgrad", 1e-3, "training-ep32-f1536", "dw"),
    ],
)
def test_a_wrong_grouped_gemm_fails_the_gate(tmp_path, function, factor, workload, broken):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PERTURB.format(name=function, factor=factor))
    dataset = tmp_path / "dataset"
    done = execution(dataset, workload, "mok-bf16", pythonpath=site)
    execution_id = f"{workload}-bf16-mok-native"
    assert done.returncode != 0
    shards = Dataset(dataset).shard_dir(execution_id)
    assert not shards.exists() or not any(shards.iterdir())
    status = run("pipeline.status", str(dataset))
    assert status.returncode == 1
    (line,) = [ln for ln in status.stdout.splitlines() if execution_id in ln]
    assert line.split()[0] == "failed"
    assert "sanity: " in line and f" {broken}" in line and "> tolerance 1e-05" in line, line


@pytest.mark.slow
def test_a_correct_execution_records_and_publishes_its_verdict(tmp_path):
    dataset = tmp_path / "dataset"
    done = execution(dataset, "training-ep32-f1536", "dist-moe-fp8-dispatch")
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = Dataset(dataset).shard_dir("training-ep32-f1536-mxfp8-dist-moe-fp8-dispatch").iterdir()
    verdict = read_shard(path).meta.sanity
    assert verdict.passed is True and set(verdict.errors) == {"y", "dx", "dw1", "dw2"}
    activations = sanity.SLICE_TOKENS * 6 * 32  # top-6, d_ff 1536 / 48 at scale=ci
    assert verdict.tolerance == sanity.tolerance(torch.float32, "mxfp8", activations)
    assert 0 < verdict.max_error <= verdict.tolerance < 1e-2
    published = run("pipeline.aggregate", str(dataset))
    assert published.returncode == 0, published.stderr[-3000:]
    with open(dataset / "mok-comparison.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["sanityPassed"] == "true"
    assert float(row["sanityTolerance"]) == pytest.approx(verdict.tolerance, rel=1e-3)
    assert float(row["sanityMaxError"]) == pytest.approx(verdict.max_error, rel=1e-3)


@pytest.mark.parametrize("precision", ["bf16", "mxfp8"])
def test_gate_errors_agree_with_the_independent_float64_reference(precision):
    """The gate's forward error on a one-process bfloat16 layer is the error against the tests' own
    reference (computed here on the same slice), so the gate's reference is not a copy of the layer."""
    pipeline = "native"
    cfg = MoEConfig(
        d_model=128, d_ff=64, num_experts=8, top_k=6, pipeline=pipeline, precision=precision,
        dtype=torch.bfloat16,
    )  # fmt: skip
    stack = build_stack(cfg, [ExpertWeights.random(cfg, seed=5)])
    layer = stack.layers[0]
    errors = sanity.check_layer(layer, backward=False, seed=11, weights=5)
    # the same slice through the layer and the tests' reference
    piece = sanity.slice_of(cfg, 0, 1, 11, torch.device("cpu"))
    with torch.no_grad():
        y = layer(piece.x, piece.idx, piece.weight)
    full = [t.detach().double() for t in (layer.w1, layer.w2, layer.shared_w1, layer.shared_w2)]
    mode = cfg.mx_scale_mode if precision == "mxfp8" else None
    ref = reference_moe(piece.x.double(), piece.idx, piece.weight, *full, mx_mode=mode, dtype=torch.bfloat16)
    expected = float((y.double() - ref).norm() / ref.norm())
    assert errors["y"] == pytest.approx(expected, rel=1e-6)
    assert 0 < errors["y"] <= sanity.tolerance(torch.bfloat16, precision, sanity.SLICE_TOKENS * 6 * 64)
    pairs, _ = sanity.routes(8, 1, 6, 11)
    assert len(pairs) == 7 and piece.idx.unique().numel() == 7  # of the eight experts, one is empty
