"""Which kernels each stage of the device run may run (``cutlass_kernels.gating``), the gate of its
tests and pipeline stages, and the order of its steps (``jobs.gpu_run.plan.steps``), on records as the
stages write them."""

from __future__ import annotations

import pytest

from cutlass_kernels import gating
from jobs.gpu_run.plan import (
    RESERVE_S,
    STAGES,
    TOTAL_S,
    UNPACKED_S,
    VARIANT_RESERVE_S,
    Step,
    beyond,
    reserved_after,
    reserves,
    steps,
)


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


SM90 = ["default", "swiglu", "mxquant", "swiglufwd", "tma_epilogue", "tail64", "cluster2x1"]
SM90 += ["tma_cluster2x1", "tma_tail64", "inplace", "ragged_tile", "inplace_tile"]
CHOSEN = ["tma_epilogue", "tma_cluster2x1", "inplace"]


def test_steps_run_the_gate_then_the_new_kernels_then_the_pairs_then_the_rest():
    order = steps(STAGES, SM90, chosen=CHOSEN)
    gate = ["smoke default", "correctness default"]
    gate += [f"{s} {v}" for v in CHOSEN for s in ("smoke", "correctness")] + ["correctness swiglu"]
    new = ["correctness mxquant", "correctness swiglufwd"]  # elementwise: no smoke stage
    new += [
        f"{s} {v}" for v in ("ragged_tile", "inplace_tile", "tma_tail64") for s in ("smoke", "correctness")
    ]
    new += [f"timing {v}" for v in ("mxquant", "swiglufwd", "ragged_tile", "inplace_tile", "tma_tail64")]
    assert [s.label for s in order] == [
        "env",
        *gate,  # the gate of the stages that run layers: the kernels they run
        *new,  # the kernels no GPU has checked yet: their checks, then their timing
        "timing default",  # what the variant table measures the new ones against
        "pipeline",  # the matched pairs
        "account",
        "loopback",  # the multi-rank rehearsals
        "ranks",
        "packing",  # the packing execution beside its estimate
        "tests",
        "timing swiglu",
        *(f"{s} {v}" for v in ("tail64", "cluster2x1") for s in gating.KERNEL_STAGES),  # timed before
        *(f"timing {v}" for v in CHOSEN),
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
        Step("timing", "default"),
        Step("tests"),
        Step("planted-hang"),
        Step("smoke", "cta2"),
        Step("timing", "cta2"),
        Step("sass"),
    ]


def test_the_reserves_go_to_the_steps_in_order_while_the_window_holds_them():
    """A step may use what is left beyond the reserves granted to the steps after it; the reserves go
    in order while their sum fits the window, and the steps past it (or with none of their own: the
    variants timed before, the chosen ones' timing) run on what the others leave, named by ``beyond``."""
    order = steps(STAGES, SM90, chosen=CHOSEN)
    labels = [s.label for s in order]
    full = reserves(order, float("inf"), CHOSEN)
    assert [labels[i] for i, r in enumerate(full) if not r] == [
        *(f"{s} {v}" for v in ("tail64", "cluster2x1") for s in gating.KERNEL_STAGES),
        *(f"timing {v}" for v in CHOSEN),
    ]
    assert full[labels.index("smoke tma_epilogue")] == VARIANT_RESERVE_S["smoke"]
    assert full[labels.index("timing ragged_tile")] == VARIANT_RESERVE_S["timing"]
    budget = TOTAL_S - UNPACKED_S
    granted = reserves(order, budget, CHOSEN)
    assert sum(granted) <= budget < sum(full)
    first_out = next(i for i, (g, f) in enumerate(zip(granted, full, strict=True)) if f and not g)
    assert granted[:first_out] == full[:first_out] and not any(granted[first_out:])
    assert labels.index("pipeline") < first_out  # the new kernels and the matched pairs fit
    assert beyond(order, granted, CHOSEN) == [labels[i] for i in range(first_out, len(order)) if full[i]]
    assert reserved_after(granted, 0) == sum(granted) - granted[0]
    assert reserved_after(granted, labels.index("pipeline"), 2.0) == 2 * sum(
        granted[labels.index("pipeline") + 1 :]
    )
    # a rerun's smaller window: the first steps keep theirs, the rest none
    small = reserves(order, 100, CHOSEN)
    assert sum(small) <= 100 and small[0] == RESERVE_S["env"] and not small[-1]
