"""The device run from start to end: the command line, the watched child that runs the steps under an
outer limit (however it ends, its records are closed and its summary printed last), the steps in
order, each within the run's deadline less the reserves of the steps after it, and the arguments of a
rerun that finishes what had no time."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cutlass_kernels.gating import KERNEL_STAGES
from cutlass_kernels.isolation import run_isolated
from cutlass_kernels.results import append, read
from jobs.gpu_run.environment import env_step, environment, no_gpu, plan_child, unpack
from jobs.gpu_run.kernels import gate, kernel_step, sass
from jobs.gpu_run.layers import GATED, account, gated, planted_stage
from jobs.gpu_run.plan import (
    DEFAULT,
    ELEMENTWISE,
    INNER_ENV,
    NEW,
    OUTER_S,
    RERUN_TOTAL_S,
    ROOT,
    RUN_SPENT,
    SPENT,
    STAGES,
    TOTAL_S,
    UNPACKED_S,
    Step,
    asked,
    beyond,
    contention,
    reserved_after,
    reserves,
    steps,
)
from jobs.gpu_run.run import Run, now, say, stage
from jobs.gpu_run.summary import write_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/gpu-run.sh", description="GPU readiness run")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="on this CPU: torch backend, gloo, scale=ci")
    parser.add_argument(
        "--only", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}"
    )
    parser.add_argument(
        "--variants",
        default="all",
        help="kernel variants of the kernel stages: all, or NAME,... (default first)",
    )
    parser.add_argument("--whl", type=Path, default=ROOT / ".whl", help="the packed wheels (default: .whl/)")
    parser.add_argument(
        "--plant",
        action="append",
        default=[],
        metavar="KIND:AFTER | KIND:STAGE:KEY",
        help="a planted stage (KIND fail or hang) after stage AFTER, or the tests or pipeline stage "
        "planted to stall (stall:STAGE); in the dry run, a planted kernel fault (KIND hang, wrong or "
        "zero-times-inf) in STAGE (or *) for kernel keys matching KEY",
    )
    parser.add_argument("--limit", action="append", default=[], metavar="NAME=SECONDS")
    parser.add_argument(
        "--dataset",
        type=Path,
        help="the pipeline's dataset folder, kept: a rerun into it runs only what is not done there "
        "(default: a fresh one in the run's scratch folder, kept as OUT_DIR/dataset.tar.gz)",
    )
    parser.add_argument("--total", type=float, default=TOTAL_S, help=f"the whole run's seconds ({TOTAL_S})")
    args = parser.parse_args(argv)
    try:
        wanted = asked(args)
    except ValueError as e:
        print(f"gpu-run: {e}", file=sys.stderr)
        return 2
    if inner := os.environ.get(INNER_ENV):
        scale, work, run_id = json.loads(inner)
        with open(args.out_dir / "log.txt", "a", buffering=1) as log:
            run = Run(
                args.out_dir,
                Path(work),
                args.dry_run,
                time.monotonic() + args.total * scale,
                log,
                run_id,
                {name: seconds * scale for name, seconds in wanted.limits.items()},
                wanted.plants,
                scale=scale,
                stalls=wanted.stalls,
                whl=args.whl,
                named_dataset=args.dataset and args.dataset.resolve(),
            )
            try:
                return _run_all(run, args, wanted.stages, wanted.variants, wanted.planted)
            except Exception:  # the scheduler's own fault: recorded, and the summary still written
                import traceback

                run.record("run", status="fail", ended=now(), error=traceback.format_exc()[-2000:])
                run.summarize(force=True)
                raise
            finally:
                run.close()
    if not args.dry_run and (problem := no_gpu()):
        print(f"gpu-run: no GPU here ({problem}); on a CPU machine use --dry-run", file=sys.stderr)
        return 2
    return _watch(args, sys.argv[1:] if argv is None else argv)


class _Terminated(Exception):
    pass


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated(signal.Signals(signum).name)


def _watch(args: argparse.Namespace, argv: list[str]) -> int:
    """Run the run itself in a child under an outer limit (its total and :data:`OUTER_S` more), which
    holds whatever the run does; then, however it ended (also on SIGTERM or SIGINT here), close its
    records and print its summary as the last thing on stdout."""
    scale = contention() if args.dry_run else 1.0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-run-"))
    run_id = f"{time.time_ns() // 10**6}"
    outer = (args.total + OUTER_S) * scale
    env = {**os.environ, INNER_ENV: json.dumps([scale, str(work), run_id])}
    killed = ""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _terminated)
    try:
        done = run_isolated(
            [sys.executable, "-u", "-m", "jobs.gpu_run", *argv], outer, env=env, log=sys.stdout
        )
        rc = 1 if done.rc is None else done.rc
        killed = f"killed at the run's outer limit of {outer:.0f} s" if done.rc is None else ""
    except _Terminated as e:
        rc, killed = 143 if str(e) == "SIGTERM" else 130, f"stopped by {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)  # unpacked wheels, compile cache, cubins, dataset
    if killed:
        results = args.out_dir / "results.jsonl"
        append(results, {"run": run_id, "stage": "run", "status": "fail", "ended": now(), "reason": killed})
        print(f"gpu-run: {killed}", flush=True)
    with contextlib.suppress(Exception):
        write_summary(args.out_dir)
    if (args.out_dir / "summary.md").exists():
        print("\n" + (args.out_dir / "summary.md").read_text(), end="", flush=True)
    return rc


def _run_all(
    run: Run,
    args: argparse.Namespace,
    stages: list[str],
    variants: tuple[str, ...] | None,
    planted: dict[str, list[str]],
) -> int:
    run.env = environment(run)
    run.record(
        "run",
        status="info",
        argv=sys.argv[1:],
        started=now(),
        dry_run=run.dry_run,
        work=str(run.work),
        scale=round(run.scale, 2),
        total_s=round(run.left()),
    )
    unpack(run, args.whl)
    ok = True
    plan: list[dict[str, Any]] = []
    budget = args.total - UNPACKED_S  # the window's seconds for the steps' reserves
    if "env" in stages:
        later = steps(stages, [DEFAULT, *ELEMENTWISE, *NEW])  # the variants are not known yet
        deadline = run.deadline - reserved_after(reserves(later, budget), 0, run.scale)
        ok &= stage(run, Step("env"), lambda limit: env_step(run, limit, plan), deadline)
    elif any(s in stages for s in KERNEL_STAGES):
        ok &= stage(run, Step("plan"), lambda limit: plan_child(run, limit, plan))
    names = _variants_of(run, plan, variants)
    run.chosen = next((r["variants"] for r in plan if r.get("name") == "chosen"), {})
    picked = [v for v in names if any(v in vs for vs in run.chosen.values())]
    order = steps(stages, names, planted, picked)
    granted = reserves(order, budget, picked)
    labels = [s.label for s in order]
    past = beyond(order, granted, picked)
    run.record("run", name="plan", status="info", steps=labels, reserve_s=granted, beyond=past)
    beyond_note = f"; past the window's reserves: {', '.join(past)}" if past else ""
    say(run, f"plan: {len(order)} steps, {sum(granted):.0f} s of {budget:.0f} reserved{beyond_note}")
    for i, step in enumerate(order):
        deadline = run.deadline - reserved_after(granted, i, run.scale)
        if step.stage == "env":
            continue
        if step.variant is not None:
            ok &= kernel_step(run, step, plan, deadline)
        elif step.stage == "sass":
            sass(run, deadline)
        elif step.stage.startswith("planted-"):
            ok &= stage(run, step, planted_stage(run, step.stage), deadline)
        elif step.stage == "account":
            ok &= stage(run, step, lambda limit: account(run), deadline)
        else:
            ok &= stage(run, step, gated(run, step.stage), deadline)
    if any(s in stages for s in KERNEL_STAGES) and not set(GATED) & set(stages):
        gate(run)  # recorded: what the stages that run layers would run on
    if rerun := rerun_args(run):
        run.record("run", name="rerun", status="info", args=rerun)
    run.close()
    run.record("run", status="pass" if ok else "fail", ended=now())
    run.summarize(force=True)
    say(run, f"run {'pass' if ok else 'fail'}: {run.results.parent}/summary.md")
    return 0 if ok else 1


def rerun_args(run: Run) -> list[str]:
    """The arguments of a rerun that runs what this run had no time for: its kernel steps cut, in
    whole or in part (the variants), and its other stages cut."""
    mine = [r for r in read(run.results) if r.get("run") == run.run_id]
    cut = [r for r in mine if r.get("reason") in (SPENT, RUN_SPENT)]
    stages = {r["stage"] for r in cut if r["stage"] in STAGES}
    variants = {r["variant"] for r in cut if r["stage"] in KERNEL_STAGES and r.get("variant")}
    if not stages:
        return []
    args = ["--total", str(RERUN_TOTAL_S), "--only", ",".join(s for s in STAGES if s in stages)]
    return args + (
        ["--variants", ",".join(sorted(variants, key=lambda v: v != "default"))] if variants else []
    )


def _variants_of(run: Run, plan: list[dict[str, Any]], wanted: tuple[str, ...] | None) -> list[str]:
    """The plan's variants with the elementwise kernels' steps (:data:`ELEMENTWISE`) after the default,
    those ``wanted`` only; a wanted name the arch lacks is recorded."""
    known = list(dict.fromkeys(r["variant"] for r in plan if r.get("name") == "op variant"))
    known = [*known[:1], *ELEMENTWISE, *known[1:]] if known else []
    if wanted is None:
        return known
    for name in wanted:
        if name not in known:
            run.record(
                "plan", name="variant", status="fail", error=f"--variants {name!r} is not one of {known}"
            )
    return [v for v in known if v in wanted]
