"""``python -m pipeline.estimate [OVERRIDE ...] [--json]`` (``moe-bench estimate``): every selected
execution's GPU path at full scale on fake tensors (:mod:`pipeline.estimate`)."""

from __future__ import annotations

import json
import sys
from typing import Any, cast

from hydra.errors import HydraException
from omegaconf import OmegaConf

from pipeline.compose.select import select
from pipeline.estimate import report, table
from pipeline.estimate.jobs import Job
from pipeline.estimate.pool import run_jobs
from pipeline.estimate.presets import DEFAULT_PRESET, Preset
from pipeline.matrix import execution_of
from pipeline.vocabulary import SWIGLU_FORMS

USAGE = f"""usage: python -m pipeline.estimate [OVERRIDE ...] [cluster=gb300|h200] [--json]
                                  [--swiglu-form {"|".join(SWIGLU_FORMS)}] [--workers N]

Run each selected execution's GPU path at scale=full on fake tensors (the hot rank of a fake process
group of its EP size): peak allocated GiB and what holds it, device ops and host synchronizations per
timed iteration, and whether it fits the preset's GPU memory. Overrides select executions as for
python -m pipeline.list; cluster= picks the preset (default {DEFAULT_PRESET}; cluster=gb300,h200 both).
--swiglu-form runs Dist-MoE's fused SwiGLU backward in that form on the GPU (default: the GPU's own).
Exits 1 when an execution fails, has a host synchronization in its timed iteration or does not fit.
Examples:
  python -m pipeline.estimate                                    the whole matrix on {DEFAULT_PRESET}
  python -m pipeline.estimate 'workload=glob(packing-ep64-*)' cluster=h200 --json"""


def _options(arguments: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(Hydra overrides, the estimate's own options); a one-line ValueError for a bad option."""
    overrides: list[str] = []
    options: dict[str, Any] = {"json": False, "swiglu": None, "workers": None}
    rest = iter(arguments)
    for arg in rest:
        if arg == "--json":
            options["json"] = True
        elif arg in ("--swiglu-form", "--workers"):
            value = next(rest, None)
            if value is None:
                raise ValueError(f"{arg} needs a value")
            if arg == "--workers":
                if not value.isdigit() or int(value) < 1:
                    raise ValueError(f"--workers {value!r}: allowed: a positive integer")
                options["workers"] = int(value)
            elif value not in SWIGLU_FORMS:
                raise ValueError(f"--swiglu-form {value!r}; allowed: {', '.join(SWIGLU_FORMS)}")
            else:
                options["swiglu"] = value
        elif arg.startswith("-"):
            raise ValueError(f"unknown option {arg!r}; allowed: --json, --swiglu-form, --workers, --help")
        else:
            overrides.append(arg)
    return overrides, options


def jobs_of(overrides: list[str], swiglu: str | None) -> list[Job]:
    """One job per selected (execution, cluster preset), checked: scale=full, the EP world size."""
    jobs = []
    for _, cfg in select(overrides):
        scale = _plain(cfg.scale)
        if scale.get("name") != "full":
            raise ValueError(f"the estimate is of scale=full; got scale={scale.get('name')}")
        if cfg.max_ranks is not None:
            raise ValueError(
                f"the estimate runs each execution's EP world size; max_ranks={cfg.max_ranks} is not allowed"
            )
        node = cfg.get("cluster")
        preset = Preset.named(DEFAULT_PRESET) if node is None else Preset.of(_plain(node))
        jobs.append(Job(execution_of(cfg).execution_id, preset, _plain(cfg.scale), int(cfg.seed), swiglu))
    return jobs


def _plain(node: Any) -> dict[str, Any]:
    return cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))


def main(arguments: list[str]) -> int:
    if {"-h", "--help"} & set(arguments):
        print(USAGE)
        return 0
    try:
        overrides, options = _options(arguments)
        jobs = jobs_of(overrides, options["swiglu"])
    except (ValueError, HydraException) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    progress = report.Progress(len(jobs), sys.stderr)
    results = run_jobs(jobs, options["workers"], progress)
    table.keep(jobs, results)  # what a dataset publishes, so aggregating needs no run of its own
    if options["json"]:
        print(json.dumps(results, indent=1))
    else:
        print(report.table(results))
    return 1 if report.problems(results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
