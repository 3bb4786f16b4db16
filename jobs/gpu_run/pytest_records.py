"""A pytest plugin of the device run's tests stage (``-p jobs.gpu_run.pytest_records``): each test's start and
outcome appended to the run's results file (``$GPU_RUN_RESULTS``) the moment they happen, so a
pytest killed at its limit keeps every test that ended and names the one it was in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cutlass_kernels.results import append
from jobs.gpu_run.plan import RECORDS_ENV

_OUTCOME = {"passed": "pass", "skipped": "skip", "failed": "fail"}


def _record(**fields: Any) -> None:
    append(Path(os.environ[RECORDS_ENV]), {"stage": "tests", **fields})


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _record(name=nodeid, status="start")


def pytest_runtest_logreport(report: Any) -> None:
    """One record per test: its call's outcome, or its setup's or teardown's where that one failed
    or skipped it (a fixture's error is the test's)."""
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        detail = "" if report.passed else str(report.longrepr)[-600:]
        _record(
            name=report.nodeid,
            status=_OUTCOME[report.outcome],
            seconds=round(report.duration, 2),
            detail=detail,
        )
    elif report.when == "teardown" and report.failed:
        _record(name=report.nodeid, status="fail", phase="teardown", detail=str(report.longrepr)[-600:])
