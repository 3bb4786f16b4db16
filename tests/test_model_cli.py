"""``python -m pipeline.model``: JSON keys as published, key=value inputs, plots, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.tools.model.cli import main
from pipeline.tools.model.reduced_order import PROFILE_SUMMARY

ROOT = Path(__file__).parents[1]
PUBLISHED_FILE = ROOT / "pipeline/tools/model/published-inputs.json"
INPUT_KEYS = [
    "batch_size", "seq_length", "num_experts", "top_k", "d_model", "d_ff", "capacity_factor",
    "load_imbalance", "expert_parallel", "elem_bytes", "network_bw_gb_s", "compute_tops",
]  # fmt: skip


def _json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_module_prints_the_published_json_keys():
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.model", "--inputs", str(PUBLISHED_FILE), "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout)
    assert list(result) == ["inputs", "outputs", "profile", "model"]
    assert list(result["inputs"]) == INPUT_KEYS
    # the seed's 38 keys: 12 inputs, 25 outputs and the line that says what the model is
    assert len(result["inputs"]) + len(result["outputs"]) + 1 == 38
    assert result["model"].startswith("reduced-order model of one MoE layer: ")
    assert result["inputs"] == json.loads(PUBLISHED_FILE.read_text())
    assert list(result["outputs"])[0] == "format" and list(result["outputs"])[-1] == "verdict"
    assert len(result["outputs"]) == 25
    curves = ["drop_vs_capacity", "waste_vs_capacity", "expert_loads"]
    assert list(result["profile"]) == [*curves, *PROFILE_SUMMARY]
    assert [len(result["profile"][k]) for k in curves] == [48, 48, 40]
    # The published run's outputs in the published form (values within their published rounding).
    out, prof = result["outputs"], result["profile"]
    assert round(out["sparsity_percent"], 2) == 3.12
    assert out["bottleneck"] == "expert compute"
    assert out["verdict"].split(": ", 1)[0] == "balanced-efficient"
    assert prof["drop_vs_capacity"][0][0] == 0.5 and prof["waste_vs_capacity"][-1][0] == 4.0
    assert prof["expert_loads"] == sorted(prof["expert_loads"], reverse=True)


def test_key_value_arguments_override_the_file(capsys, tmp_path):
    custom = tmp_path / "in.json"
    custom.write_text(json.dumps(json.loads(PUBLISHED_FILE.read_text()) | {"num_experts": 128}))
    result = _json(capsys, "--inputs", str(custom), "top_k=4", "capacity_factor=2", "--json")
    assert result["inputs"]["num_experts"] == 128
    assert result["inputs"]["top_k"] == 4 and result["inputs"]["capacity_factor"] == 2.0
    assert result["outputs"]["routed_assignments"] == 16 * 2048 * 4
    assert result["outputs"]["mean_load_per_expert"] == 16 * 2048 * 4 / 128


def test_default_inputs_are_the_published_run(capsys):
    assert _json(capsys, "--json") == _json(capsys, "--inputs", str(PUBLISHED_FILE), "--json")


def test_readable_summary_ends_with_the_verdict(capsys):
    assert main([]) == 0
    text = capsys.readouterr().out
    assert "step_time_ms" in text and "TFLOP/s per GPU" in text
    assert text.strip().splitlines()[-1].startswith("verdict: balanced-efficient: expert compute-bound")


def test_plot_writes_png_curves(capsys, tmp_path):
    assert main(["--plot", str(tmp_path / "plots"), "load_imbalance=0.5"]) == 0
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert names == ["drop_vs_capacity.png", "expert_loads.png", "waste_vs_capacity.png"]
    for name in names:
        data = (tmp_path / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["batch_size=0"], "batch_size"),
        (["capacity_factor=0"], "capacity_factor"),
        (["top_k=65"], "top_k"),
        (["expert_parallel=5"], "expert_parallel"),
        (["experts=8"], "experts"),
        (["top_k=two"], "top_k"),
        (["top_k"], "top_k"),
        (["--inputs", "/nonexistent/in.json"], "/nonexistent/in.json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, named):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0]


def test_a_published_document_as_inputs_takes_overrides_and_refuses_stray_keys(capsys, tmp_path):
    doc = _json(capsys, "--json")
    path = tmp_path / "published.json"
    path.write_text(json.dumps(doc))
    assert _json(capsys, "--inputs", str(path), "top_k=4", "--json")["inputs"]["top_k"] == 4
    path.write_text(json.dumps(doc | {"load_imbalance": 0.5}))
    assert main(["--inputs", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "load_imbalance" in err[0]


def test_inputs_file_must_hold_an_object(capsys, tmp_path):
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    assert main(["--inputs", str(bad)]) == 2
    assert "JSON object" in capsys.readouterr().err
