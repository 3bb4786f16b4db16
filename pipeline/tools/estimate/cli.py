"""``python -m pipeline.estimate [OVERRIDE ...] [--json]`` (``moe-bench estimate``): every selected
execution's GPU path at full scale on fake tensors (:mod:`pipeline.tools.estimate`); with ``--dataset DIR``,
the estimates a dataset publishes that are not kept yet (what ``pipeline.aggregate --estimate`` runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.base.exits import BAD_INPUT, FAILED, OK
from pipeline.base.folders import check_path
from pipeline.base.gpu_presets import DEFAULT_PRESET, gpu_presets
from pipeline.base.vocabulary import SWIGLU_FORMS
from pipeline.compose.errors import one_line
from pipeline.compose.select import select
from pipeline.data import estimates as kept_table
from pipeline.data.dataset import Dataset
from pipeline.data.scan import scan_shards
from pipeline.matrix import Suite, execution_of, suite_of
from pipeline.tools.estimate import report, table
from pipeline.tools.estimate.fake_cuda import FakeCudaError
from pipeline.tools.estimate.jobs import Job
from pipeline.tools.estimate.pool import run_jobs
from pipeline.tools.estimate.presets import Preset

USAGE = """usage: python -m pipeline.estimate [OVERRIDE ...] [cluster={presets}] [--json]
                                  [--swiglu-form {forms}] [--workers N] [--config-dir DIR]
       python -m pipeline.estimate --dataset DIR [--json] [--workers N]

Run each selected execution's GPU path at scale=full on fake tensors (the hot rank of a fake process
group of its EP size): peak allocated GiB and what holds it, device ops and host synchronizations per
timed iteration, and whether it fits the preset's GPU memory. Overrides select executions as for
python -m pipeline.list (suite=NAME another suite; --config-dir DIR one of one's own in
DIR/suite/NAME.yaml); cluster= picks the preset (default {default}; cluster=gb300,h200 both).
--swiglu-form runs Dist-MoE's fused SwiGLU backward in that form on the GPU (default: the GPU's own).
Exits 1 when an execution fails, has a host synchronization in its timed iteration or does not fit.
--dataset DIR estimates what the dataset DIR publishes instead (each of its executions on its cluster
preset, {default} for a dataset of none) where the kept table lacks it, and keeps it, so that
python -m pipeline.aggregate DIR publishes it (aggregate --estimate runs this first); it exits 1 when
an estimate could not be computed. Every estimate is computed once per code and kept (needs g++ once,
for the fake CUDA shim of a CPU-only torch).
Examples:
  python -m pipeline.estimate                                    the whole matrix on {default}
  python -m pipeline.estimate 'workload=glob(packing-ep64-*)' cluster=h200 --json
  python -m pipeline.estimate suite=seed-003 cluster=h200         seed 003's 16 cases on an H200
  python -m pipeline.estimate --dataset outputs/dataset"""


def _options(arguments: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(Hydra overrides, the estimate's own options); a one-line ValueError for a bad option."""
    overrides: list[str] = []
    options: dict[str, Any] = {"json": False, "swiglu": None, "workers": None, "dataset": None, "dirs": []}
    rest = iter(arguments)
    for arg in rest:
        if arg == "--json":
            options["json"] = True
        elif arg in ("--swiglu-form", "--workers", "--dataset", "--config-dir"):
            value = next(rest, None)
            if value is None:
                raise ValueError(f"{arg} needs a value")
            if arg == "--config-dir":
                if not Path(check_path(value)).is_dir():
                    raise ValueError(f"--config-dir {value!r} is not a folder")
                options["dirs"].append(value)
            elif arg == "--workers":
                if not value.isdigit() or int(value) < 1:
                    raise ValueError(f"--workers {value!r}: allowed: a positive integer")
                options["workers"] = int(value)
            elif arg == "--dataset":
                options["dataset"] = Path(check_path(value))
            elif value not in SWIGLU_FORMS:
                raise ValueError(f"--swiglu-form {value!r}; allowed: {', '.join(SWIGLU_FORMS)}")
            else:
                options["swiglu"] = value
        elif arg.startswith("-"):
            raise ValueError(
                f"unknown option {arg!r}; allowed: --json, --swiglu-form, --workers, --dataset, "
                "--config-dir, --help"
            )
        else:
            overrides.append(arg)
    if options["dataset"] is not None and (overrides or options["swiglu"]):
        extra = " ".join([*overrides, *(["--swiglu-form"] if options["swiglu"] else [])])
        raise ValueError(
            f"--dataset estimates what the dataset publishes, on its preset with the GPU's own SwiGLU "
            f"form: {extra} is not allowed with it"
        )
    return overrides, options


def jobs_of(overrides: list[str], swiglu: str | None, config_dirs: list[str] | None = None) -> list[Job]:
    """One job per selected (execution, cluster preset), checked: scale=full, the EP world size;
    ``config_dirs`` are searched for configs too (``--config-dir``)."""
    jobs = []
    for _, cfg in select(overrides, config_dirs or []):
        scale = _plain(cfg.scale)
        if scale.get("name") != "full":
            raise ValueError(f"the estimate is of scale=full; got scale={scale.get('name')}")
        if cfg.max_ranks is not None:
            raise ValueError(
                f"the estimate runs each execution's EP world size; max_ranks={cfg.max_ranks} is not allowed"
            )
        node = cfg.get("cluster")
        preset = Preset.named(DEFAULT_PRESET) if node is None else Preset.of(_plain(node))
        settings = {
            "scale": _plain(cfg.scale),
            "seed": int(cfg.seed),
            "swiglu": swiglu,
            "check": suite_of(cfg).check,
        }
        jobs.append(Job.of_execution(execution_of(cfg), preset, **settings))
    return jobs


def _plain(node: Any) -> dict[str, Any]:
    return cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))


def dataset_keys(dataset: Path) -> tuple[list[tuple[str, str]], Suite]:
    """The (execution id, preset) of every estimate ``dataset`` publishes, as the report looks them up,
    and the dataset's suite; a one-line ValueError when it is no dataset."""
    scan = scan_shards(Dataset.existing(dataset))
    return sorted(kept_table.keys_of(scan.newest.values()).values()), scan.suite


def _for_dataset(dataset: Path, options: dict[str, Any]) -> int:
    """Compute and keep what the kept table lacks of ``dataset``'s estimates; 1 when one failed."""
    keys, suite = dataset_keys(dataset)
    missing = sum(v is None for v in kept_table.kept(keys).values())
    found = table.estimates(keys, options["workers"], report.Progress(missing, sys.stderr), suite)
    failed = sorted(f"{e} ({p})" for (e, p), r in found.items() if r is None or "error" in r)
    if options["json"]:
        print(json.dumps([r for _, r in sorted(found.items())], indent=1))
    else:
        presets = ", ".join(sorted({p for _, p in keys})) or "-"
        print(
            f"{dataset}: {len(keys)} estimate(s) on {presets}: {len(keys) - missing} kept before, "
            f"{missing - len(failed)} computed and kept now, {len(failed)} failed"
            + "".join(f"\n  failed: {name}" for name in failed)
        )
    return FAILED if failed else OK


def main(arguments: list[str]) -> int:
    try:
        if {"-h", "--help"} & set(arguments):
            forms = "|".join(SWIGLU_FORMS)
            print(USAGE.format(presets="|".join(gpu_presets()), forms=forms, default=DEFAULT_PRESET))
            return 0
        overrides, options = _options(arguments)
        if options["dataset"] is not None:
            return _for_dataset(options["dataset"], options)
        jobs = jobs_of(overrides, options["swiglu"], options["dirs"])
    except (ValueError, HydraException, OmegaConfBaseException) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return BAD_INPUT
    except FakeCudaError as err:
        print(f"error: {err}", file=sys.stderr)
        return FAILED
    progress = report.Progress(len(jobs), sys.stderr)
    try:
        # what a dataset publishes is kept as it arrives, so aggregating needs no run of its own
        results = run_jobs(jobs, options["workers"], table.keeping(jobs, progress))
    except FakeCudaError as err:
        print(f"error: {err}", file=sys.stderr)
        return FAILED
    if options["json"]:
        print(json.dumps(results, indent=1))
    else:
        print(report.table(results))
    return 1 if report.problems(results) else 0
