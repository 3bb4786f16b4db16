"""The reduced-order model: published inputs against hand counts and quadrature, curves, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from pipeline.tools.model.reduced_order import PROFILE_SUMMARY, ModelInputs, evaluate, run

PUBLISHED = json.loads((Path(__file__).parents[1] / "pipeline/tools/model/published-inputs.json").read_text())
OUTPUT_KEYS = [
    "format", "tokens", "routed_assignments", "mean_load_per_expert", "capacity_per_expert",
    "dropped_tokens", "drop_percent", "padding_waste_percent", "slot_utilization_percent",
    "total_expert_params_b", "active_params_b", "sparsity_percent", "expert_weights_gb", "moe_tflop",
    "dense_equiv_tflop", "compute_savings_x", "all2all_gb", "compute_time_ms", "all2all_time_ms",
    "step_time_ms", "comm_fraction_percent", "bottleneck", "achieved_tflops", "mfu_percent", "verdict",
]  # fmt: skip


def _normal_parts(capacity_factor: float, sigma: float) -> tuple[float, float]:
    """Expected overflow and empty slots (units of the mean load) by quadrature."""
    pdf = stats.norm(1.0, sigma).pdf
    over = integrate.quad(lambda x: (x - capacity_factor) * pdf(x), capacity_factor, np.inf, epsrel=1e-11)[0]
    empty = integrate.quad(lambda x: (capacity_factor - x) * pdf(x), -np.inf, capacity_factor, epsrel=1e-11)[
        0
    ]
    return over, empty


def _raw(values: dict) -> dict:
    """The unrounded outputs."""
    return evaluate(ModelInputs.from_mapping(values))


def test_published_inputs_by_hand():
    out = _raw(PUBLISHED)
    assert list(out) == OUTPUT_KEYS
    assert out["format"] == "T=32768 E64 top-2 d4096 ff14336 bf16 EP8"
    # 16 x 2048 tokens, top-2 -> 65536 assignments over 64 experts -> 1024 each; capacity 1.25 x 1024.
    assert (out["tokens"], out["routed_assignments"]) == (32768, 65536)
    assert out["mean_load_per_expert"] == 1024
    assert out["capacity_per_expert"] == 1280
    # One expert: 4096 x 14336 + 14336 x 4096 = 117,440,512 parameters.
    assert out["total_expert_params_b"] == pytest.approx(64 * 117_440_512 / 1e9, rel=1e-15)
    assert out["total_expert_params_b"] == pytest.approx(7.516192768, rel=1e-15)
    assert out["active_params_b"] == pytest.approx(0.234881024, rel=1e-15)
    assert out["sparsity_percent"] == 3.125  # published 3.12: the active share, 2 of 64 experts
    assert out["expert_weights_gb"] == pytest.approx(15.032385536, rel=1e-15)
    # 64 x 1280 slots x 2 FLOPs x 117,440,512 parameters; dense: 32768 tokens through all 64 experts.
    assert out["moe_tflop"] == pytest.approx(19.24145348608, rel=1e-14)
    assert out["dense_equiv_tflop"] == pytest.approx(492.581209243648, rel=1e-14)
    assert out["compute_savings_x"] == 25.6
    # Buffers out and back: 2 x 81920 slots x 4096 x 2 B, 7/8 remote.
    assert out["all2all_gb"] == pytest.approx(1.17440512, rel=1e-14)
    compute_ms = 19.24145348608 / 8 / 990 * 1e3
    all2all_ms = 1.17440512 / 8 / 450 * 1e3
    assert out["compute_time_ms"] == pytest.approx(compute_ms, rel=1e-14)
    assert out["all2all_time_ms"] == pytest.approx(all2all_ms, rel=1e-14)
    assert out["step_time_ms"] == pytest.approx(compute_ms + all2all_ms, rel=1e-14)
    assert out["comm_fraction_percent"] == pytest.approx(
        100 * all2all_ms / (compute_ms + all2all_ms), rel=1e-12
    )
    assert out["bottleneck"] == "expert compute"

    over, empty = _normal_parts(1.25, 0.3)
    assert out["drop_percent"] == pytest.approx(100 * over, rel=1e-9)
    assert out["dropped_tokens"] == pytest.approx(65536 * over, rel=1e-9)
    assert out["padding_waste_percent"] == pytest.approx(100 * empty / 1.25, rel=1e-9)
    assert out["slot_utilization_percent"] == pytest.approx(100 - 100 * empty / 1.25, rel=1e-9)
    useful_tflop = 65536 * (1 - over) * 2 * 117_440_512 / 1e12
    achieved = useful_tflop / 8 / ((compute_ms + all2all_ms) / 1e3)
    assert out["achieved_tflops"] == pytest.approx(achieved, rel=1e-9)
    assert out["mfu_percent"] == pytest.approx(100 * achieved / 990, rel=1e-9)
    # Published: the class, then its explanation.
    assert out["verdict"].startswith("balanced-efficient: expert compute-bound at 68.1% MFU")
    assert "3.40%" in out["verdict"]


def test_useful_work_is_the_filled_slots():
    # Filled slots = capacity - empty = mean - overflow: useful work = moe work x slot utilization.
    rng = np.random.default_rng(11)
    for cf, sigma in zip(rng.uniform(0.3, 3.0, 10), rng.uniform(0.05, 1.0, 10), strict=True):
        out = _raw(PUBLISHED | {"capacity_factor": cf, "load_imbalance": sigma})
        useful = out["achieved_tflops"] * 8 * out["step_time_ms"] / 1e3
        assert useful == pytest.approx(out["moe_tflop"] * out["slot_utilization_percent"] / 100, rel=1e-9)


def test_communication_bound_case():
    out = run(PUBLISHED | {"network_bw_gb_s": 10.0})["outputs"]
    assert out["bottleneck"] == "all-to-all"
    assert out["all2all_time_ms"] > out["compute_time_ms"]
    assert out["verdict"].startswith("balanced-comm-bound: ") and "all-to-all is" in out["verdict"]


@pytest.mark.parametrize(
    ("change", "cls"),
    [
        ({"load_imbalance": 1.0}, "imbalanced-"),  # drops beyond 5% of routed tokens
        ({"capacity_factor": 4.0}, "-compute-bound"),  # padding halves the useful work
        ({"load_imbalance": 0.0, "capacity_factor": 1.0}, "balanced-efficient"),
    ],
)
def test_verdict_classes(change, cls):
    out = _raw(PUBLISHED | change)
    assert cls in out["verdict"].split(": ", 1)[0]
    drop_ok = out["drop_percent"] <= 5.0
    assert out["verdict"].startswith("balanced-" if drop_ok else "imbalanced-")


def test_profile_curves():
    prof = run(PUBLISHED)["profile"]
    drop, waste, loads = prof["drop_vs_capacity"], prof["waste_vs_capacity"], prof["expert_loads"]
    grid = np.linspace(0.5, 4.0, 48)
    # Published form: [capacity_factor, percent] pairs; loads from the most loaded expert down.
    assert all(isinstance(p, list) and len(p) == 2 for p in drop + waste)
    np.testing.assert_allclose([x for x, _ in drop], grid, rtol=1e-14)
    np.testing.assert_allclose([x for x, _ in waste], grid, rtol=1e-14)
    for c, d, w in zip(grid[::7], drop[::7], waste[::7], strict=True):
        over, empty = _normal_parts(c, 0.3)
        assert d[1] == pytest.approx(100 * over, rel=1e-8, abs=1e-12)
        assert w[1] == pytest.approx(100 * empty / c, rel=1e-8)
    assert np.all(np.diff([y for _, y in drop]) < 0)
    assert np.all(np.diff([y for _, y in waste]) > 0)
    # Quantiles by the published approximation (|error in z| < 4.5e-4), printed to four decimals.
    expected = stats.norm(1, 0.3).ppf((np.arange(40) + 0.5) / 40)[::-1]
    np.testing.assert_allclose(loads, expected, rtol=0, atol=0.3 * 4.5e-4 + 0.5e-4)
    assert loads[0] > loads[-1]


@pytest.mark.parametrize("change", [{}, {"load_imbalance": 0.8, "top_k": 8}, {"network_bw_gb_s": 10.0}])
def test_printed_outputs_and_the_profile_summary(change):
    """The document rounds only where the published precision is known, and its profile repeats the
    summary: the printed outputs and the inputs, capacity_norm = capacity / mean load."""
    raw, doc = _raw(PUBLISHED | change), run(PUBLISHED | change)
    out, prof = doc["outputs"], doc["profile"]
    assert list(out) == OUTPUT_KEYS
    assert out["dropped_tokens"] == round(raw["dropped_tokens"]) and isinstance(out["dropped_tokens"], int)
    for key in OUTPUT_KEYS:
        if key.endswith("_percent"):
            assert out[key] == round(raw[key], 2), key
        elif key != "dropped_tokens":
            assert out[key] == raw[key], key
    assert list(prof) == ["drop_vs_capacity", "waste_vs_capacity", "expert_loads", *PROFILE_SUMMARY]
    assert prof["capacity_norm"] == raw["capacity_per_expert"] / raw["mean_load_per_expert"]
    assert prof["capacity_factor"] == doc["inputs"]["capacity_factor"]
    assert (prof["num_experts"], prof["top_k"]) == (doc["inputs"]["num_experts"], doc["inputs"]["top_k"])
    for key in ("sparsity_percent", "compute_savings_x", "drop_percent", "padding_waste_percent"):
        assert prof[key] == out[key], key
    assert prof["comm_fraction_percent"] == out["comm_fraction_percent"]


def test_a_published_document_gives_its_inputs():
    doc = run(PUBLISHED)
    assert run(doc) == doc
    with pytest.raises(ValueError, match="top_k"):
        run(doc | {"top_k": 4})  # an input beside a document's inputs is not silently dropped
    with pytest.raises(ValueError, match="inputs must be an object"):
        run({"inputs": [1, 2]})


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"seq_length": -3}, "seq_length"),
        ({"d_model": 4096.5}, "d_model"),
        ({"d_ff": True}, "d_ff"),
        ({"capacity_factor": 0}, "capacity_factor"),
        ({"capacity_factor": -1.0}, "capacity_factor"),
        ({"load_imbalance": -0.1}, "load_imbalance"),
        ({"top_k": 65}, "top_k"),
        ({"expert_parallel": 3}, "expert_parallel"),
        ({"elem_bytes": 0}, "elem_bytes"),
        ({"network_bw_gb_s": float("nan")}, "network_bw_gb_s"),
        ({"compute_tops": "fast"}, "compute_tops"),
        ({"experts": 64}, "experts"),
    ],
)
def test_bad_inputs_name_the_input(change, named):
    with pytest.raises(ValueError, match=named):
        run(PUBLISHED | change)


def test_missing_input_is_named():
    with pytest.raises(ValueError, match="missing input.*top_k"):
        ModelInputs.from_mapping({k: v for k, v in PUBLISHED.items() if k != "top_k"})
