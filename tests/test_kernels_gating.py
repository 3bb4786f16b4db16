"""Which kernels each stage of the device run may run (``cutlass_kernels.gating``), the gate of its
tests and pipeline stages, and the order of its steps (``jobs.gpu_run.plan.steps``), on records as the
stages write them."""

from __future__ import annotations

import pytest

from cutlass_kernels import gating
from jobs.gpu_run.plan import RESERVE_S, TOTAL_S, Step, reserved_after, steps


def verdict(stage: str, k: str, status: str = "pass", **why: str) -> dict:
    return {"stage": stage, "name": "verdict", "verdict": True, "key": k, "status": status, **why}


def passed_all(k: str, stages: tuple[str, ...] = gating.KERNEL_STAGES) -> list[dict]:
    return [verdict(s, k) for s in stages]


def refusal(arch: str, records: list[dict], stage: str, k: str) -> str:
    return gating.refusal(arch, gating.verdicts(records), stage, k)


def test_a_key_runs_only_after_passing_every_earlier_stage():
    k = "dgrad/float32/tail64"
    assert refusal("sm_90a", [], "smoke", k) == ""
    assert "no smoke verdict" in refusal("sm_90a", [], "correctness", k)  # never run, or cut
    records = [verdict("smoke", k)]
    assert refusal("sm_90a", records, "correctness", k) == ""
    assert "no correctness verdict" in refusal("sm_90a", records, "timing", k)
    hung = [*records, verdict("correctness", k, "fail", error="timed out after 50 s (hang?)")]
    assert refusal("sm_90a", hung, "timing", k) == f"{k} failed correctness: timed out after 50 s (hang?)"
    wrong = [verdict("smoke", k, "fail", error="wrong result")]
    assert "failed smoke: wrong result" in refusal("sm_90a", wrong, "correctness", k)
    assert "failed smoke" in refusal("sm_90a", wrong, "timing", k)


def test_the_latest_verdict_counts():
    k = "fprop/bfloat16/default"
    assert refusal("sm_90a", [verdict("smoke", k, "fail"), verdict("smoke", k)], "correctness", k) == ""
    assert refusal("sm_90a", [verdict("smoke", k), verdict("smoke", k, "fail")], "correctness", k)


def test_hopper_mx_is_keyed_to_its_fprop_kernel_and_blackwell_mx_to_its_own():
    mx, fprop = "mx/bfloat16/cluster2x1", "fprop/bfloat16/cluster2x1"
    assert gating.kernel_key("sm_90a", mx) == fprop and gating.kernel_key("sm_100a", mx) == mx
    # the fprop kernel's failed smoke test keeps the MX op out of every later stage on sm90
    failed_fprop = [verdict("smoke", fprop, "fail", error="hang")]
    assert f"{fprop} failed smoke" in refusal("sm_90a", failed_fprop, "correctness", mx)
    assert f"{fprop} failed smoke" in refusal("sm_90a", failed_fprop, "timing", mx)
    # its own correctness, and its kernel's, are both needed for timing
    ok = [verdict("smoke", fprop), verdict("correctness", fprop)]
    assert "no correctness verdict" in refusal("sm_90a", ok, "timing", mx)
    assert refusal("sm_90a", [*ok, verdict("correctness", mx)], "timing", mx) == ""
    assert "failed correctness" in refusal("sm_90a", [*ok, verdict("correctness", mx, "fail")], "timing", mx)
    # an MX op wrong on its own leaves fprop free
    assert refusal("sm_90a", [*ok, verdict("correctness", mx, "fail")], "timing", fprop) == ""
    # on sm100 the MX kernel is its own: fprop's failure does not touch it
    assert refusal("sm_100a", [*failed_fprop, verdict("smoke", mx)], "correctness", mx) == ""


def test_the_swiglu_kernel_has_no_smoke_stage_and_is_timed_after_its_correctness():
    k = gating.SWIGLU_KEY
    assert gating.stages_of(k) == ("correctness", "timing") and gating.kernel_key("sm_90a", k) == k
    assert refusal("sm_100a", [], "correctness", k) == ""
    assert refusal("sm_90a", [], "smoke", k) == f"{k} has no smoke stage"
    assert "no correctness verdict" in refusal("sm_90a", [], "timing", k)
    assert refusal("sm_90a", [verdict("correctness", k)], "timing", k) == ""
    wrong = [verdict("correctness", k, "fail", error="3 of 5 case(s) failed")]
    assert refusal("sm_90a", wrong, "timing", k) == f"{k} failed correctness: 3 of 5 case(s) failed"


def test_the_gate_needs_the_default_kernels_the_swiglu_kernel_and_the_chosen_variants():
    assert gating.GATE_KEYS == (
        "fprop/bfloat16/default",
        "dgrad/bfloat16/default",
        "wgrad/bfloat16/default",
        gating.SWIGLU_KEY,
    )

    def gate(records: list[dict], keys: tuple[str, ...] = gating.GATE_KEYS) -> str:
        return gating.gate("sm_90a", gating.verdicts(records), keys)

    good = [r for k in gating.GATE_KEYS for r in passed_all(k, gating.stages_of(k))]
    assert gate(good) == ""
    no_timing = [r for k in gating.GATE_KEYS for r in passed_all(k, gating.stages_of(k)[:-1])]
    assert gate(no_timing) == ""  # timing not run: the checks passed
    others = [
        verdict("smoke", "fprop/float32/default", "fail"),
        verdict("correctness", "mx/bfloat16/default", "fail"),
    ]
    assert gate(good + others) == ""  # only the gate's keys count
    hung = [*good, verdict("smoke", "wgrad/bfloat16/default", "fail", error="timed out after 45 s (hang?)")]
    assert gate(hung) == "wgrad/bfloat16/default failed smoke: timed out after 45 s (hang?)"
    cut = [r for r in good if r["key"] != "dgrad/bfloat16/default" or r["stage"] != "correctness"]
    assert gate(cut) == "dgrad/bfloat16/default has no correctness verdict (not run, or cut)"
    slow = [*good, verdict("timing", "fprop/bfloat16/default", "fail", error="timed out")]
    assert gate(slow) == ""  # decided before timing: slow is not wrong
    swiglu = [r for r in good if r["key"] != gating.SWIGLU_KEY]
    assert gate(swiglu) == f"{gating.SWIGLU_KEY} has no correctness verdict (not run, or cut)"
    # the variants the per-shape table names: each must pass too, the MX op with the fprop kernel of
    # its variant (sm90 has no block-scaled MMA)
    chosen = gating.chosen_keys({"mx": ["tma_epilogue"], "wgrad": ["inplace"]})
    assert chosen == ("mx/bfloat16/tma_epilogue", "wgrad/bfloat16/inplace")
    keys = (*gating.GATE_KEYS, *chosen)
    assert gate(good, keys) == "fprop/bfloat16/tma_epilogue has no smoke verdict (not run, or cut)"
    variants = [
        verdict("smoke", "fprop/bfloat16/tma_epilogue"),
        verdict("correctness", "fprop/bfloat16/tma_epilogue"),
        verdict("correctness", "mx/bfloat16/tma_epilogue"),
        *passed_all("wgrad/bfloat16/inplace", ("smoke", "correctness")),
    ]
    assert gate(good + variants, keys) == ""
    wrong = [*good, *variants, verdict("correctness", "wgrad/bfloat16/inplace", "fail", error="wrong")]
    assert gate(wrong, keys) == "wgrad/bfloat16/inplace failed correctness: wrong"


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="'tests' is not allowed; allowed: smoke, correctness, timing"):
        gating.refusal("sm_90a", {}, "tests", "fprop/bfloat16/default")


def test_steps_run_the_gate_then_tests_then_timing_then_pipeline_then_the_other_variants():
    order = steps(
        ["env", "smoke", "correctness", "timing", "tests", "loopback", "ranks", "pipeline"],
        ["tail64", "default", "swiglu", "inplace"],
    )
    assert [s.label for s in order] == [
        "env",
        "smoke default",
        "correctness default",
        "correctness swiglu",  # the SwiGLU backward kernel: no smoke stage
        "tests",
        "loopback",  # the multi-rank rehearsals: as soon as the kernels they run are known good
        "ranks",
        "timing default",
        "timing swiglu",
        "pipeline",
        *(f"{s} {v}" for v in ("tail64", "inplace") for s in gating.KERNEL_STAGES),
        "sass",
    ]
    planted = steps(
        ["smoke", "timing", "tests"],
        ["default", "cta2"],
        {"smoke": ["planted-fail"], "tests": ["planted-hang"]},
    )
    assert planted == [
        Step("smoke", "default"),
        Step("planted-fail"),
        Step("tests"),
        Step("planted-hang"),
        Step("timing", "default"),
        Step("smoke", "cta2"),
        Step("timing", "cta2"),
        Step("sass"),
    ]


def test_each_named_step_keeps_its_reserve_from_the_start():
    """A step may use what is left beyond the reserves of the steps after it: the tests' and the
    pipeline's time stays theirs whatever the kernel stages take, and the unnamed steps (the other
    variants) reserve nothing."""
    order = steps(
        ["env", "smoke", "correctness", "timing", "tests", "loopback", "ranks", "pipeline"],
        ["default", "swiglu", "tail64"],
    )
    labels = [s.label for s in order]
    after_env = reserved_after(order, 0)
    assert after_env == sum(RESERVE_S[label] for label in labels[1:] if label in RESERVE_S)
    assert reserved_after(order, labels.index("tests")) == sum(
        RESERVE_S[k] for k in ("loopback", "ranks", "timing default", "timing swiglu", "pipeline", "sass")
    )
    assert reserved_after(order, labels.index("pipeline")) == RESERVE_S["sass"]
    assert reserved_after(order, labels.index("timing tail64"), 2.0) == 2 * RESERVE_S["sass"]
    assert after_env + RESERVE_S["env"] <= TOTAL_S - 20  # and the unpacking's ~20 s
