"""The stages of ``jobs/gpu-run.sh`` (see its header): each stage runs in a session of its own under a
time limit (the whole session is killed at the limit), every result is a JSON line appended to
``OUT_DIR/results.jsonl`` the moment it exists (flushed and fsynced), and ``OUT_DIR/summary.md`` is
rewritten after every stage. OUT_DIR receives four files: results.jsonl, summary.md, log.txt (every
stage's output, unbuffered) and mok-comparison.csv (the pipeline stage's published rows).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cutlass_kernels.isolation import run_isolated  # noqa: E402  (torch-free)
from cutlass_kernels.results import append, read  # noqa: E402
from pipeline.data.atomic import atomic_write  # noqa: E402

TOTAL_S = 360  # the whole run, so a partial rerun still fits a 15-minute device window
STAGES = ("env", "smoke", "correctness", "timing", "tests", "pipeline")
LIMITS_S = {"env": 30, "smoke": 50, "correctness": 60, "timing": 60, "tests": 40, "pipeline": 120}
PLANTED_LIMIT_S = 5
UNPACK_S = 90  # each of the two unpacking steps (inside the run's TOTAL_S)
AGGREGATE_S = 40  # kept back from the pipeline stage for aggregating whatever shards exist
CUDA_TESTS = (
    "tests/test_moe_layer.py::test_nccl_one_rank",
    "tests/test_run_graphs.py",
    "tests/test_run_timing.py::test_cuda_laps_are_the_kernels_intervals",
)
# each kind; MoK and Dist-MoE; BF16 and MXFP8 (the fp8-dispatch Dist-MoE pipeline runs MXFP8 GEMMs)
WORKLOADS = "inference-ep8-f3072,training-ep32-f3072,packing-ep32-f3072-profile-a"
VARIANTS = "mok-bf16,dist-moe-fp8-dispatch"
DRY_WORKLOADS = "inference-ep8-f1536,training-ep32-f1536"
PY_PACKAGES = ("hydra", "omegaconf", "antlr4", "submitit")
PUBLISHED = "iterationMS forwardMS backwardMS usefulTFLOPsPerGPU peakAllocatedGiB nvlinkTxGBs device".split()
PUBLISHED += ["sanityMaxError", "sanityTolerance", "sanityPassed"]
ENV_FIELDS = (
    "device capability driver sm_clock_mhz sm_clock_max_mhz mem_clock_max_mhz torch cuda nccl".split()
)
ENV_FIELDS += ["cuda-bindings", "nvidia-cutlass-dsl", "backend"]


@dataclass
class Run:
    out: Path
    work: Path
    dry_run: bool
    deadline: float
    log: Any
    env: dict[str, str]
    run_id: str

    @property
    def results(self) -> Path:
        return self.out / "results.jsonl"

    def record(self, stage: str, **fields: Any) -> None:
        append(self.results, {"run": self.run_id, "stage": stage, **fields})

    def python(self, *args: str) -> list[str]:
        return [sys.executable, "-u", *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/gpu-run.sh", description="GPU readiness run")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="on this CPU: torch backend, gloo, scale=ci")
    parser.add_argument(
        "--only", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}"
    )
    parser.add_argument("--whl", type=Path, default=ROOT / ".whl", help="the packed wheels (default: .whl/)")
    parser.add_argument(
        "--plant",
        action="append",
        default=[],
        metavar="KIND:AFTER",
        help="insert a planted stage (KIND fail or hang) after stage AFTER, to test the plumbing",
    )
    parser.add_argument("--limit", action="append", default=[], metavar="STAGE=SECONDS")
    args = parser.parse_args(argv)
    try:
        stages, limits = _plan(args.only, args.plant, args.limit)
    except ValueError as e:
        print(f"gpu-run: {e}", file=sys.stderr)
        return 2
    if not args.dry_run and (problem := _no_gpu()):
        print(f"gpu-run: no GPU here ({problem}); on a CPU machine use --dry-run", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-run-"))
    try:
        return _run_all(args, stages, limits, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # unpacked wheels, compile cache, scratch dataset


def _run_all(args: argparse.Namespace, stages: list[str], limits: dict[str, float], work: Path) -> int:
    with open(args.out_dir / "log.txt", "a", buffering=1) as log:
        run = Run(
            args.out_dir,
            work,
            args.dry_run,
            time.monotonic() + TOTAL_S,
            log,
            {},
            f"{time.time_ns() // 10**6}",
        )
        run.env = _environment(run)
        run.record(
            "run", status="info", argv=sys.argv[1:], started=_now(), dry_run=args.dry_run, work=str(work)
        )
        _unpack(run, args.whl)
        ok = True
        for stage in stages:
            ok &= _stage(run, stage, limits[stage])
            _summarize(run)
        run.record("run", status="pass" if ok else "fail", ended=_now())
        _summarize(run)
    return 0 if ok else 1


def _plan(only: str, plants: list[str], limits: list[str]) -> tuple[list[str], dict[str, float]]:
    chosen = [s.strip() for s in only.split(",") if s.strip()]
    for s in chosen:
        if s not in STAGES:
            raise ValueError(f"unknown stage {s!r} in --only; allowed: {', '.join(STAGES)}")
    stages = [s for s in STAGES if s in chosen]
    table: dict[str, float] = dict(LIMITS_S)
    for plant in plants:
        kind, _, after = plant.partition(":")
        if kind not in ("fail", "hang") or after not in stages:
            raise ValueError(f"--plant {plant!r}: want fail:STAGE or hang:STAGE with STAGE one of {stages}")
        stages.insert(stages.index(after) + 1, f"planted-{kind}")
        table[f"planted-{kind}"] = PLANTED_LIMIT_S
    for item in limits:
        name, _, value = item.partition("=")
        if name not in table or not value.replace(".", "", 1).isdigit() or float(value) <= 0:
            raise ValueError(f"--limit {item!r}: want STAGE=SECONDS with STAGE one of {', '.join(table)}")
        table[name] = float(value)
    return stages, table


def _no_gpu() -> str | None:
    """Why this machine has no usable GPU, or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "nvidia-smi not found"
    done = _bounded([smi, "-L"])
    if done.returncode != 0 or "GPU" not in done.stdout:
        return f"nvidia-smi -L: {(done.stdout + done.stderr).strip()[:200] or 'no GPU listed'}"
    return None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _environment(run: Run) -> dict[str, str]:
    env = dict(os.environ)
    env |= {
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        "CUTE_DSL_CACHE_DIR": str(run.work / "cute-cache"),  # compiled once, reused by every stage
        "MPLBACKEND": "Agg",
    }
    return env


# --------------------------------------------------------------------------------------- running


def run_session(run: Run, argv: list[str], limit: float) -> tuple[int | None, float]:
    """Run ``argv`` isolated (:func:`~cutlass_kernels.isolation.run_isolated`: its own session, every
    process it started killed at ``limit``), output into the log. (rc or None, seconds)."""
    run.log.write(f"\n$ {' '.join(argv)}\n")
    run.log.flush()
    done = run_isolated(argv, limit, env=run.env, cwd=ROOT, log=run.log)
    return done.rc, done.seconds


def _stage(run: Run, stage: str, limit: float) -> bool:
    limit = min(limit, run.deadline - time.monotonic())
    if limit <= 1:
        run.record(stage, name="stage", status="skip", reason=f"the {TOTAL_S} s budget of the run is spent")
        return False
    start = time.monotonic()
    bodies: dict[str, Callable[[Run, float], tuple[int | None, str]]] = {
        "env": _env,
        "smoke": _kernel_stage("smoke"),
        "correctness": _kernel_stage("correctness"),
        "timing": _kernel_stage("timing"),
        "tests": _tests,
        "pipeline": _pipeline,
        "planted-fail": _planted("fail"),
        "planted-hang": _planted("hang"),
    }
    rc, note = bodies[stage](run, limit)
    seconds = round(time.monotonic() - start, 1)
    status = "timeout" if rc is None else "pass" if rc == 0 else "fail"
    extra = {"reason": f"killed at its {limit:.0f} s limit"} if rc is None else {}
    run.record(
        stage, name="stage", status=status, rc=rc, seconds=seconds, limit_s=round(limit), note=note, **extra
    )
    return status == "pass"


def _flag(run: Run) -> list[str]:
    return ["--dry-run"] if run.dry_run else []


def _kernel_stage(name: str) -> Callable[[Run, float], tuple[int | None, str]]:
    def body(run: Run, limit: float) -> tuple[int | None, str]:
        argv = run.python(
            "-m", "cutlass_kernels", name, "--results", str(run.results), "--work", str(run.work)
        )
        rc, _ = run_session(run, argv + _flag(run), limit)
        return rc, ""

    return body


def _env(run: Run, limit: float) -> tuple[int | None, str]:
    argv = run.python("-m", "cutlass_kernels", "env", "--results", str(run.results), *_flag(run))
    if not run.dry_run and (smi := shutil.which("nvidia-smi")):
        query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu"
        done = _bounded([smi, f"--query-gpu={query}", "--format=csv"])
        run.record("env", name="nvidia-smi", status="info", output=done.stdout.strip())
    rc, _ = run_session(run, argv, limit)
    return rc, ""


def _unpack(run: Run, whl: Path) -> None:
    """Unpack the CuTe DSL archive and install the pure-Python wheels into the work folder (timed);
    put each on PYTHONPATH only where its packages are not importable already."""
    site = run.work / "site"
    archive, wheels = whl / "cutlass-dsl.tar.xz", sorted((whl / "py").glob("*.whl"))
    paths = []
    if archive.exists():
        start = time.monotonic()
        site.mkdir(parents=True, exist_ok=True)
        done = _bounded(["tar", "xJf", str(archive), "-C", str(site)])
        needed = importlib.util.find_spec("cutlass") is None
        run.record(
            "env",
            name="unpack cutlass-dsl",
            status="pass" if done.returncode == 0 else "fail",
            seconds=round(time.monotonic() - start, 2),
            bytes=archive.stat().st_size,
            on_pythonpath=needed,
            error=done.stderr.strip()[-300:] if done.returncode else None,
        )
        if needed:
            paths += [str(site), str(site / "nvidia_cutlass_dsl" / "dsl_packages")]
    else:
        run.record("env", name="unpack cutlass-dsl", status="skip", reason=f"{archive} absent")
    if wheels:
        start = time.monotonic()
        target = run.work / "py"
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        done = _bounded([*pip, "--target", str(target), *map(str, wheels)])
        missing = [p for p in PY_PACKAGES if importlib.util.find_spec(p) is None]
        run.record(
            "env",
            name="install py wheels",
            status="pass" if done.returncode == 0 else "fail",
            seconds=round(time.monotonic() - start, 2),
            wheels=[w.name for w in wheels],
            on_pythonpath=bool(missing),
            missing_before=missing,
            error=done.stderr.strip()[-300:] if done.returncode else None,
        )
        if missing:
            paths.append(str(target))
    else:
        run.record("env", name="install py wheels", status="skip", reason=f"no {whl / 'py'}/*.whl")
    if paths:
        run.env["PYTHONPATH"] = os.pathsep.join([*paths, run.env["PYTHONPATH"]])


def _bounded(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` with at most UNPACK_S seconds (a timeout is a failed result, exit status 124)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=UNPACK_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {UNPACK_S} s")


def _tests(run: Run, limit: float) -> tuple[int | None, str]:
    if importlib.util.find_spec("pytest") is None:
        why = "pytest is not importable on this machine (the packed wheels do not include it)"
        run.record("tests", name="pytest", status="fail", error=why)
        return 1, why
    junit = run.work / "junit.xml"
    argv = run.python(
        "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", f"--junitxml={junit}", *CUDA_TESTS
    )
    rc, _ = run_session(run, argv, limit)
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
            status = {"passed": "pass", "skipped": "skip"}.get(outcome, "fail")
            detail = next((c.get("message", "") for c in case if c.tag == outcome), "")
            run.record(
                "tests",
                name=f"{case.get('classname')}::{case.get('name')}",
                status=status,
                detail=detail[:300],
            )
    return (0 if rc == 5 else rc), "pytest exit 5: nothing collected" if rc == 5 else ""


def _pipeline(run: Run, limit: float) -> tuple[int | None, str]:
    """A multirun of the selection, then aggregation of whatever shards it left, then its rows."""
    dataset = run.work / "dataset"
    scale = "ci" if run.dry_run else "full"
    workloads = DRY_WORKLOADS if run.dry_run else WORKLOADS
    sweep = ["--multirun", f"scale={scale}", "max_ranks=1", f"workload={workloads}", f"variant={VARIANTS}"]
    rc, seconds = run_session(
        run, run.python("-m", "pipeline.run", *sweep, f"dataset_dir={dataset}"), limit - AGGREGATE_S
    )
    run.record(
        "pipeline",
        name="multirun",
        status="timeout" if rc is None else "pass" if rc == 0 else "fail",
        rc=rc,
        seconds=round(seconds, 1),
        overrides=sweep,
        reason=f"killed at {limit - AGGREGATE_S:.0f} s (the rest kept for aggregation)"
        if rc is None
        else None,
    )
    left = limit - seconds
    agg, _ = run_session(run, run.python("-m", "pipeline.aggregate", str(dataset), "--no-figures"), left - 10)
    published = dataset / "mok-comparison.csv"
    if published.exists():
        shutil.copy(published, run.out / "mok-comparison.csv")
        with open(published) as f:
            for row in csv.DictReader(f):
                run.record(
                    "pipeline", name=row["execution_id"], status="pass", **{k: row.get(k) for k in PUBLISHED}
                )
    status = run_isolated(
        run.python("-m", "pipeline.status", str(dataset), "--json"), max(left - 5, 5), env=run.env, cwd=ROOT
    )
    try:
        executions = json.loads(status.output)["executions"]
    except (json.JSONDecodeError, KeyError, TypeError):
        why = status.why(max(left - 5, 5))
        run.record("pipeline", name="pipeline.status", status="fail", detail=why)
        executions = []
    for e in executions:
        if e["state"] != "done":
            detail = " ".join(str(e[k]) for k in ("state", "detail", "log") if e.get(k))
            run.record("pipeline", name=e["execution_id"], status="fail", detail=detail[:600])
    return (rc if rc != 0 else agg), ""


def _planted(kind: str) -> Callable[[Run, float], tuple[int | None, str]]:
    """A stage that records a result, then fails (exit 3) or hangs with a grandchild in a process group
    of its own: the plumbing must keep the record and kill both."""

    def body(run: Run, limit: float) -> tuple[int | None, str]:
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
        rc, _ = run_session(run, run.python("-c", code, str(run.results), kind), limit)
        return rc, f"planted {kind}"

    return body


# --------------------------------------------------------------------------------------- summary


def _summarize(run: Run) -> None:
    """Rewrite the summary; a fault in it goes to the log and never stops the run (results.jsonl holds
    everything the summary would show)."""
    try:
        write_summary(run.out)
    except Exception:
        import traceback

        run.log.write(f"gpu-run: summary.md not rewritten:\n{traceback.format_exc()}")


def write_summary(out: Path) -> None:
    """``summary.md`` from results.jsonl: per stage (its latest run) the verdict, then the details."""
    records = read(out / "results.jsonl")
    lines = ["# GPU run summary", ""]
    starts = [r for r in records if r.get("stage") == "run" and r.get("started")]
    if starts:
        last = starts[-1]
        lines += [f"Run {last['run']}: started {last['started']}, arguments `{' '.join(last['argv'])}`", ""]
    env = next(
        (r for r in reversed(records) if r.get("stage") == "env" and r.get("name") == "versions"), None
    )
    if env:
        lines += [
            "Environment: " + ", ".join(f"{k} {env.get(k)}" for k in ENV_FIELDS if env.get(k) is not None),
            "",
        ]
    stage_records = [r for r in records if r.get("name") == "stage"]
    lines += [
        "| stage | status | seconds | limit s | pass | fail | skip |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in stage_records:
        items = [r for r in records if r.get("stage") == s["stage"] and r.get("name") != "stage"]
        count = {k: sum(r.get("status") == k for r in items) for k in ("pass", "fail", "skip")}
        lines.append(
            f"| {s['stage']} | {s['status']} | {s.get('seconds', '')} | {s.get('limit_s', '')} "
            f"| {count['pass']} | {count['fail']} | {count['skip']} |"
        )
    problems = [r for r in records if r.get("status") in ("fail", "timeout") and r.get("stage") != "run"]
    if problems:
        lines += ["", "## Failures", ""]
        for r in problems:
            what = " ".join(
                str(r[k])
                for k in ("stage", "name", "op", "variant", "case", "out_dtype", "shape")
                if r.get(k)
            )
            why = r.get("error") or r.get("reason") or r.get("detail") or r.get("note") or ""
            lines.append(f"- {what}: {why}".rstrip(": "))
    timing = [r for r in records if r.get("stage") == "timing" and r.get("status") == "pass" and r.get("op")]
    peak = next((r for r in records if r.get("name") == "dense BF16 peak"), None)
    if timing:
        lines += ["", "## Timing (BF16 out; graph-replay median unless no CUDA graphs)", ""]
        if peak:
            lines += [f"Dense BF16 peak measured: {float(peak['tflops']):.0f} TFLOP/s", ""]
        head = ["shape", "op", "variant", "ms min / median / max", "TFLOP/s", "of peak", "vs _grouped_mm"]
        lines += _table([*head, "padded / useful"], [_timing_row(r) for r in timing])
    rows = [r for r in records if r.get("stage") == "pipeline" and r.get("iterationMS") is not None]
    if rows:
        lines += ["", "## Pipeline executions", ""]
        keys = ("name", "iterationMS", "sanityMaxError", "sanityTolerance", "sanityPassed")
        lines += _table(["execution", *keys[1:]], [[r.get(k) for k in keys] for r in rows])
    atomic_write(out / "summary.md", "\n".join(lines) + "\n")


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


if __name__ == "__main__":
    sys.exit(main())
