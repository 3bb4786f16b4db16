"""Suites are configuration (pipeline/matrix/suite.py, conf/suite/): the report's, seed 003's and a
file of one's own, read, checked, scaled and listed; a malformed one refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.compose.matrix_cli import main as list_main
from pipeline.data.comparable import Comparable, text
from pipeline.matrix import REPORT, Suite, counts
from pipeline.matrix.assumptions import assumptions
from pipeline.matrix.scale import scale_from_config, shape_for
from pipeline.matrix.suite import load

CONF = Path(__file__).resolve().parents[1] / "conf"
REPORT_WORKLOADS = [
    *(f"{kind}-ep{ep}-f{f}" for kind, eps in (("inference", (8, 16)), ("training", (32, 64))) for ep in eps
      for f in ("1536", "3072", "6144", "3072-imb2.0")),
    *(f"packing-ep{ep}-f3072-profile-{p}" for ep in (32, 64) for p in ("balanced", "a", "b")),
]  # fmt: skip
MIXTRAL = {
    "name": "mixtral",
    "publishes": ["pairs", "cases"],
    "shape": {"d_model": 4096, "d_ff": 14336, "num_experts": 8, "top_k": 2, "num_shared": 0, "tokens": 4096},
    "workloads": [{"kind": "inference", "ep": 2}, {"kind": "training", "ep": 2, "imbalance": [1.0, 1.5]}],
    "variants": ["mok-bf16", {"implementation": "dist-moe", "precision": "bf16"}],
}


def scale(name: str, max_ranks: int | None = 2):
    return scale_from_config(yaml.safe_load((CONF / "scale" / f"{name}.yaml").read_text()), max_ranks)


def list_lines(capsys, *arguments: str) -> tuple[int, list[str], str]:
    code = list_main(list(arguments))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_the_report_suite_is_the_reports_matrix():
    assert REPORT.name == "report" and REPORT.publishes == ("pairs",) and REPORT.check == "slice"
    assert [w.name for w in REPORT.workloads] == REPORT_WORKLOADS  # in the report's order
    assert counts(REPORT.executions) == (110, 44, 66)
    assert [a.what for a in assumptions(REPORT)][:2] == [
        "imbalanced inference and training",
        "balanced packing",
    ]
    touched = assumptions(REPORT)[0].executions
    assert len(touched) == 20 and all("-imb2.0-" in e for e in touched)


def test_seed_003_is_sixteen_forward_cases_without_a_shared_expert(capsys):
    suite = load("seed-003")
    assert (suite.publishes, suite.check) == (("cases",), "case")
    tokens = [w.tokens for w in suite.workloads]
    assert tokens == [1024 * n for n in range(1, 17)]
    assert {
        (w.kind, w.ep, w.d_model, w.d_ff, w.num_experts, w.top_k, w.num_shared) for w in suite.workloads
    } == {("inference", 1, 8192, 2048, 256, 8, 0)}
    assert any(a.what == "seed 003's token counts" and len(a.executions) == 16 for a in assumptions(suite))
    code, lines, _ = list_lines(capsys, "suite=seed-003")
    assert code == 0 and lines[-1] == "16 executions, 16 workloads, 0 pairs"
    assert lines[0].split()[0] == "inference-ep1-f2048-d8192-e256-k8-s0-bf16-dist-moe-bf16"  # T = 2,048


def test_a_definition_reads_back_as_the_suite_it_came_from():
    for suite in (REPORT, load("seed-003"), Suite.of(MIXTRAL)):
        again = Suite.of(suite.definition())
        assert again == suite and again.digest == suite.digest
    mixtral = Suite.of(MIXTRAL)
    assert [w.name for w in mixtral.workloads] == [
        "inference-ep2-f14336-t4096-d4096-e8-k2-s0",
        "training-ep2-f14336-t4096-d4096-e8-k2-s0",
        "training-ep2-f14336-imb1.5-t4096-d4096-e8-k2-s0",
    ]
    assert mixtral.variant_names() == ["mok-bf16", "dist-moe-bf16"]
    assert counts(mixtral.executions) == (6, 3, 3)


@pytest.mark.parametrize(
    ("scale_name", "tokens", "d_model", "d_ff"),
    # T x 64 / 2,048; D x 224 / 7,168 to a multiple of 32; F / 48 to a multiple of 32 (at least 32)
    [("ci", (8, 128), 64, 32), ("cpu", (32, 512), 256, 32), ("full", (1024, 16384), 8192, 2048)],
)
def test_another_shape_is_scaled_by_the_scales_ratios_to_values_it_can_take(
    scale_name, tokens, d_model, d_ff
):
    suite = load("seed-003")
    for workload, t in zip((suite.workloads[0], suite.workloads[-1]), tokens, strict=True):
        shape = shape_for(workload, scale(scale_name, None if scale_name == "full" else 2))
        assert (shape.nominal_tokens, shape.d_model, shape.d_ff) == (t, d_model, d_ff)
        assert (shape.num_experts, shape.top_k, shape.num_shared, shape.ranks) == (256, 8, 0, 1)
    mixtral = Suite.of(MIXTRAL).workloads[0]  # F = 14,336 / 48 = 298.7 -> 288; E = 8 over EP2
    shape = shape_for(mixtral, scale("cpu"))
    assert (shape.d_ff, shape.d_model, shape.num_experts, shape.layer_experts) == (288, 128, 8, 8)


def test_the_report_shape_runs_a_scale_as_written():
    with pytest.raises(ValueError, match="d_ff_divisor 7 does not divide d_ff 1536"):
        shape_for(
            REPORT.workloads[0],
            scale_from_config({**yaml.safe_load((CONF / "scale/ci.yaml").read_text()), "d_ff_divisor": 7}, 2),
        )


MALFORMED = [
    (
        {"workloads": [{"kind": "inference", "ep": 3}]},
        "workloads[0].ep 3 does not divide num_experts 8; allowed: 1, 2, 4, 8",
    ),
    (
        {"shape": {**MIXTRAL["shape"], "top_k": 10}},
        "workloads[0].top_k 10 exceeds num_experts 8; allowed: 1..8",
    ),
    (
        {"variants": [{"implementation": "fast-moe"}]},
        "implementation 'fast-moe' is not allowed; allowed: mok, dist-moe",
    ),
    (
        {"shape": {k: v for k, v in MIXTRAL["shape"].items() if k != "num_experts"}},
        "workloads[0] lacks num_experts",
    ),
    (
        {"workloads": [{"kind": "inference", "ep": 2, "experts": 8}]},
        "unknown key 'experts'; allowed: kind, ep, d_ff",
    ),
    ({"variants": ["mok-fp4"]}, "variants[0] 'mok-fp4'; allowed: mok-bf16, mok-mxfp8, dist-moe-bf16"),
    ({"check": "all"}, "check 'all'; allowed: slice, case"),
    ({"workloads": [{"kind": "packing", "ep": 2}]}, "profile 'none'; allowed for packing: balanced, a, b"),
    (
        {"workloads": [{"kind": "inference", "ep": 2, "imbalance": 3.0}]},
        "imbalance 3.0; allowed: a number in (0, 2]",
    ),
    (
        {"shape": {**MIXTRAL["shape"], "tokens": 10**9}},
        "tokens 1000000000; allowed: an integer in 1..131,072",
    ),
    (
        {"workloads": [{"kind": "inference", "ep": 2}] * 2},
        "inference-ep2-f14336-t4096-d4096-e8-k2-s0 is listed twice",
    ),
]


@pytest.mark.parametrize(("change", "says"), MALFORMED)
def test_a_malformed_suite_is_refused_naming_the_field_and_what_is_allowed(change, says):
    with pytest.raises(ValueError) as refused:
        Suite.of({**MIXTRAL, **change})
    assert str(refused.value).startswith("suite mixtral: ") and says in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("change", "says"), MALFORMED[:5])
def test_a_malformed_suite_file_is_refused_by_the_commands_in_one_line_with_exit_2(
    tmp_path, capsys, change, says
):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "mine.yaml").write_text(yaml.safe_dump({**MIXTRAL, "name": "mine", **change}))
    code, lines, err = list_lines(capsys, "--config-dir", str(tmp_path), "suite=mine", "scale=cpu")
    assert (code, lines) == (2, []) and err.count("\n") == 1
    assert err.startswith("error: suite mine: ") and says in err


def test_a_suite_of_ones_own_is_listed_from_its_folder(tmp_path, capsys):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "mixtral.yaml").write_text(yaml.safe_dump(MIXTRAL))
    code, lines, _ = list_lines(capsys, "--config-dir", str(tmp_path), "suite=mixtral", "scale=cpu")
    assert code == 0 and lines[-1] == "6 executions, 3 workloads, 3 pairs"
    code, lines, err = list_lines(capsys, "suite=mixtral")  # not on the search path without the folder
    assert code == 2 and "Could not find 'suite/mixtral'; allowed suite: report, seed-003" in err


def test_a_sweep_runs_one_suite(capsys):
    code, _, err = list_lines(capsys, "suite=report,seed-003")
    assert code == 2 and "a sweep runs one suite" in err


def test_the_suite_is_a_comparable_setting_shown_by_name_and_digest():
    seed_003 = load("seed-003")
    before = Comparable({"scale": "ci", "seed": 0})  # recorded before suites: the report's
    assert before.suite == REPORT
    mine = Comparable.of_config({"suite": seed_003.definition(), "scale": {"name": "ci"}, "seed": 0})
    assert mine.differing(before) == ["suite"]
    assert mine.differences(before) == f"suite={seed_003.label} (the dataset's: {REPORT.label})"
    edited = Suite.of({**seed_003.definition(), "check": "slice"})
    assert text(edited.definition()) != text(seed_003.definition())  # one name, two digests
    assert Comparable.of_config({"suite": {"name": "x"}}).differing(before)[0] == "suite"  # unreadable


def test_a_recorded_suite_that_cannot_be_read_is_refused_naming_why():
    recorded = {**Suite.of(MIXTRAL).definition(), "variants": [{"implementation": "fast-moe"}]}
    with pytest.raises(ValueError, match=r"^the recorded suite cannot be read: suite mixtral: variants\[0\]"):
        _ = Comparable({"suite": recorded}).suite
