"""The implementation registry: one record per implementation, read by every stage.

The report's two are records of the registry (MoK the pairs' reference, Dist-MoE their candidate). A
third, ``tests/hybrid_implementation.py`` (MoK's per-layer budgets with Dist-MoE's fused SwiGLU
backward), is registered from its own module alone, named in ``MOE_BENCH_IMPLEMENTATIONS``: its layer
matches the float64 reference on real gloo ranks, and a ``scale=ci`` sweep runs and publishes it
beside the pairs, which stay MoK vs Dist-MoE and byte-identical to a publication without it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.base.implementations import (
    DIST_MOE,
    MOK,
    PLUGINS_ENV,
    candidate,
    implementation,
    implementations,
    reference,
    register,
)
from pipeline.data.schema import METADATA_KEY
from pipeline.matrix import EXECUTIONS, VARIANTS, counts
from pipeline.moe.policy import MoKBudget
from pipeline.report import CSV_NAME, JSON_NAME, PAIRS_NAME
from pipeline.tools.ranks import run_ranks
from tests.sweeps import run_sweep

ROOT = Path(__file__).resolve().parents[1]
HYBRID_MODULE = "tests.hybrid_implementation"
SWEEP = ("workload=inference-ep8-f1536,packing-ep32-f3072-profile-a", "variant=glob(*)", "scale=ci")
SAVED_STATE_PNG = "mok-comparison-saved-state.png"


@pytest.fixture
def hybrid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes started from here on register the hybrid implementation (this one's registry is
    closed: it was read when the matrix was built)."""
    monkeypatch.setenv(PLUGINS_ENV, HYBRID_MODULE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def test_the_report_implementations_are_the_registry_records() -> None:
    assert implementations() == (MOK, DIST_MOE)
    assert (reference(), candidate()) == (MOK, DIST_MOE)
    assert [v.name for v in VARIANTS] == [
        "mok-bf16",
        "mok-mxfp8",
        "dist-moe-bf16",
        "dist-moe-fp8-dispatch",
        "dist-moe-bf16-dispatch",
    ]
    assert counts(EXECUTIONS) == (110, 44, 66)
    with pytest.raises(ValueError, match="implementation 'fp4-moe' is not allowed; allowed: mok, dist-moe"):
        implementation("fp4-moe")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Hybrid MoE"}, "must be lowercase words"),
        ({"label": ""}, "label '' must be printable text"),
        ({"colour": "#12345"}, "colour '#12345' is not a colour"),
        ({"mx_scale_mode": "nearest"}, "mx_scale_mode 'nearest' is not allowed; allowed: exact, fast"),
        ({"swiglu_backward": "kernel"}, "swiglu_backward 'kernel' is not allowed; allowed: unfused, fused"),
        ({"pairs_as": "baseline"}, "pairs_as 'baseline' is not allowed; allowed: reference, candidate"),
        ({"policy": "MoKBudget"}, "policy 'MoKBudget' is not module:attribute"),
        ({"variants": ()}, "variants must be distinct and at least one"),
        ({"variants": (("fp4", "native"),)}, "precision 'fp4' is not allowed"),
        ({"variants": (("bf16", "a"), ("bf16", "b"))}, "variants named by precision repeat a name"),
        (
            {"variants": (("bf16", "native"), ("mxfp8", "native")), "variant_names": "pipeline"},
            "variants named by pipeline repeat a name",
        ),
    ],
)
def test_a_record_is_refused_with_its_reason(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(MOK, **change)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({}, "has the name mok of 'mok'"),
        ({"name": "mok2", "label": "Dist-MoE", "pairs_as": None}, "has the label Dist-MoE of 'dist-moe'"),
        ({"name": "mok2", "label": "M2"}, "has the pair role reference of 'mok'"),
        # execution ids end in "-dist-moe-bf16" for both: ids would collide
        (
            {"name": "dist", "label": "D", "pairs_as": None, "variants": (("bf16", "moe-bf16"),)},
            "has the execution id ending dist-moe-bf16 of 'dist-moe'",
        ),
    ],
)
def test_a_record_sharing_what_another_holds_is_refused(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        register(replace(MOK, **change))


def test_registering_after_the_registry_was_read_is_refused() -> None:
    """The matrix was built from the registry: a later record would be missing from it."""
    late = replace(MOK, name="late", label="Late", pairs_as=None)
    with pytest.raises(RuntimeError, match=f"register it from a module named in {PLUGINS_ENV}"):
        register(late)
    assert "late" not in [i.name for i in implementations()]


def _python(code: str, plugins: str | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` with ``plugins`` (and nothing else) named in the environment."""
    env = {k: v for k, v in os.environ.items() if k != PLUGINS_ENV} | {"PYTHONPATH": str(ROOT)}
    if plugins is not None:
        env[PLUGINS_ENV] = plugins
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_a_record_registers_before_the_first_read_from_the_environment_or_in_code() -> None:
    names = "from pipeline.matrix import VARIANTS; print(' '.join(v.name for v in VARIANTS[-2:]))"
    for run in (
        _python(names, plugins=HYBRID_MODULE),
        _python(f"import {HYBRID_MODULE}; {names}"),  # register() called before the matrix reads
    ):
        assert (run.returncode, run.stdout.strip()) == (0, "hybrid-bf16 hybrid-mxfp8"), run.stderr
    missing = _python("import pipeline.matrix", plugins="tests.no_such_module")
    assert missing.returncode == 1
    assert f"{PLUGINS_ENV} names 'tests.no_such_module', which cannot be imported" in missing.stderr


def _hybrid_layers(rank: int, world: int) -> dict:
    """Every hybrid case's errors against the float64 reference (tests/moe_cases.py), and what the
    record decided for its layer."""
    from pipeline.moe import MoEConfig
    from pipeline.moe.policy import make_policy
    from tests.moe_cases import DTYPES, SCENARIOS, Case, run_case

    cases = [Case("hybrid", p, "native", d, s) for p in ("bf16", "mxfp8") for d in DTYPES for s in SCENARIOS]
    cfg = MoEConfig(d_model=64, d_ff=32, num_experts=8, top_k=2, implementation="hybrid", pipeline="native")
    return {
        "cases": {c.name: (c, run_case(rank, world, c)) for c in cases},
        "record": (cfg.fused_swiglu_backward, cfg.mx_scale_mode, make_policy(cfg, 2).describe(16, 2)),
    }


def test_a_third_implementation_matches_the_float64_reference(hybrid: None) -> None:
    """Its layer, built from its record alone, on two gloo ranks: the tolerances of
    tests/test_moe_layer.py, MoK's exact scales and budgets, Dist-MoE's fused backward."""
    from tests.test_moe_layer import TENSORS, tolerance

    ranks = run_ranks(2, _hybrid_layers)
    for name, (case, _) in ranks[0]["cases"].items():
        for tensor in TENSORS:
            for rank, result in enumerate(ranks):
                error = result["cases"][name][1][tensor]
                assert error["rel_fro"] <= tolerance(case), f"{name} rank {rank} {tensor}: {error}"
    fused, mode, policy = ranks[0]["record"]
    assert (fused, mode) == (True, "exact")
    assert (policy.implementation, policy.pooled, policy.overflow) == ("hybrid", False, MoKBudget.OVERFLOW)


def _published_figures(rank: int, world: int, dataset: str) -> dict:
    """Legends and note layout of the published figures, drawn where the hybrid is registered."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pipeline.data.codec import decode
    from pipeline.report.document import PackingEvidence
    from pipeline.report.figures import saved_state_figure, time_figure

    document = json.loads((Path(dataset) / JSON_NAME).read_text())
    rows, pairs = document["executions"], document["pairs"]
    states = [decode(PackingEvidence, s) for s in document["saved_state"]]
    time = time_figure(8, rows, pairs)
    saved = saved_state_figure(states, pairs, rows)
    canvas = FigureCanvasAgg(saved)
    canvas.draw()
    renderer = canvas.get_renderer()
    overlaps = []
    for ax in saved.axes:
        texts = [t.get_window_extent(renderer) for t in ax.texts]
        bars = [b.get_window_extent(renderer) for b in ax.patches if b.get_height() > 0]
        overlaps += [
            ax.get_title() for i, t in enumerate(texts) if any(t.overlaps(o) for o in texts[i + 1 :])
        ]
        overlaps += [ax.get_title() for t in texts if any(t.overlaps(b) for b in bars)]
    return {
        "time": [h.get_label() for legend in time.legends for h in legend.legend_handles],
        "saved": [h.get_label() for legend in saved.legends for h in legend.legend_handles],
        "notes": sorted({t.get_text() for ax in saved.axes for t in ax.texts}),
        "overlaps": overlaps,
    }


def _aggregate(dataset: Path, out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pipeline.aggregate", str(dataset), "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_sweep_publishes_a_third_implementation_beside_the_same_pairs(
    ci_sweep, hybrid: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's sweep of the same workloads (MoK and Dist-MoE) copied, then the same sweep with
    the hybrid registered, resumed: it runs the hybrid's four, and the dataset publishes all 14."""
    dataset, published = tmp_path / "dataset", tmp_path / "published"
    shutil.copytree(ci_sweep[0], dataset)
    sweep = run_sweep(dataset, "--resume", *SWEEP)
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    assert sweep.stdout.count("is done already: skipped") == 10
    assert "4 executions: 4 done, 0 failed" in sweep.stdout
    run = _aggregate(dataset, published)
    assert run.returncode == 0, run.stderr

    with open(published / CSV_NAME) as f:
        rows = list(csv.DictReader(f))
    hybrid_rows = [r for r in rows if r["implementation"] == "hybrid"]
    assert sorted(r["execution_id"] for r in hybrid_rows) == [
        "inference-ep8-f1536-bf16-hybrid-native",
        "inference-ep8-f1536-mxfp8-hybrid-native",
        "packing-ep32-f3072-profile-a-bf16-hybrid-native",
        "packing-ep32-f3072-profile-a-mxfp8-hybrid-native",
    ]
    assert all(r["sanityPassed"] == "true" for r in hybrid_rows), hybrid_rows
    document = json.loads((published / JSON_NAME).read_text())
    assert document["meta"]["counts"] == {"executions": 14, "matched_workloads": 4, "pairs": 6}
    with open(published / PAIRS_NAME) as f:
        pairs = list(csv.DictReader(f))
    assert len(pairs) == 6
    assert all("-mok-" in p["mok_execution_id"] and "-dist-moe-" in p["dist_execution_id"] for p in pairs)

    # what the record decided, as the shards recorded it: MoK's budgets, Dist-MoE's fused backward
    shard = next(
        (dataset / "shards" / "execution=packing-ep32-f3072-profile-a-bf16-hybrid-native").glob("*.parquet")
    )
    meta = json.loads(pq.read_schema(shard).metadata[METADATA_KEY])
    assert meta["kernels"]["swiglu_backward"] == "fused, blocked"
    assert (meta["policy"]["implementation"], meta["policy"]["pooled"]) == ("hybrid", False)
    assert meta["policy"]["overflow"] == MoKBudget.OVERFLOW

    assert (published / SAVED_STATE_PNG).exists() and (published / "mok-comparison-ep8.png").exists()
    figures = run_ranks(0, _published_figures, str(published))[0]
    assert figures["time"] == ["MoK", "Dist-MoE, selected pipeline", "Hybrid"]
    assert [label for label in figures["saved"] if label.startswith("Hybrid")] == [
        "Hybrid retained",
        "Hybrid recomputed",
        "Hybrid budget per layer: 2.67 x T x K",
    ]
    assert "Hybrid budget 2.67 x T x K" in figures["notes"]
    assert figures["overlaps"] == []

    # Without the record, the same shards publish the same pairs and the same rows of MoK and
    # Dist-MoE: the hybrid's shards are skipped (an implementation this process does not know).
    monkeypatch.delenv(PLUGINS_ENV)
    without = _aggregate(dataset, tmp_path / "without")
    assert without.returncode == 1 and "hybrid" in without.stderr
    assert (tmp_path / "without" / PAIRS_NAME).read_bytes() == (published / PAIRS_NAME).read_bytes()
    assert (tmp_path / "without" / "mok-comparison-ep8.png").exists()
    with open(tmp_path / "without" / CSV_NAME) as f:
        assert list(csv.DictReader(f)) == [r for r in rows if r["implementation"] != "hybrid"]
