"""The device run of ``jobs/gpu-run.sh`` (see its header and docs/gpu.md): the one scheduler of every
check a lent GPU runs, so that no minute goes to a kernel already known to be bad.

The order gives the most truth per second: env (with the plan: the arch's kernels and op x variants),
the default kernels' smoke and correctness and the SwiGLU backward kernel's correctness (together the
gate of the stages that run layers), the tests, the multi-rank rehearsals (loopback: NCCL's
all-to-alls inside captured graphs on one rank; ranks: an EP group's processes sharing the GPU, their
rows crossing ranks, through every execution's correctness gate), the defaults' and the SwiGLU
kernel's timing, the pipeline and the phase account of its single-GPU executions, then each other
variant's smoke, correctness and timing in turn, and the SASS check. Every
step named in :data:`RESERVE_S` keeps its time from the start: a step may use only what the run has
left beyond the reserves of the steps after it, so a slow early step cannot starve a later one, and
what a step does not use goes to the next. Every check is a child process of its own, isolated
(:mod:`cutlass_kernels.isolation`: its own session, a time limit, everything it started killed at it),
and a kernel key runs in a stage only where every earlier stage passed it (:mod:`cutlass_kernels.gating`),
so a kernel that hangs or is wrong costs its own limit once. Smoke runs up to 8 kernels at once,
correctness up to 8 op x variants, timing one at a time (the GPU's time is what it measures). The tests
and pipeline stages run on the CuTe kernels only where the three default BF16 kernels and the SwiGLU
backward passed smoke and correctness, else on the torch backend, and say so. The dry run stretches
every time by the host's load (:func:`contention`).

Every result is a JSON line appended to ``OUT_DIR/results.jsonl`` the moment it exists (flushed and
fsynced), ``OUT_DIR/summary.md`` is rewritten whenever results.jsonl has grown, and each step's end is
one line on stdout, so a run killed from outside still leaves what it did in OUT_DIR and in its
output. OUT_DIR receives results.jsonl, summary.md, log.txt (every child's output),
mok-comparison.csv (the pipeline stage's published rows), kernel-rates.json (the rates the timing
stage measured, which the pipeline's rows publish their expectation from) and dataset.tar.gz (its
shards with each execution's phase account, their profiles, ledger and logs). The run's document
(``docs/gpu-runs/<run>.md``) keeps results.jsonl, mok-comparison.csv, kernel-rates.json and summary.md
beside it and regenerates its tables from them (``jobs/gpu_records.py``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import csv
import datetime
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "jobs"))  # the records' tables and rates (gpu_records.py), torch-free too

from cutlass_kernels import gating  # noqa: E402  (torch-free, like everything imported here)
from cutlass_kernels.gating import KERNEL_STAGES, SWIGLU, SWIGLU_KEY, key  # noqa: E402
from cutlass_kernels.isolation import Isolated, run_isolated  # noqa: E402
from cutlass_kernels.plants import PLANT_ENV, Plant  # noqa: E402
from cutlass_kernels.results import append, read  # noqa: E402
from pipeline.data.atomic import atomic_write  # noqa: E402

TOTAL_S = 550  # the whole run: one call of the device tool (600 s at most) inside a 15-minute window
OUTER_S = 15  # jobs/gpu-run.sh kills the run this long after its total (docs/gpu.md: the call's limit)
STAGES = ("env", "smoke", "correctness", "timing", "tests", "loopback", "ranks", "pipeline", "account")
# each stage's limit; "<stage>-kernel": each child of a kernel stage (one kernel, or one op x variant)
LIMITS_S = {
    "env": 30,
    "tests": 75,
    "loopback": 40,  # one process: a one-rank NCCL group, two layers captured and timed
    "ranks": 90,  # eight processes on one GPU: imports, weights at full scale, two executions' gates
    "pipeline": 280,  # more than its reserve: what the steps before it leave goes to its executions
    "account": 15,  # reads the pipeline's published accounts
    "smoke-kernel": 45,  # compile (file-cached for the later stages) + one launch
    "correctness-kernel": 50,  # every case of an op x variant, both output dtypes, graph replay
    "timing-kernel": 40,  # every shape of an op x variant that fits, see TIMING_MARGIN_S
    "swiglu-kernel": 30,  # the SwiGLU backward's correctness (8 cases) or timing (2 shapes) child
    "sass": 20,
}
# what each step (by its label) keeps for itself from the run's start; the steps not named here (the
# other variants' kernel stages) run on what the named ones leave. Their sum and the unpacking's
# seconds fit TOTAL_S.
RESERVE_S = {
    "env": 25,
    "smoke default": 45,
    "correctness default": 50,
    "correctness swiglu": 30,
    "tests": 60,
    "loopback": 20,
    "ranks": 50,
    "timing default": 60,
    "timing swiglu": 25,
    "pipeline": 150,
    "account": 5,
    "sass": 15,
}
TIMING_MARGIN_S = 10  # a timing child starts no shape this close to its limit: a kill there is a hang
PARALLEL = 8  # smoke and correctness children at once (each one GPU context of ~0.5-5 GB)
MAX_SCALE = 4.0  # the most the dry run stretches its times on a loaded host (see contention())
PLANTED_LIMIT_S = 5
UNPACK_S = 60  # the DSL archive's unpacking (inside the run's TOTAL_S)
SMI_S = 10  # each nvidia-smi call
AGGREGATE_S = 25  # kept back from the pipeline stage for aggregating whatever shards exist
STATUS_S = 10  # and, after a multirun that failed, for pipeline.status
POLL_S = 2.0  # how often summary.md is refreshed while children run
SPENT = "the kernel stages' time is spent"  # why a kernel step was cut
RUN_SPENT = "the run's time is spent"  # why another step was
RERUN_TOTAL_S = 220  # a rerun's budget: what is left of a window after a first run
# the CUDA-only tests, quickest first: pytest runs them in this order, and each ends in a record of
# its own (jobs/pytest_records.py) the moment it ends; the NCCL cases share one spawned rank
CUDA_TESTS = (
    "tests/test_run_timing.py::test_cuda_laps_are_the_kernels_intervals",
    "tests/test_run_graphs.py",
    "tests/test_moe_layer.py::test_nccl_one_rank",
)
# each kind; MoK and Dist-MoE; BF16 and MXFP8 (the fp8-dispatch Dist-MoE pipeline runs MXFP8 GEMMs)
WORKLOADS = "inference-ep8-f3072,training-ep32-f3072,packing-ep32-f3072-profile-a"
VARIANTS = "mok-bf16,dist-moe-fp8-dispatch"
# the dry run's: one execution, the plumbing's test (the pipeline's own tests run the rest on the CPU)
DRY_WORKLOADS, DRY_VARIANTS = "inference-ep8-f1536", "mok-bf16"
# the ranks step: EP8 at scale=full as eight processes on the one GPU (gloo), MoK's and Dist-MoE's
# BF16 layers, whose gates' peaks (python -m pipeline.estimate: 7.2 and 4.9 GiB a rank) fit an H100
# eight times over with the processes' contexts; the dry run: two CPU ranks at scale=ci (the plumbing)
RANKS = ["--executions", "inference-ep8-f3072-bf16-mok-native,inference-ep8-f1536-bf16-dist-moe-bf16"]
DRY_RANKS = [*RANKS, "--ranks", "2", "--scale", "ci", "--device", "cpu"]
PUBLISHED = "iterationMS forwardMS backwardMS usefulTFLOPsPerGPU peakAllocatedGiB nvlinkTxGBs device".split()
PUBLISHED += ["sanityMaxError", "sanityTolerance", "sanityPassed", "communication", "mxfp8Products"]
PUBLISHED += ["profiledMS", "profiledOverTimed", "speedOfLightMS", "expectedMS", "measuredOverExpected"]
# The account step's bounds on a GPU: a profiled iteration this close to the timed one, and at least
# this share of a CUDA graph's kernels named by their eager twins (a dry run's windows are too short
# for the first: it records the ratio only).
ACCOUNT_WITHIN, ACCOUNT_NAMED = 0.15, 0.9
PHASES = (
    "process",
    "init",
    "connect",
    "build",
    "gate",
    "capture",
    "calibrate",
    "windows",
    "account",
    "record",
)
ENV_FIELDS = (
    "device capability driver sm_clock_mhz sm_clock_max_mhz mem_clock_max_mhz torch cuda nccl".split()
)
ENV_FIELDS += ["cuda-bindings", "nvidia-cutlass-dsl", "backend"]
DEFAULT = "default"  # the kernel variant the layers run
INNER_ENV = "GPU_RUN_INNER"  # set in the watched child that runs the steps: [scale, work, run id]
RECORDS_ENV = "GPU_RUN_RESULTS"  # where jobs/pytest_records.py appends each test's record
_VARIANT_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Step:
    """One step of the run: a stage (a kernel stage for one ``variant``), or a planted one."""

    stage: str
    variant: str | None = None

    @property
    def label(self) -> str:
        return self.stage if self.variant is None else f"{self.stage} {self.variant}"


@dataclass
class Run:
    out: Path
    work: Path
    dry_run: bool
    deadline: float
    log: IO[str]
    run_id: str
    limits: dict[str, float]
    plants: tuple[str, ...] = ()  # kernel faults for the dry run's children
    scale: float = 1.0  # the dry run's factor on every time (contention()); 1 on the GPU
    env: dict[str, str] = field(default_factory=dict)
    arch: str = "sm_90a"
    log_lock: threading.Lock = field(default_factory=threading.Lock)
    summarized: int = -1  # results.jsonl's size when summary.md was last written
    began: float = field(default_factory=time.monotonic)
    chosen: dict[str, list[str]] = field(default_factory=dict)  # op -> the variants the table names
    stalls: tuple[str, ...] = ()  # stages planted to stall (--plant stall:STAGE)

    @property
    def results(self) -> Path:
        return self.out / "results.jsonl"

    def record(self, stage: str, **fields: Any) -> None:
        append(self.results, {"run": self.run_id, "stage": stage, **fields})

    def python(self, *args: str) -> list[str]:
        return [sys.executable, "-u", *args]

    def kernels_cli(self, command: str, *args: str) -> list[str]:
        flags = ["--results", str(self.results), "--work", str(self.work)] + (
            ["--dry-run"] if self.dry_run else []
        )
        return self.python("-m", "cutlass_kernels", command, *args, *flags)

    def left(self, deadline: float | None = None) -> float:
        return (self.deadline if deadline is None else deadline) - time.monotonic()

    def cut(self, done: Isolated, limit: float, name: str) -> bool:
        """Whether ``done`` was killed at a limit the stage's deadline cut below ``name``'s own: cut
        for time (rerun it), not a hang."""
        return done.rc is None and limit < self.limits[name] - 0.5

    def child(self, argv: list[str], limit: float, env: dict[str, str] | None = None) -> Isolated:
        """``argv`` isolated under ``limit``, its output captured and then written to the log."""
        done = run_isolated(argv, limit, env=env or self.env, cwd=ROOT)
        with self.log_lock:
            self.log.write(f"\n$ {' '.join(argv)}\n{done.output}")
            self.log.flush()
        return done

    def session(self, argv: list[str], limit: float, env: dict[str, str] | None = None) -> Isolated:
        """``argv`` isolated under ``limit``, its output straight into the log (long stages)."""
        with self.log_lock:
            self.log.write(f"\n$ {' '.join(argv)}\n")
            self.log.flush()
        return run_isolated(argv, limit, env=env or self.env, cwd=ROOT, log=self.log)


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
    parser.add_argument("--total", type=float, default=TOTAL_S, help=f"the whole run's seconds ({TOTAL_S})")
    args = parser.parse_args(argv)
    try:
        asked = _plan(args)
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
                {name: seconds * scale for name, seconds in asked.limits.items()},
                asked.plants,
                scale=scale,
                stalls=asked.stalls,
            )
            try:
                return _run_all(run, args, asked.stages, asked.variants, asked.planted)
            except Exception:  # the scheduler's own fault: recorded, and the summary still written
                import traceback

                run.record("run", status="fail", ended=_now(), error=traceback.format_exc()[-2000:])
                _summarize(run, force=True)
                raise
    if not args.dry_run and (problem := _no_gpu()):
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
        done = run_isolated([sys.executable, "-u", __file__, *argv], outer, env=env, log=sys.stdout)
        rc = 1 if done.rc is None else done.rc
        killed = f"killed at the run's outer limit of {outer:.0f} s" if done.rc is None else ""
    except _Terminated as e:
        rc, killed = 143 if str(e) == "SIGTERM" else 130, f"stopped by {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)  # unpacked wheels, compile cache, cubins, dataset
    if killed:
        results = args.out_dir / "results.jsonl"
        append(results, {"run": run_id, "stage": "run", "status": "fail", "ended": _now(), "reason": killed})
        print(f"gpu-run: {killed}", flush=True)
    with contextlib.suppress(Exception):
        write_summary(args.out_dir)
    if (args.out_dir / "summary.md").exists():
        print("\n" + (args.out_dir / "summary.md").read_text(), end="", flush=True)
    return rc


def contention() -> float:
    """The dry run's factor on every limit and on its total: the load average of the last minute
    per CPU, at least 1 (an idle host: the device run's times), at most MAX_SCALE. On a CPU host
    shared with other work the children's time is mostly start-up (imports of torch, the DSL,
    Hydra, pyarrow) that stretches with the load, while a planted hang ends only at its limit: so
    every time stretches alike, and the run keeps its proportions and every result."""
    return min(MAX_SCALE, max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)))


@dataclass(frozen=True)
class Asked:
    """What the command line asks for: the stages (in the fixed order), the variants (None: all), the
    limits, the planted stages (after which stage), the dry run's kernel faults and the stages planted
    to stall (their child sleeps until it is killed at the stage's limit)."""

    stages: list[str]
    variants: tuple[str, ...] | None
    limits: dict[str, float]
    planted: dict[str, list[str]]
    plants: tuple[str, ...]
    stalls: tuple[str, ...]


STALLABLE = ("tests", "pipeline")


def _plan(args: argparse.Namespace) -> Asked:
    """What the arguments ask for; a ValueError naming the bad one."""
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in chosen:
        if s not in STAGES:
            raise ValueError(f"unknown stage {s!r} in --only; allowed: {', '.join(STAGES)}")
    stages = [s for s in STAGES if s in chosen]
    variants = None
    if args.variants != "all":
        variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
        bad = [v for v in variants if not _VARIANT_NAME.fullmatch(v)] or ([] if variants else [args.variants])
        if bad:
            raise ValueError(
                f"--variants {bad[0]!r}: want all, or variant names (a-z, 0-9, _) separated by commas"
            )
    table: dict[str, float] = dict(LIMITS_S)
    planted: dict[str, list[str]] = {}
    plants: list[str] = []
    stalls: list[str] = []
    for plant in args.plant:
        parts = plant.split(":")
        if len(parts) == 3:
            if not args.dry_run:
                raise ValueError(f"--plant {plant!r}: planted kernel faults exist in the dry run only")
            Plant.parse(plant)
            plants.append(plant)
            continue
        kind, after = (parts + [""])[:2]
        if kind == "stall" and len(parts) == 2 and after in STALLABLE and after in stages:
            stalls.append(after)
            continue
        if len(parts) != 2 or kind not in ("fail", "hang") or after not in stages:
            raise ValueError(
                f"--plant {plant!r}: want fail:STAGE or hang:STAGE with STAGE one of {stages}, "
                f"stall:STAGE with STAGE one of {list(STALLABLE)}, "
                "or KIND:STAGE:KEY (a kernel fault, dry run only)"
            )
        planted.setdefault(after, []).append(f"planted-{kind}")
        table[f"planted-{kind}"] = PLANTED_LIMIT_S
    for item in args.limit:
        name, _, value = item.partition("=")
        if name not in table or not value.replace(".", "", 1).isdigit() or float(value) <= 0:
            raise ValueError(f"--limit {item!r}: want NAME=SECONDS with NAME one of {', '.join(table)}")
        table[name] = float(value)
    if args.total <= 0:
        raise ValueError(f"--total {args.total:g}: want a positive number of seconds")
    return Asked(stages, variants, table, planted, tuple(plants), tuple(stalls))


def steps(
    stages: Sequence[str],
    variants: Sequence[str],
    planted: dict[str, list[str]] | None = None,
    chosen: Sequence[str] = (),
) -> list[Step]:
    """The run's steps in order of truth per second: env; the smoke and correctness of the default
    kernels, of the ``chosen`` variants (those the per-shape table names, which the layers run too)
    and of the SwiGLU backward kernel (``swiglu``, correctness only), which decide the gate; tests;
    loopback and ranks; the defaults' and the SwiGLU kernel's timing; pipeline and its account; then
    the other variants' kernel stages in turn, and the chosen ones' timing (``variants`` as given); the
    SASS check (of the cubins smoke kept). A planted stage comes right after the first step of the stage
    it follows."""
    first = [v for v in (DEFAULT, *chosen, SWIGLU) if v in variants]
    timed = [v for v in (DEFAULT, SWIGLU) if v in variants]
    order = [Step("env")] if "env" in stages else []
    order += [Step(s, v) for v in first for s in _kernel_stages(v) if s in stages and s != "timing"]
    order += [Step("tests")] if "tests" in stages else []
    order += [Step(s) for s in ("loopback", "ranks") if s in stages]
    order += [Step("timing", v) for v in timed if "timing" in stages]
    order += [Step("pipeline")] if "pipeline" in stages else []
    order += [Step("account")] if "account" in stages else []
    for v in (v for v in variants if v not in timed):
        order += [Step(s, v) for s in _kernel_stages(v) if s in stages and (v not in first or s == "timing")]
    order += [Step("sass")] if "smoke" in stages else []
    out: list[Step] = []
    pending = dict(planted or {})
    for step in order:
        out.append(step)
        out += [Step(p) for p in pending.pop(step.stage, [])]
    return out


def reserved_after(order: Sequence[Step], i: int, scale: float = 1.0) -> float:
    """The seconds the steps after ``order[i]`` keep for themselves (:data:`RESERVE_S`, times the
    dry run's ``scale``)."""
    return sum(RESERVE_S.get(step.label, 0) for step in order[i + 1 :]) * scale


def _kernel_stages(variant: str) -> tuple[str, ...]:
    return gating.stages_of(SWIGLU_KEY) if variant == SWIGLU else KERNEL_STAGES


def _no_gpu() -> str | None:
    """Why this machine has no usable GPU, or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "nvidia-smi not found"
    done = run_isolated([smi, "-L"], SMI_S)
    if done.rc != 0 or "GPU" not in done.output:
        return f"nvidia-smi -L: {done.output.strip()[:200] or 'no GPU listed'}"
    return None


def _say(run: Run, line: str) -> None:
    """One line on stdout as a step ends: the output of a call killed at its limit still tells. Said
    before the step's record is appended, so a step on record has its line on stdout however the run
    is stopped."""
    print(f"[{time.monotonic() - run.began:5.0f} s] {line}", flush=True)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _environment(run: Run) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (PLANT_ENV, gating.BACKEND_ENV)}
    env |= {
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        "CUTE_DSL_CACHE_DIR": str(run.work / "cute-cache"),  # compiled once, reused by every stage
        "MPLBACKEND": "Agg",
    }
    if run.plants:
        env[PLANT_ENV] = ",".join(run.plants)
    return env


# --------------------------------------------------------------------------------------- the run


def _run_all(
    run: Run,
    args: argparse.Namespace,
    stages: list[str],
    variants: tuple[str, ...] | None,
    planted: dict[str, list[str]],
) -> int:
    run.env = _environment(run)
    run.record(
        "run",
        status="info",
        argv=sys.argv[1:],
        started=_now(),
        dry_run=run.dry_run,
        work=str(run.work),
        scale=round(run.scale, 2),
        total_s=round(run.left()),
    )
    _unpack(run, args.whl)
    ok = True
    plan: list[dict[str, Any]] = []
    if "env" in stages:
        later = [Step("env"), *steps(stages, [DEFAULT, SWIGLU])[1:]]  # the variants are not known yet
        deadline = run.deadline - reserved_after(later, 0, run.scale)
        ok &= _stage(run, Step("env"), lambda limit: _env(run, limit, plan), deadline)
    elif any(s in stages for s in KERNEL_STAGES):
        ok &= _stage(run, Step("plan"), lambda limit: _plan_child(run, limit, plan))
    names = _variants_of(run, plan, variants)
    run.chosen = next((r["variants"] for r in plan if r.get("name") == "chosen"), {})
    picked = [v for v in names if any(v in vs for vs in run.chosen.values())]
    order = [s for s in steps(stages, names, planted, picked) if s.stage != "env"]
    for i, step in enumerate(order):
        deadline = run.deadline - reserved_after(order, i, run.scale)
        if step.variant is not None:
            ok &= _kernel_step(run, step, plan, deadline)
        elif step.stage == "sass":
            _sass(run, deadline)
        elif step.stage.startswith("planted-"):
            ok &= _stage(run, step, _planted(run, step.stage), deadline)
        elif step.stage == "account":
            ok &= _stage(run, step, lambda limit: _account(run), deadline)
        else:
            ok &= _stage(run, step, _gated(run, step.stage), deadline)
    if any(s in stages for s in KERNEL_STAGES) and not set(GATED) & set(stages):
        _gate(run)  # recorded: what the stages that run layers would run on
    if rerun := _rerun_args(run):
        run.record("run", name="rerun", status="info", args=rerun)
    run.record("run", status="pass" if ok else "fail", ended=_now())
    _summarize(run, force=True)
    _say(run, f"run {'pass' if ok else 'fail'}: {run.results.parent}/summary.md")
    return 0 if ok else 1


def _rerun_args(run: Run) -> list[str]:
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
    """The plan's variants with ``swiglu`` (the SwiGLU backward kernel's steps) after the default, those
    ``wanted`` only; a wanted name the arch lacks is recorded."""
    known = list(dict.fromkeys(r["variant"] for r in plan if r.get("name") == "op variant"))
    known = [*known[:1], SWIGLU, *known[1:]] if known else []
    if wanted is None:
        return known
    for name in wanted:
        if name not in known:
            run.record(
                "plan", name="variant", status="fail", error=f"--variants {name!r} is not one of {known}"
            )
    return [v for v in known if v in wanted]


def _stage(
    run: Run,
    step: Step,
    body: Callable[[float], tuple[int | None, str]],
    deadline: float | None = None,
    limit: float | None = None,
) -> bool:
    """Run ``body`` under ``limit`` (by default the step's own; never past ``deadline``, by default the
    run's), then its stage record."""
    own = run.limits.get(step.stage, run.limits["env"]) if limit is None else limit
    limit = min(own, run.left(deadline))
    if limit <= 1:
        _say(run, f"{step.label}: skip ({RUN_SPENT})")
        run.record(step.stage, name="stage", variant=step.variant, status="skip", reason=RUN_SPENT)
        return False
    start, left = time.monotonic(), run.left(deadline)
    rc, note = body(limit)
    status = "timeout" if rc is None else "pass" if rc == 0 else "fail"
    extra = {"reason": f"killed at its {limit:.0f} s limit"} if rc is None else {}
    seconds = round(time.monotonic() - start, 1)
    _say(run, f"{step.label}: {status} in {seconds} s of {limit:.0f}" + (f"; {note}" if note else ""))
    run.record(
        step.stage,
        name="stage",
        status=status,
        rc=rc,
        seconds=seconds,
        limit_s=round(limit),
        left_s=round(left),
        note=note,
        **extra,
    )
    _summarize(run)
    return status == "pass"


def _env(run: Run, limit: float, plan: list[dict[str, Any]]) -> tuple[int | None, str]:
    if not run.dry_run and (smi := shutil.which("nvidia-smi")):
        query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu"
        done = run_isolated([smi, f"--query-gpu={query}", "--format=csv"], min(SMI_S, limit / 2))
        run.record("env", name="nvidia-smi", status="info", output=done.output.strip())
    return _plan_child(run, limit, plan, "env")


def _plan_child(
    run: Run, limit: float, plan: list[dict[str, Any]], command: str = "plan"
) -> tuple[int | None, str]:
    """The env (or plan) child, which appends the plan: every kernel and op x variant of the arch."""
    mark = len(read(run.results))
    done = run.child(run.kernels_cli(command), limit)
    plan += [r for r in read(run.results)[mark:] if r.get("name") in ("kernel", "op variant", "chosen")]
    if plan:
        run.arch = plan[0]["arch"]
    return done.rc, f"{sum(r['name'] == 'kernel' for r in plan)} kernels planned"


# ------------------------------------------------------------------------------- kernel stages


def _kernel_step(run: Run, step: Step, plan: list[dict[str, Any]], deadline: float) -> bool:
    """One kernel stage for one variant; its verdicts are in results.jsonl when it returns."""
    bodies = {"smoke": _smoke, "correctness": _correctness, "timing": _timing}
    if step.variant == SWIGLU:
        bodies = {s: functools.partial(_swiglu, stage=s) for s in ("correctness", "timing")}
    start = time.monotonic()
    if run.left(deadline) <= 1:
        _say(run, f"{step.label}: skip ({SPENT})")
        run.record(step.stage, name="stage", variant=step.variant, status="skip", reason=SPENT)
        return False
    mark, left = len(read(run.results)), run.left(deadline)
    bodies[step.stage](run, step.variant or "default", plan, deadline)
    found = [r for r in read(run.results)[mark:] if r.get("verdict") is True]
    count = {s: sum(r["status"] == s for r in found) for s in ("pass", "fail", "skip")}
    status = "fail" if count["fail"] else "pass" if count["pass"] else "skip"
    seconds = round(time.monotonic() - start, 1)
    tally = ", ".join(f"{n} {k}" for k, n in count.items() if n)
    _say(run, f"{step.label}: {status} in {seconds} s ({tally or 'no verdict'})")
    run.record(
        step.stage,
        name="stage",
        variant=step.variant,
        status=status,
        seconds=seconds,
        left_s=round(left),
        verdicts=count,
    )
    _summarize(run)
    return status == "pass"


def _parallel(run: Run, jobs: Sequence[Callable[[], None]]) -> None:
    """Run ``jobs`` on up to PARALLEL threads, whatever the CPUs (a hung child holds its thread
    without using a CPU, and the dry run's hangs must start together, as a GPU's would), refreshing
    the summary while they run."""
    workers = max(1, min(len(jobs), PARALLEL))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        pending = {pool.submit(job) for job in jobs}
        while pending:
            done, pending = concurrent.futures.wait(pending, timeout=POLL_S)
            for future in done:
                future.result()
            _summarize(run)


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
    _parallel(run, [functools.partial(one, k) for k in kernels])


def _correctness(run: Run, variant: str, plan: list[dict[str, Any]], deadline: float) -> None:
    """One child per op of ``variant``; every key of a child left without a verdict (killed,
    crashed) gets a failed one."""

    def one(op: str) -> None:
        keys = [key(op, d, variant) for d in ("bfloat16", "float32")]
        found = gating.verdicts(read(run.results))
        refused = {k: gating.refusal(run.arch, found, "correctness", k) for k in keys}
        if all(refused.values()):  # nothing to check: no child
            for k, why in refused.items():
                _verdict(run, "correctness", k, "skip", reason=why)
            return
        limit = min(run.limits["correctness-kernel"], run.left(deadline))
        if limit <= 1:
            for k in keys:
                _verdict(run, "correctness", k, "skip", reason=SPENT)
            return
        mark = len(read(run.results))
        done = run.child(run.kernels_cli("correctness-op", "--op", op, "--variant", variant), limit)
        judged = {r["key"] for r in read(run.results)[mark:] if r.get("verdict") is True}
        for k in keys:
            if k in judged:
                continue
            if run.cut(done, limit, "correctness-kernel"):
                _verdict(run, "correctness", k, "skip", reason=SPENT)
            else:
                _verdict(run, "correctness", k, "fail", error=done.why(limit))

    ops = [r["op"] for r in plan if r.get("name") == "op variant" and r["variant"] == variant]
    _parallel(run, [functools.partial(one, op) for op in ops])


def _timing(run: Run, variant: str, plan: list[dict[str, Any]], deadline: float) -> None:
    """One child per op of ``variant`` (BF16 out, as the layers run), one after the other on a GPU,
    whose time is what they measure (side by side in the dry run); each child gets an equal share of
    what the stage has left, so every op is timed on its first (chosen) shapes."""

    def one(op: str, share: int) -> None:
        k = key(op, "bfloat16", variant)
        if refused := gating.refusal(run.arch, gating.verdicts(read(run.results)), "timing", k):
            _verdict(run, "timing", k, "skip", reason=refused)
            return
        limit = min(run.limits["timing-kernel"], run.left(deadline) / share)
        if limit <= 1:
            _verdict(run, "timing", k, "skip", reason=SPENT)
            return
        budget = max(limit - TIMING_MARGIN_S * run.scale, limit / 2)
        argv = run.kernels_cli("timing-op", "--op", op, "--variant", variant, "--budget", f"{budget:.0f}")
        done = run.child(argv, limit)
        if done.rc == 0:
            _verdict(run, "timing", k, "pass")
        elif run.cut(done, limit, "timing-kernel"):
            _verdict(run, "timing", k, "skip", reason=SPENT)
        else:
            _verdict(run, "timing", k, "fail", error=done.why(limit))

    ops = [r["op"] for r in plan if r.get("name") == "op variant" and r["variant"] == variant]
    if run.dry_run:
        _parallel(run, [functools.partial(one, op, 1) for op in ops])
    for i, op in enumerate([] if run.dry_run else ops):
        _parallel(run, [functools.partial(one, op, len(ops) - i)])


def _swiglu(run: Run, variant: str, plan: list[dict[str, Any]], deadline: float, stage: str) -> None:
    """The SwiGLU backward kernel's ``stage``: one child, gated like the GEMMs (timing only after a
    passed correctness). Its verdict: correctness passes where every case did; timing where every
    shape was timed (a shape short of the bandwidth goal is a failed record of its own, not a hang)."""
    if refused := gating.refusal(run.arch, gating.verdicts(read(run.results)), stage, SWIGLU_KEY):
        _verdict(run, stage, SWIGLU_KEY, "skip", variant=SWIGLU, reason=refused)
        return
    limit = min(run.limits["swiglu-kernel"], run.left(deadline))
    if limit <= 1:
        _verdict(run, stage, SWIGLU_KEY, "skip", variant=SWIGLU, reason=SPENT)
        return
    mark = len(read(run.results))
    done = run.child(run.kernels_cli(f"swiglu-{stage}"), limit)
    found = [r for r in read(run.results)[mark:] if r.get("name") == "swiglu_backward"]
    failed = [r for r in found if r.get("status") != "pass"]
    timed = stage == "timing" and done.rc == 1 and bool(found) and not any(r.get("error") for r in found)
    if done.rc == 0 or timed:
        short = f"{len(failed)} of {len(found)} shape(s) short of the bandwidth goal"
        _verdict(run, stage, SWIGLU_KEY, "pass", variant=SWIGLU, **({"note": short} if timed else {}))
    elif done.rc == 1 and found:
        why = f"{len(failed)} of {len(found)} case(s) failed"
        _verdict(run, stage, SWIGLU_KEY, "fail", variant=SWIGLU, error=why)
    elif run.cut(done, limit, "swiglu-kernel"):
        _verdict(run, stage, SWIGLU_KEY, "skip", variant=SWIGLU, reason=SPENT)
    else:
        _verdict(run, stage, SWIGLU_KEY, "fail", variant=SWIGLU, error=done.why(limit))


def _verdict(run: Run, stage: str, k: str, status: str, variant: str | None = None, **why: str) -> None:
    """``k``'s verdict in ``stage``, recorded under the step's ``variant`` (by default the key's)."""
    op, out_dtype, own = gating.split(k)
    fields = {"op": op, "out_dtype": out_dtype, "variant": variant or own, "status": status}
    run.record(stage, name="verdict", verdict=True, key=k, **fields, **why)


def _sass(run: Run, deadline: float) -> None:
    """The SASS of every cubin the smoke tests kept (cuobjdump: no GPU time, but the GPU machine)."""
    if run.dry_run:
        run.record("sass", name="sass", status="skip", reason="the dry run compiles no kernel")
        return
    _stage(run, Step("sass"), lambda limit: (run.child(run.kernels_cli("sass"), limit).rc, ""), deadline)


def _gate(run: Run) -> dict[str, str]:
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


def _gated(run: Run, stage: str) -> Callable[[float], tuple[int | None, str]]:
    """The body of a stage that runs layers (:data:`GATED`), on the kernels the gate lets through."""

    def body(limit: float) -> tuple[int | None, str]:
        env = _gate(run)
        backend = f"on the torch backend ({gating.BACKEND_ENV}=torch: the default kernels did not pass)"
        note = backend if env.get(gating.BACKEND_ENV) else "on the CuTe kernels"
        if stage in run.stalls:  # planted: the stage's child sleeps until it is killed at its limit
            rc, more = (
                run.session(run.python("-c", "import time; time.sleep(3600)"), limit).rc,
                "planted stall",
            )
        else:
            rc, more = GATED[stage](run, limit, env)
        return rc, "; ".join(n for n in (note, more) if n)

    return body


# --------------------------------------------------------------------------------- other stages


def _unpack(run: Run, whl: Path) -> None:
    """Unpack the CuTe DSL archive and install the pure-Python wheels into the work folder (timed);
    put each on PYTHONPATH only where its packages are not importable already."""
    site = run.work / "site"
    archive, wheels = whl / "cutlass-dsl.tar.xz", sorted((whl / "py").glob("*.whl"))
    paths = []
    if archive.exists():
        site.mkdir(parents=True, exist_ok=True)
        done = run_isolated(["tar", "xJf", str(archive), "-C", str(site)], UNPACK_S * run.scale)
        needed = importlib.util.find_spec("cutlass") is None
        run.record(
            "env",
            name="unpack cutlass-dsl",
            status="pass" if done.rc == 0 else "fail",
            seconds=round(done.seconds, 2),
            bytes=archive.stat().st_size,
            on_pythonpath=needed,
            error=done.why(UNPACK_S * run.scale) if done.rc else None,
        )
        if needed:
            paths += [str(site), str(site / "nvidia_cutlass_dsl" / "dsl_packages")]
    else:
        run.record("env", name="unpack cutlass-dsl", status="skip", reason=f"{archive} absent")
    for wheel in wheels:  # pure-Python wheels: each its own folder, on the path only where needed
        began = time.monotonic()
        target = run.work / "py" / wheel.name.split("-")[0]
        with zipfile.ZipFile(wheel) as z:
            z.extractall(target)
            tops = sorted({n.split("/")[0].removesuffix(".py") for n in z.namelist()} - {""})
            tops = [t for t in tops if t.isidentifier()]  # not NAME-VERSION.data
        missing = [t for t in tops if importlib.util.find_spec(t) is None]
        run.record(
            "env",
            name="py wheel",
            status="pass",
            wheel=wheel.name,
            packages=tops,
            on_pythonpath=bool(missing),
            seconds=round(time.monotonic() - began, 2),
        )
        if missing:
            paths.append(str(target))
    if not wheels:
        run.record("env", name="py wheel", status="skip", reason=f"no {whl / 'py'}/*.whl")
    if paths:
        run.env["PYTHONPATH"] = os.pathsep.join([*paths, run.env["PYTHONPATH"]])


def _tests(run: Run, limit: float, env: dict[str, str]) -> tuple[int | None, str]:
    """The CUDA-only tests in one pytest, each test's record appended the moment it ends
    (``jobs/pytest_records.py``), so a kill at the limit keeps every test that finished; the image's
    pytest, with no plugin but that one."""
    if importlib.util.find_spec("pytest") is None:
        why = "pytest is not importable on this machine"
        run.record("tests", name="pytest", status="fail", error=why)
        return 1, why
    env = {
        **env,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "jobs"), env["PYTHONPATH"]]),
        RECORDS_ENV: str(run.results),
    }
    plugins = ["-p", "no:cacheprovider", "-p", "pytest_records"]
    argv = run.python("-m", "pytest", "-q", "-rA", *plugins, *CUDA_TESTS)
    mark = len(read(run.results))
    done = run.session(argv, limit, env)
    mine = [r for r in read(run.results)[mark:] if r.get("stage") == "tests"]
    if done.rc is None:
        ended = {r["name"] for r in mine if r.get("status") != "start"}
        hung = [r["name"] for r in mine if r.get("status") == "start" and r["name"] not in ended]
        return None, f"killed in {hung[-1]}" if hung else ""
    return (0 if done.rc == 5 else done.rc), "pytest exit 5: nothing collected" if done.rc == 5 else ""


def _loopback(run: Run, limit: float, env: dict[str, str]) -> tuple[int | None, str]:
    """``python -m pipeline.bench.loopback``: a one-rank NCCL group whose layers still call the
    exchange's collectives, captured in CUDA graphs and timed as executions are (gloo and eager in the
    dry run); a record per case."""
    argv = run.python("-m", "pipeline.bench.loopback", "--device", "cpu" if run.dry_run else "cuda")
    return _json_lines(run, "loopback", "case", run.child(argv, limit, env), limit)


def _ranks(run: Run, limit: float, env: dict[str, str]) -> tuple[int | None, str]:
    """``python -m pipeline.bench.shared_gpu``: an EP group's ranks on the one GPU (two CPU ranks at
    scale=ci in the dry run), every execution through its correctness gate with rows crossing ranks; a
    record per execution."""
    argv = run.python("-m", "pipeline.bench.shared_gpu", *(DRY_RANKS if run.dry_run else RANKS))
    argv += ["--timeout", f"{max(limit - 5 * run.scale, 1):.0f}"]
    return _json_lines(run, "ranks", "execution_id", run.child(argv, limit, env), limit)


def _json_lines(run: Run, stage: str, key: str, done: Isolated, limit: float) -> tuple[int | None, str]:
    """A record of ``stage`` for each JSON line a child printed (named by its ``key``), passed or
    failed as it says; the child's status, and how many passed."""
    lines = [json.loads(line) for line in done.output.splitlines() if line.startswith("{")]
    for line in lines:
        name, passed = line.pop(key), line.pop("passed")
        run.record(stage, name=name, status="pass" if passed else "fail", **line)
    passed = sum(bool(r.get("status") == "pass") for r in read(run.results)[-len(lines) :]) if lines else 0
    note = f"{passed} of {len(lines)} passed" if lines else done.why(limit)
    return done.rc, note


def _pipeline(run: Run, limit: float, env: dict[str, str]) -> tuple[int | None, str]:
    """A multirun of the selection, then aggregation of whatever shards it left, then its rows; each
    part under what the stage has left but the later parts' reserves, so the stage ends in its limit."""
    end = time.monotonic() + limit
    dataset = run.work / "dataset"
    scale = "ci" if run.dry_run else "full"
    workloads, variants = (DRY_WORKLOADS, DRY_VARIANTS) if run.dry_run else (WORKLOADS, VARIANTS)
    sweep = ["--multirun", f"scale={scale}", "max_ranks=1", f"workload={workloads}", f"variant={variants}"]
    sweep.append("keep_traces=true")  # each execution's profile, for the account's timeline
    sweep_limit = end - time.monotonic() - (AGGREGATE_S + STATUS_S) * run.scale
    multirun = run.session(
        run.python("-m", "pipeline.run", *sweep, f"dataset_dir={dataset}"), sweep_limit, env
    )
    rc = multirun.rc
    run.record(
        "pipeline",
        name="multirun",
        status="timeout" if rc is None else "pass" if rc == 0 else "fail",
        rc=rc,
        seconds=round(multirun.seconds, 1),
        overrides=sweep,
        reason=f"killed at {sweep_limit:.0f} s (the rest kept for aggregation)" if rc is None else None,
    )
    aggregate_limit = end - time.monotonic() - (0 if rc == 0 else STATUS_S * run.scale)
    argv = run.python("-m", "pipeline.aggregate", str(dataset), "--no-figures", *_rates(run))
    agg = run.session(argv, aggregate_limit, env).rc
    published = dataset / "mok-comparison.csv"
    if published.exists():
        shutil.copy(published, run.out / "mok-comparison.csv")
        with open(published) as f:
            for row in csv.DictReader(f):
                run.record(
                    "pipeline", name=row["execution_id"], status="pass", **{k: row.get(k) for k in PUBLISHED}
                )
    for line in _phase_lines(dataset):
        _, execution, parts = line.split(" ", 2)
        run.record("pipeline", name="phases", status="info", execution=execution, **json.loads(parts))
    _keep_dataset(run, dataset)
    if rc == 0:  # pipeline.run exits 0 only when every execution is done: nothing to tell apart
        return agg, ""
    status_limit = end - time.monotonic()
    status = run_isolated(
        run.python("-m", "pipeline.status", str(dataset), "--json"), max(status_limit, 1), env=env, cwd=ROOT
    )
    try:
        executions = json.loads(status.output)["executions"]
    except (json.JSONDecodeError, KeyError, TypeError):
        run.record("pipeline", name="pipeline.status", status="fail", detail=status.why(status_limit))
        executions = []
    for e in executions:
        if e["state"] != "done":
            detail = " ".join(str(e[k]) for k in ("state", "detail", "log") if e.get(k))
            run.record("pipeline", name=e["execution_id"], status="fail", detail=detail[:600])
    return rc, ""


def _rates(run: Run) -> list[str]:
    """The aggregation's ``--rates``: OUT_DIR/kernel-rates.json made from the timing stage's records
    (:func:`jobs.gpu_records.kernel_rates`); none, and why on record, where the records hold no rates."""
    from gpu_records import device_of, kernel_rates

    found = read(run.results)
    try:
        table = kernel_rates(found, device_of(found), f"jobs/gpu-run.sh run {run.run_id}, its timing stage")
    except ValueError as err:
        run.record("pipeline", name="kernel rates", status="skip", reason=str(err))
        return []
    path = run.out / "kernel-rates.json"
    atomic_write(path, json.dumps(table, indent=1) + "\n")
    run.record("pipeline", name="kernel rates", status="info", gemms=len(table["gemms"]))
    return ["--rates", str(path)]


def _account(run: Run) -> tuple[int | None, str]:
    """The phase account of each single-GPU execution the pipeline published, checked: one per
    execution, its phases and unclaimed time adding up to its profiled iteration, on a GPU that
    iteration within ACCOUNT_WITHIN of the timed one and at least ACCOUNT_NAMED of its kernels named;
    a record per execution with its account."""
    published = run.work / "dataset" / "mok-comparison.json"
    if not published.is_file():
        run.record("account", name="published", status="fail", error="the pipeline stage published no JSON")
        return 1, "nothing published to account for"
    document = json.loads(published.read_text())
    accounts = {a["execution_id"]: a for a in document.get("accounts", [])}
    failed = 0
    for row in document["executions"]:
        eid, account = row["execution_id"], accounts.get(row["execution_id"])
        if account is None:
            run.record("account", name=eid, status="fail", error="no phase account published")
            failed += 1
            continue
        phases = {p["phase"]: p["ms"] for p in account["phases"]}
        total = sum(v or 0.0 for v in phases.values()) + account["unclaimed_ms"]
        ratio = account["profiled_ms"] / account["timed_ms"]
        kernels, named = account.get("kernels"), account.get("named_kernels")
        problems = []
        if abs(total - account["profiled_ms"]) > 1e-4 * account["profiled_ms"]:  # six digits published
            problems.append(f"phases add up to {total:.6g} ms, not the profiled {account['profiled_ms']:.6g}")
        if not run.dry_run and abs(ratio - 1) > ACCOUNT_WITHIN:
            problems.append(f"profiled / timed {ratio:.3f}")
        if kernels and named is not None and named < ACCOUNT_NAMED * kernels:
            problems.append(f"{named} of {kernels} kernels named")
        run.record(
            "account",
            name=eid,
            status="fail" if problems else "pass",
            profiled_ms=account["profiled_ms"],
            timed_ms=account["timed_ms"],
            profiled_over_timed=round(ratio, 4),
            phases=phases,
            unclaimed_ms=account["unclaimed_ms"],
            kernels=kernels,
            named_kernels=named,
            traces=account.get("traces", []),
            error="; ".join(problems) or None,
        )
        failed += bool(problems)
    return (1 if failed else 0), f"{len(accounts)} of {len(document['executions'])} executions accounted"


def _phase_lines(dataset: Path) -> list[str]:
    """Each execution's ``phases`` line (:class:`pipeline.bench.execute.Phases`) from its job's log."""
    logs = sorted((dataset / "logs").glob("**/*.out")) if (dataset / "logs").is_dir() else []
    return [
        line
        for log in logs
        for line in log.read_text(errors="replace").splitlines()
        if line.startswith("phases ") and line.count(" ") >= 2
    ]


def _keep_dataset(run: Run, dataset: Path) -> None:
    """The pipeline's dataset (shards, ledger, logs; no figures) as OUT_DIR/dataset.tar.gz, for the
    run's record: per-phase times and peak memory live in the shards and the jobs' logs."""
    if not dataset.is_dir():
        return
    with tarfile.open(run.out / "dataset.tar.gz.tmp", "w:gz") as tar:
        tar.add(dataset, arcname="dataset")
    os.replace(run.out / "dataset.tar.gz.tmp", run.out / "dataset.tar.gz")


# the stages that run layers, on the kernels the gate lets through, and their bodies
GATED: dict[str, Callable[[Run, float, dict[str, str]], tuple[int | None, str]]] = {
    "tests": _tests,
    "loopback": _loopback,
    "ranks": _ranks,
    "pipeline": _pipeline,
}


def _planted(run: Run, name: str) -> Callable[[float], tuple[int | None, str]]:
    """A stage that records a result, then fails (exit 3) or hangs with a grandchild in a process group
    of its own: the plumbing must keep the record and kill both."""
    kind = name.removeprefix("planted-")

    def body(limit: float) -> tuple[int | None, str]:
        code = (
            "import os, subprocess, sys, time\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "from cutlass_kernels.results import append\n"
            "child = subprocess.Popen(['sleep', '600'], process_group=0) if sys.argv[2] == 'hang' else None\n"
            "record = {'stage': 'planted-' + sys.argv[2], 'name': 'started', 'status': 'info'}\n"
            "record |= {'pid': os.getpid(), 'child_pid': child.pid if child else None}\n"
            "append(__import__('pathlib').Path(sys.argv[1]), record)\n"
            "time.sleep(600) if child else sys.exit(3)\n"
        )
        return run.session(run.python("-c", code, str(run.results), kind), limit).rc, f"planted {kind}"

    return body


# --------------------------------------------------------------------------------------- summary


def _summarize(run: Run, force: bool = False) -> None:
    """Rewrite the summary where results.jsonl has grown since; a fault in it goes to the log and never
    stops the run (results.jsonl holds everything the summary would show)."""
    try:
        size = run.results.stat().st_size if run.results.exists() else 0
        if force or size != run.summarized:
            run.summarized = size
            write_summary(run.out)
    except Exception:
        import traceback

        with run.log_lock:
            run.log.write(f"gpu-run: summary.md not rewritten:\n{traceback.format_exc()}")


def write_summary(out: Path) -> None:
    """``summary.md`` from results.jsonl: per stage (and variant) the verdict, then the details."""
    records = read(out / "results.jsonl")
    lines = ["# GPU run summary", ""]
    starts = [r for r in records if r.get("stage") == "run" and r.get("started")]
    if starts:
        last = starts[-1]
        lines += [f"Run {last['run']}: started {last['started']}, arguments `{' '.join(last['argv'])}`", ""]
        if last.get("scale", 1) > 1:
            lines += [f"Dry run on a loaded host: every limit and the total x{last['scale']}", ""]
        ended = [
            r for r in records if r.get("stage") == "run" and r.get("run") == last["run"] and r.get("ended")
        ]
        if ended and (ended[-1].get("reason") or ended[-1].get("error")):
            why = ended[-1].get("reason") or ended[-1]["error"].strip().splitlines()[-1]
            lines += [f"The run ended early: {why}", ""]
    env = next(
        (r for r in reversed(records) if r.get("stage") == "env" and r.get("name") == "versions"), None
    )
    if env:
        lines += [
            "Environment: " + ", ".join(f"{k} {env.get(k)}" for k in ENV_FIELDS if env.get(k) is not None),
            "",
        ]
    gate = next((r for r in reversed(records) if r.get("stage") == "gate"), None)
    if gate:
        why = f" ({gate['reason']})" if gate.get("reason") else ""
        lines += [f"The stages that run layers ran on: {gate['backend']}{why}", ""]
    lines += [
        "| stage | variant | status | seconds | limit s | pass | fail | skip |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in (r for r in records if r.get("name") == "stage"):
        items = [
            r
            for r in records
            if r.get("stage") == s["stage"]
            and r.get("name") != "stage"
            and r.get("variant") == s.get("variant")
        ]
        if s["stage"] in KERNEL_STAGES:
            items = [r for r in items if r.get("verdict") is True]
        count = {k: sum(r.get("status") == k for r in items) for k in ("pass", "fail", "skip")}
        lines.append(
            f"| {s['stage']} | {s.get('variant') or ''} | {s['status']} | {s.get('seconds', '')} "
            f"| {s.get('limit_s', '')} | {count['pass']} | {count['fail']} | {count['skip']} |"
        )
    problems = [r for r in records if r.get("status") in ("fail", "timeout") and r.get("stage") != "run"]
    if problems:
        lines += ["", "## Failures", ""]
        for r in problems:
            what = " ".join(
                str(r[k])
                for k in ("stage", "name", "key", "op", "variant", "case", "out_dtype", "shape")
                if r.get(k) and not (k in ("op", "variant", "out_dtype") and r.get("key"))
            )
            why = r.get("error") or r.get("reason") or r.get("detail") or r.get("note") or ""
            lines.append(f"- {what}: {why}".rstrip(": "))
    timing = [
        r for r in records if r.get("stage") == "timing" and r.get("status") == "pass" and r.get("shape")
    ]
    if timing:
        peak = timing[0].get("dense_peak_tflops")
        lines += ["", "## Timing (BF16 out; graph-replay median unless no CUDA graphs)", ""]
        if peak:
            lines += [f"Dense BF16 peak measured: {float(peak):.4g} TFLOP/s", ""]
        head = ["shape", "op", "variant", "ms min / median / max", "TFLOP/s", "of peak", "vs _grouped_mm"]
        lines += _table([*head, "padded / useful"], [_timing_row(r) for r in timing])
        lines += ["", "Fastest variant per shape and op:", ""]
        lines += _table(["shape", "op", "variant", "TFLOP/s"], _best_rows(timing))
    rows = [r for r in records if r.get("stage") == "pipeline" and r.get("iterationMS") is not None]
    if rows:
        lines += ["", "## Pipeline executions", ""]
        keys = ("name", "iterationMS", "sanityMaxError", "sanityTolerance", "sanityPassed")
        lines += _table(["execution", *keys[1:]], [[r.get(k) for k in keys] for r in rows])
    lines += _rehearsals(records)
    accounted = [r for r in records if r.get("stage") == "account" and r.get("profiled_ms") is not None]
    if accounted:
        lines += ["", "## Where each execution's iteration went (phase account, ms)", ""]
        from gpu_records import accounts

        lines += accounts(accounted).rstrip("\n").splitlines()
    phases = [r for r in records if r.get("stage") == "pipeline" and r.get("name") == "phases"]
    if phases:
        lines += ["", "## Where each pipeline execution's time went (s, rank 0)", ""]
        cols = [*PHASES, "compile", "compiles"]
        cells = [[r.get("execution"), *(r.get(k) for k in cols)] for r in phases]
        lines += _table(["execution", *cols], cells)
    rerun = [r for r in records if r.get("stage") == "run" and r.get("name") == "rerun"]
    if rerun and starts and rerun[-1]["run"] == starts[-1]["run"]:
        lines += ["", f"To finish: `jobs/gpu-run.sh OUT_DIR {' '.join(rerun[-1]['args'])}`"]
    atomic_write(out / "summary.md", "\n".join(lines) + "\n")


def _rehearsals(records: list[dict[str, Any]]) -> list[str]:
    """The summary's tables of the loopback and ranks steps."""
    lines = []
    loop = [r for r in records if r.get("stage") == "loopback" and "replay_error" in r]
    if loop:
        head = "case|collective|captured|all-to-alls in the graphs|replay error|tolerance|status".split("|")
        cells = [
            [
                r["name"], " ".join(filter(None, (r["collective"], r.get("version")))), r["graphs"],
                r["collectives_captured"].get("alltoall_base_", 0), f"{max(r['replay_error'].values()):.3g}",
                f"{r['tolerance']:.3g}", r["status"],
            ]
            for r in loop
        ]  # fmt: skip
        lines += ["", "## Loopback: one rank's exchange inside the captured graphs", "", *_table(head, cells)]
    shared = [r for r in records if r.get("stage") == "ranks" and "slice_rows" in r]
    if shared:
        head = "execution|ranks|GPUs|rows across ranks|gate error / tolerance|GiB a rank|status".split("|")
        cells = [
            [
                r["name"], r["ranks"], len(r["gpus"]) or "cpu", f"{r['crossed_rows']} of {r['slice_rows']}",
                f"{r.get('max_error', float('nan')):.3g} / {r.get('tolerance', float('nan')):.3g}",
                r["peak_gib_per_rank"] and f"{r['peak_gib_per_rank']:.2f}", r["status"],
            ]
            for r in shared
        ]  # fmt: skip
        lines += ["", "## Ranks sharing one GPU (correctness only)", "", *_table(head, cells)]
    return lines


def _table(head: Sequence[str], rows: list[list[Any]]) -> list[str]:
    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join("" if c is None else str(c) for c in cells) + " |"

    return [line(head), line(["---"] * len(head)), *map(line, rows)]


def _timing_row(r: dict[str, Any]) -> list[Any]:
    ms = r.get("graph_ms") or r["dispatch_ms"]
    vs = f"{r['speedup_vs_grouped_mm']:.2f}x" if r.get("speedup_vs_grouped_mm") else None
    spread = f"{ms['min']:.3f} / {ms['median']:.3f} / {ms['max']:.3f}"
    padded = f"{r['padded_flops'] / r['useful_flops']:.3f}"
    return [
        r["shape"],
        r["op"],
        r["variant"],
        spread,
        f"{r['tflops']:.1f}",
        f"{r['frac_of_dense_peak']:.1%}",
        vs,
        padded,
    ]


def _best_rows(timing: list[dict[str, Any]]) -> list[list[Any]]:
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in timing:
        k = (r["shape"], r["op"])
        if k not in best or r["tflops"] > best[k]["tflops"]:
            best[k] = r
    return [[s, op, r["variant"], f"{r['tflops']:.1f}"] for (s, op), r in best.items()]


if __name__ == "__main__":
    sys.exit(main())
