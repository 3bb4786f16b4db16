"""The kernel stages of the device run: smoke, correctness and timing of each op x variant, and the
correctness and timing of the elementwise kernels, each check a child of its own, a key run in a stage
only where every earlier stage passed it (:mod:`cutlass_kernels.gating`); the SASS check of the cubins
smoke kept; and the gate of the stages that run layers."""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from cutlass_kernels import gating
from cutlass_kernels.gating import MX_QUANT_KEY, key
from cutlass_kernels.results import read
from jobs.gpu_run.plan import ELEMENTWISE, SPENT, TIMING_MARGIN_S, Step
from jobs.gpu_run.run import Run, parallel, say, stage, verdict


def kernel_step(run: Run, step: Step, plan: list[dict[str, Any]], deadline: float) -> bool:
    """One kernel stage for one variant; its verdicts are in results.jsonl when it returns."""
    bodies = {"smoke": _smoke, "correctness": _correctness, "timing": _timing}
    if step.variant in ELEMENTWISE:
        bodies = {s: functools.partial(_elementwise, stage=s) for s in ("correctness", "timing")}
    start = time.monotonic()
    if run.left(deadline) <= 1:
        say(run, f"{step.label}: skip ({SPENT})")
        run.record(step.stage, name="stage", variant=step.variant, status="skip", reason=SPENT)
        return False
    mark, left = len(read(run.results)), run.left(deadline)
    bodies[step.stage](run, step.variant or "default", plan, deadline)
    found = [r for r in read(run.results)[mark:] if r.get("verdict") is True]
    count = {s: sum(r["status"] == s for r in found) for s in ("pass", "fail", "skip")}
    status = "fail" if count["fail"] else "pass" if count["pass"] else "skip"
    seconds = round(time.monotonic() - start, 1)
    tally = ", ".join(f"{n} {k}" for k, n in count.items() if n)
    say(run, f"{step.label}: {status} in {seconds} s ({tally or 'no verdict'})")
    run.record(
        step.stage,
        name="stage",
        variant=step.variant,
        status=status,
        seconds=seconds,
        left_s=round(left),
        verdicts=count,
    )
    run.summarize()
    return status == "pass"


def _smoke(run: Run, variant: str, plan: list[dict[str, Any]], deadline: float) -> None:
    def one(kernel: dict[str, Any]) -> None:
        rec = {"name": kernel["spec"], "key": kernel["key"], "variant": variant, "verdict": True}
        rec |= {"op": kernel["op"], "out_dtype": kernel["out_dtype"]}
        limit = min(run.limits["smoke-kernel"], run.left(deadline))
        if limit <= 1:
            run.record("smoke", **rec, status="skip", reason=SPENT)
            return
        args = ["--index", str(kernel["index"]), "--op", kernel["op"], "--out-dtype", kernel["out_dtype"]]
        done = run.child(run.kernels_cli("smoke-one", *args, "--variant", variant), limit)
        found = [line for line in done.output.splitlines() if line.startswith("{")]
        if done.rc == 0 and found:
            rec |= json.loads(found[-1])
        elif run.cut(done, limit, "smoke-kernel"):
            rec |= {"status": "skip", "reason": SPENT}
        else:
            rec |= {"status": "fail", "error": done.why(limit)}
        run.record("smoke", **rec, seconds=round(done.seconds, 2))

    kernels = [k for k in plan if k.get("name") == "kernel" and k["variant"] == variant]
    parallel(run, [functools.partial(one, k) for k in kernels])


def _correctness(run: Run, variant: str, plan: list[dict[str, Any]], deadline: float) -> None:
    """One child per op of ``variant``; every key of a child left without a verdict (killed,
    crashed) gets a failed one."""

    def one(op: str) -> None:
        keys = [key(op, d, variant) for d in ("bfloat16", "float32")]
        found = gating.verdicts(read(run.results))
        refused = {k: gating.refusal(run.arch, found, "correctness", k) for k in keys}
        if all(refused.values()):  # nothing to check: no child
            for k, why in refused.items():
                verdict(run, "correctness", k, "skip", reason=why)
            return
        limit = min(run.limits["correctness-kernel"], run.left(deadline))
        if limit <= 1:
            for k in keys:
                verdict(run, "correctness", k, "skip", reason=SPENT)
            return
        mark = len(read(run.results))
        done = run.child(run.kernels_cli("correctness-op", "--op", op, "--variant", variant), limit)
        judged = {r["key"] for r in read(run.results)[mark:] if r.get("verdict") is True}
        for k in keys:
            if k in judged:
                continue
            if run.cut(done, limit, "correctness-kernel"):
                verdict(run, "correctness", k, "skip", reason=SPENT)
            else:
                verdict(run, "correctness", k, "fail", error=done.why(limit))

    ops = [r["op"] for r in plan if r.get("name") == "op variant" and r["variant"] == variant]
    parallel(run, [functools.partial(one, op) for op in ops])


def _timing(run: Run, variant: str, plan: list[dict[str, Any]], deadline: float) -> None:
    """One child per op of ``variant`` (BF16 out, as the layers run), one after the other on a GPU,
    whose time is what they measure (side by side in the dry run); each child gets an equal share of
    what the stage has left, so every op is timed on its first (chosen) shapes."""

    def one(op: str, share: int) -> None:
        k = key(op, "bfloat16", variant)
        if refused := gating.refusal(run.arch, gating.verdicts(read(run.results)), "timing", k):
            verdict(run, "timing", k, "skip", reason=refused)
            return
        limit = min(run.limits["timing-kernel"], run.left(deadline) / share)
        if limit <= 1:
            verdict(run, "timing", k, "skip", reason=SPENT)
            return
        budget = max(limit - TIMING_MARGIN_S * run.scale, limit / 2)
        argv = run.kernels_cli("timing-op", "--op", op, "--variant", variant, "--budget", f"{budget:.0f}")
        env, how = _quantizer(run, op)
        done = run.child(argv, limit, env)
        if done.rc == 0:
            verdict(run, "timing", k, "pass", **how)
        elif run.cut(done, limit, "timing-kernel"):
            verdict(run, "timing", k, "skip", reason=SPENT)
        else:
            verdict(run, "timing", k, "fail", error=done.why(limit))

    ops = [r["op"] for r in plan if r.get("name") == "op variant" and r["variant"] == variant]
    if run.dry_run:
        parallel(run, [functools.partial(one, op, 1) for op in ops])
    for i, op in enumerate([] if run.dry_run else ops):
        parallel(run, [functools.partial(one, op, len(ops) - i)])


def _quantizer(run: Run, op: str) -> tuple[dict[str, str], dict[str, str]]:
    """The MX op's timing child quantizes A by the one-pass kernel where that passed its correctness
    (else by the torch form): its environment, and the verdict's word on it."""
    if op != "mx":
        return run.env, {}
    if gating.refusal(run.arch, gating.verdicts(read(run.results)), "timing", MX_QUANT_KEY):
        return run.env, {"quantizer": "torch"}
    return {**run.env, gating.MX_QUANTIZER_ENV: "kernel"}, {"quantizer": "kernel"}


def _elementwise(run: Run, name: str, plan: list[dict[str, Any]], deadline: float, stage: str) -> None:
    """An elementwise kernel's ``stage`` (``name`` one of :data:`ELEMENTWISE`: the SwiGLU backward, the
    MX quantization, the SwiGLU forward): one child, gated like the GEMMs (timing only after a passed
    correctness). Its verdict: correctness passes where every case did; timing where every shape was
    timed (a shape short of the bandwidth goal is a failed record of its own, not a hang)."""
    k = ELEMENTWISE[name]
    if refused := gating.refusal(run.arch, gating.verdicts(read(run.results)), stage, k):
        verdict(run, stage, k, "skip", variant=name, reason=refused)
        return
    limit = min(run.limits[f"{name}-kernel"], run.left(deadline))
    if limit <= 1:
        verdict(run, stage, k, "skip", variant=name, reason=SPENT)
        return
    mark = len(read(run.results))
    done = run.child(run.kernels_cli(f"{name}-{stage}"), limit)
    found = [r for r in read(run.results)[mark:] if r.get("stage") == stage and r.get("verdict") is not True]
    failed = [r for r in found if r.get("status") != "pass"]
    timed = stage == "timing" and done.rc == 1 and bool(found) and not any(r.get("error") for r in found)
    if done.rc == 0 or timed:
        short = f"{len(failed)} of {len(found)} shape(s) short of the bandwidth goal"
        verdict(run, stage, k, "pass", variant=name, **({"note": short} if timed else {}))
    elif done.rc == 1 and found:
        verdict(run, stage, k, "fail", variant=name, error=f"{len(failed)} of {len(found)} case(s) failed")
    elif run.cut(done, limit, f"{name}-kernel"):
        verdict(run, stage, k, "skip", variant=name, reason=SPENT)
    else:
        verdict(run, stage, k, "fail", variant=name, error=done.why(limit))


def sass(run: Run, deadline: float) -> None:
    """The SASS of every cubin the smoke tests kept (cuobjdump: no GPU time, but the GPU machine)."""
    if run.dry_run:
        run.record("sass", name="sass", status="skip", reason="the dry run compiles no kernel")
        return
    stage(run, Step("sass"), lambda limit: (run.child(run.kernels_cli("sass"), limit).rc, ""), deadline)


def gate(run: Run) -> dict[str, str]:
    """The environment of the stages that run layers (:data:`GATED`): the run's, with ``auto`` pinned
    to the torch backend unless the default kernels passed (:func:`cutlass_kernels.gating.gate`)."""
    keys = (*gating.GATE_KEYS, *gating.chosen_keys(run.chosen))
    shut = gating.gate(run.arch, gating.verdicts(read(run.results)), keys)
    backend = "torch" if shut else "cute kernels"
    run.record(
        "gate",
        name="default kernels",
        status="fail" if shut else "pass",
        backend=backend,
        reason=shut or None,
    )
    return {**run.env, gating.BACKEND_ENV: "torch"} if shut else run.env
