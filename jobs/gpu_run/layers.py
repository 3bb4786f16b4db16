"""The stages of the device run that run layers, on the kernels the gate lets through: the CUDA-only
tests, the loopback (one rank's NCCL exchange inside captured graphs), the ranks sharing the GPU, the
pipeline (a multirun, its aggregation and its rows) and the phase account of what it published; and
the planted stages of the dry run's plumbing tests."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cutlass_kernels import gating
from cutlass_kernels.isolation import Isolated, run_isolated
from cutlass_kernels.results import read
from jobs.gpu_records import device_of, kernel_rates
from jobs.gpu_run.kernels import gate
from jobs.gpu_run.pack import ESTIMATES
from jobs.gpu_run.plan import (
    ACCOUNT_NAMED,
    ACCOUNT_WITHIN,
    AGGREGATE_S,
    CUDA_TESTS,
    DRY_PAIRS,
    DRY_RANKS,
    PACKING,
    PAIR_FIELDS,
    PAIRS,
    PUBLISHED,
    RANKS,
    RECORDS_ENV,
    ROOT,
    STATUS_S,
    Sweep,
)
from jobs.gpu_run.run import Run
from pipeline.data.atomic import atomic_write


def gated(run: Run, stage: str) -> Callable[[float], tuple[int | None, str]]:
    """The body of a stage that runs layers (:data:`GATED`), on the kernels the gate lets through."""

    def body(limit: float) -> tuple[int | None, str]:
        env = gate(run)
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


def _tests(run: Run, limit: float, env: dict[str, str]) -> tuple[int | None, str]:
    """The CUDA-only tests in one pytest, each test's record appended the moment it ends
    (:mod:`jobs.gpu_run.pytest_records`), so a kill at the limit keeps every test that finished; the image's
    pytest, with no plugin but that one."""
    if importlib.util.find_spec("pytest") is None:
        why = "pytest is not importable on this machine"
        run.record("tests", name="pytest", status="fail", error=why)
        return 1, why
    env = {
        **env,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        RECORDS_ENV: str(run.results),
    }
    plugins = ["-p", "no:cacheprovider", "-p", "jobs.gpu_run.pytest_records"]
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
    """The matched pairs (:data:`PAIRS`): their sweep (:func:`_sweep`), then a record of each pair the
    aggregation published (MoK's time over Dist-MoE's, with its interval, on one GPU)."""
    rc, note = _sweep(run, "pipeline", DRY_PAIRS if run.dry_run else PAIRS, limit, env, traces=True)
    pairs = _published(run).get("pairs", [])
    for pair in pairs:
        run.record("pipeline", name="pair", status="info", **{k: pair.get(k) for k in PAIR_FIELDS})
    return rc, "; ".join(filter(None, [note, f"{len(pairs)} pair(s) published"]))


def _packing(run: Run, limit: float, env: dict[str, str]) -> tuple[int | None, str]:
    """The packing execution of Dist-MoE MXFP8 (:data:`PACKING`): its sweep into the same dataset, then
    its measured peak beside its estimate (the pack's, :data:`ESTIMATED`'s preset at scale=full)."""
    rc, note = _sweep(run, "packing", PACKING, limit, env, traces=False)
    path = run.whl / ESTIMATES
    estimated = json.loads(path.read_text()) if path.is_file() else {}
    for eid in PACKING.execution_ids():
        rows: list[dict[str, Any]] = _published(run).get("executions", [])
        row = next((r for r in rows if r["execution_id"] == eid), {})
        estimate = estimated.get(eid, {})
        measured, peak = row.get("peakAllocatedGiB"), estimate.get("timed_peak_gib")
        ratio = measured / peak if isinstance(measured, (int, float)) and peak else None
        run.record(
            "packing",
            name="peak",
            status="info" if row else "skip",
            execution=eid,
            peak_allocated_gib=measured,
            estimated_peak_gib=peak,
            estimate_preset=estimate.get("cluster"),
            measured_over_estimate=None if ratio is None else round(ratio, 4),
            reason=None if row else "not published",
        )
        said = f"{measured:.2f}" if isinstance(measured, (int, float)) else "no"
        note += f"; peak {said} GiB beside its estimate {f'{peak:.2f} GiB' if peak else 'none'}"
    return rc, note


def _published(run: Run) -> dict[str, Any]:
    """The run's dataset's published JSON (executions, pairs, accounts); empty where there is none."""
    path = run.dataset / "mok-comparison.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _sweep(
    run: Run, stage: str, sweep: Sweep, limit: float, env: dict[str, str], traces: bool
) -> tuple[int | None, str]:
    """A multirun of ``sweep`` into the run's dataset (``--resume``: what it holds done is not run
    again), then aggregation of whatever shards the dataset
    holds, then the rows and ``phases`` lines of the sweep's executions and what the grouped job cost
    (the multirun's wall time over its executions' rank-0 windows); each part under what the stage has
    left but the later parts' reserves, so the stage ends in its limit."""
    end = time.monotonic() + limit
    dataset = run.dataset
    overrides = ["--multirun", *sweep.overrides(run.dry_run), *(["keep_traces=true"] if traces else [])]
    overrides.append("--resume")  # in a dataset named with --dataset, what is done there is not run again
    sweep_limit = end - time.monotonic() - (AGGREGATE_S + STATUS_S) * run.scale
    began = time.time()
    multirun = run.session(
        run.python("-m", "pipeline.run", *overrides, f"dataset_dir={dataset}"), sweep_limit, env
    )
    rc = multirun.rc
    run.record(
        stage,
        name="multirun",
        status="timeout" if rc is None else "pass" if rc == 0 else "fail",
        rc=rc,
        seconds=round(multirun.seconds, 1),
        overrides=overrides,
        reason=f"killed at {sweep_limit:.0f} s (the rest kept for aggregation)" if rc is None else None,
    )
    aggregate_limit = end - time.monotonic() - (0 if rc == 0 else STATUS_S * run.scale)
    argv = run.python("-m", "pipeline.aggregate", str(dataset), "--no-figures", *_rates(run, stage))
    agg = run.session(argv, aggregate_limit, env).rc
    ids, rows = sweep.execution_ids(), []
    published = dataset / "mok-comparison.csv"
    if published.exists():
        shutil.copy(published, run.out / "mok-comparison.csv")
        with open(published) as f:
            rows = [r for r in csv.DictReader(f) if r["execution_id"] in ids]
        for row in rows:
            run.record(stage, name=row["execution_id"], status="pass", **{k: row.get(k) for k in PUBLISHED})
    ran = [(eid, parts) for eid, parts in _phase_lines(dataset, began) if eid in ids]  # by this multirun
    phases = [json.loads(parts) | {"execution": eid} for eid, parts in ran]
    for line in phases:
        run.record(stage, name="phases", status="info", **line)
    _keep_dataset(run, dataset)
    windows = sum(p.get("windows", 0.0) for p in phases)
    cost = round(multirun.seconds / windows, 2) if windows else None
    compiled, loaded = (sum(p.get(k, 0) for p in phases) for k in ("compiles", "loads"))
    run.record(
        stage,
        name="cost",
        status="info",
        multirun_s=round(multirun.seconds, 1),
        windows_s=round(windows, 2),
        executions=len(phases),
        over_windows=cost,
        compiles=compiled,
        loads=loaded,
    )
    before = len({r["execution_id"] for r in rows} - {eid for eid, _ in ran})
    note = f"{len(phases)} of {len(ids)} executions run" + (f", {before} done before" if before else "")
    note += f"; {compiled} compiles, {loaded} kernels loaded"
    if cost:
        note += f"; the multirun {multirun.seconds:.0f} s over its windows {windows:.1f} s: {cost}x"
    if rc == 0:  # pipeline.run exits 0 only when every execution is done: nothing to tell apart
        return agg, note
    status_limit = end - time.monotonic()
    status = run_isolated(
        run.python("-m", "pipeline.status", str(dataset), "--json"), max(status_limit, 1), env=env, cwd=ROOT
    )
    try:
        executions = json.loads(status.output)["executions"]
    except (json.JSONDecodeError, KeyError, TypeError):
        run.record(stage, name="pipeline.status", status="fail", detail=status.why(status_limit))
        executions = []
    for e in executions:
        if e["state"] != "done" and e["execution_id"] in ids:
            detail = " ".join(str(e[k]) for k in ("state", "detail", "log") if e.get(k))
            run.record(stage, name=e["execution_id"], status="fail", detail=detail[:600])
    return rc, note


def _rates(run: Run, stage: str) -> list[str]:
    """The aggregation's ``--rates``: OUT_DIR/kernel-rates.json made from the timing stage's records
    (:func:`jobs.gpu_records.kernel_rates`); none, and why on record, where the records hold no rates."""
    found = read(run.results)
    try:
        table = kernel_rates(found, device_of(found), f"jobs/gpu-run.sh run {run.run_id}, its timing stage")
    except ValueError as err:
        run.record(stage, name="kernel rates", status="skip", reason=str(err))
        return []
    path = run.out / "kernel-rates.json"
    atomic_write(path, json.dumps(table, indent=1) + "\n")
    run.record(stage, name="kernel rates", status="info", gemms=len(table["gemms"]))
    return ["--rates", str(path)]


def account(run: Run) -> tuple[int | None, str]:
    """The phase account of each single-GPU execution the pipeline published, checked: one per
    execution, its phases and unclaimed time adding up to its profiled iteration, on a GPU that
    iteration within ACCOUNT_WITHIN of the timed one and at least ACCOUNT_NAMED of its kernels named;
    a record per execution with its account."""
    published = run.dataset / "mok-comparison.json"
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


def _phase_lines(dataset: Path, since: float) -> list[tuple[str, str]]:
    """Each execution's ``phases`` line (:class:`pipeline.bench.execute.Phases`) from the logs of the
    jobs that wrote since ``since`` (a wall time: not those of a resumed dataset's earlier jobs): the
    execution and the line's JSON, once each (a job's log is reached by each member's link)."""
    folder = dataset / "logs"
    found_logs = {p.resolve() for p in folder.glob("**/*.out")} if folder.is_dir() else set()
    found: dict[tuple[str, str], None] = {}
    for log in sorted(p for p in found_logs if p.stat().st_mtime >= since):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("phases ") and line.count(" ") >= 2:
                _, eid, parts = line.split(" ", 2)
                found[eid, parts] = None
    return list(found)


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
    "packing": _packing,
}


def planted_stage(run: Run, name: str) -> Callable[[float], tuple[int | None, str]]:
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
