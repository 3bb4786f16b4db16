"""Estimates in worker processes (:mod:`pipeline.tools.estimate.worker`), one per core, fed one job at a
time; the jobs of one workload go to one worker, which plans its routing once for all of them."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from pipeline import REPO_ROOT
from pipeline.tools.estimate import fake_cuda
from pipeline.tools.estimate.jobs import Job

# Relative cost of a job (its device ops and routing), to start the longest ones first.
_COST = {"packing": 10, "training": 2, "inference": 1}


def run_jobs(
    jobs: list[Job],
    workers: int | None = None,
    done: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """The results of ``jobs`` (:func:`pipeline.tools.estimate.run.estimate`), in their order; ``done``
    is called with each result as it arrives."""
    if not jobs:
        return []
    fake_cuda.prepare()
    groups: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(job.resolved().workload.name, []).append(i)
    order = sorted(groups.values(), key=lambda g: -len(g) * _cost(jobs[g[0]]))
    pending: queue.Queue[list[int]] = queue.Queue()
    for group in order:
        pending.put(group)
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    lock = threading.Lock()

    def serve() -> None:
        worker = _Worker()
        try:
            while True:
                try:
                    group = pending.get_nowait()
                except queue.Empty:
                    return
                for i in group:
                    result = worker.ask(jobs[i])
                    with lock:
                        results[i] = result
                        if done is not None:
                            done(result)
        finally:
            worker.close()

    count = max(1, min(workers or os.cpu_count() or 1, len(order)))
    threads = [threading.Thread(target=serve, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def _cost(job: Job) -> int:
    workload = job.resolved().workload
    return _COST[workload.kind] * workload.ep


class _Worker:
    """One worker process; restarted after a crash (the job it was running reports why)."""

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")
        path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "pipeline.tools.estimate.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            env={**os.environ, "PYTHONPATH": path},  # the code of this process, wherever it runs from
        )  # fmt: skip

    def ask(self, job: Job) -> dict[str, Any]:
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(job.as_dict()) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if line:
            return json.loads(line)
        self.close()
        tail = self._tail
        self._start()  # a fresh worker for the jobs that follow
        return {"execution_id": job.execution, "error": f"the estimate's worker died: {tail}"}

    def close(self) -> None:
        if self._process.stdin is not None and not self._process.stdin.closed:
            self._process.stdin.close()
        code = self._process.wait()
        self._stderr.seek(0)
        lines = self._stderr.read().strip().splitlines()
        self._tail = f"exit {code}: {lines[-1] if lines else 'no output'}"
        self._stderr.close()
