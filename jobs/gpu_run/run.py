"""A device run's state and the plumbing every step shares: its children (each isolated under a
limit, its output into the log), the step around each body (its limit within the run's deadline,
its line on stdout, its record), the pool of children run side by side, and the summary rewritten as
the results grow."""

from __future__ import annotations

import concurrent.futures
import datetime
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from cutlass_kernels import gating
from cutlass_kernels.forkserver import ForkServer
from cutlass_kernels.isolation import Isolated, run_isolated
from cutlass_kernels.results import append
from jobs.gpu_run.plan import PARALLEL, POLL_S, ROOT, RUN_SPENT, Step
from jobs.gpu_run.summary import write_summary


@dataclass
class Run:
    """A run in progress: where its records go, its scratch folder, its deadline, its children's
    limits and environment, and what the plan said."""

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
    whl: Path = ROOT / ".whl"  # what travelled beside the tree (jobs/pack-gpu.sh, jobs.gpu_run.pack)
    named_dataset: Path | None = None  # --dataset: the pipeline's dataset, kept (else the work folder's)
    server: ForkServer | None = None  # the kernel children's, started by the first of them
    server_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def results(self) -> Path:
        return self.out / "results.jsonl"

    @property
    def dataset(self) -> Path:
        """Where the pipeline and packing steps sweep: the folder ``--dataset`` names (kept, and a rerun
        into it resumes), else one in the work folder (removed with it; OUT_DIR keeps it as a tar)."""
        return self.named_dataset or self.work / "dataset"

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
        """``argv`` isolated under ``limit``, its output captured and then written to the log; a
        ``python -m`` child forked from the run's fork server, torch already imported."""
        with self.server_lock:
            if self.server is None:
                self.server = ForkServer(["torch"], self.env, ROOT, self.log)
        done = run_isolated(argv, limit, env=env or self.env, cwd=ROOT, server=self.server)
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

    def close(self) -> None:
        """End the fork server, its record saying what it saved: its imports once, and the children
        forked from it."""
        server, self.server = self.server, None
        if server is None:
            return
        server.close()
        self.record(
            "run",
            name="fork server",
            status="info",
            preloaded=server.ready.get("preloaded"),
            import_s=server.ready.get("seconds"),
            threads=server.ready.get("threads"),
            forked=server.forked,
        )

    def summarize(self, force: bool = False) -> None:
        """Rewrite the summary where results.jsonl has grown since; a fault in it goes to the log and never
        stops the run (results.jsonl holds everything the summary would show)."""
        try:
            size = self.results.stat().st_size if self.results.exists() else 0
            if force or size != self.summarized:
                self.summarized = size
                write_summary(self.out)
        except Exception:
            import traceback

            with self.log_lock:
                self.log.write(f"gpu-run: summary.md not rewritten:\n{traceback.format_exc()}")


def say(run: Run, line: str) -> None:
    """One line on stdout as a step ends: the output of a call killed at its limit still tells. Said
    before the step's record is appended, so a step on record has its line on stdout however the run
    is stopped."""
    print(f"[{time.monotonic() - run.began:5.0f} s] {line}", flush=True)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def stage(
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
        say(run, f"{step.label}: skip ({RUN_SPENT})")
        run.record(step.stage, name="stage", variant=step.variant, status="skip", reason=RUN_SPENT)
        return False
    start, left = time.monotonic(), run.left(deadline)
    rc, note = body(limit)
    status = "timeout" if rc is None else "pass" if rc == 0 else "fail"
    extra = {"reason": f"killed at its {limit:.0f} s limit"} if rc is None else {}
    seconds = round(time.monotonic() - start, 1)
    say(run, f"{step.label}: {status} in {seconds} s of {limit:.0f}" + (f"; {note}" if note else ""))
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
    run.summarize()
    return status == "pass"


def parallel(run: Run, jobs: Sequence[Callable[[], None]]) -> None:
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
            run.summarize()


def verdict(run: Run, stage: str, k: str, status: str, variant: str | None = None, **why: str) -> None:
    """``k``'s verdict in ``stage``, recorded under the step's ``variant`` (by default the key's)."""
    op, out_dtype, own = gating.split(k)
    fields = {"op": op, "out_dtype": out_dtype, "variant": variant or own, "status": status}
    run.record(stage, name="verdict", verdict=True, key=k, **fields, **why)
