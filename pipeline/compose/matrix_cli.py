"""``python -m pipeline.list [overrides]``: list the executions a multirun with these overrides
would launch (execution id, then its overrides) and count them, without launching anything. On a GPU
preset (``cluster=h200``) it also says where each EP size's ranks sit: nodes and NVLink domains."""

from __future__ import annotations

from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from pipeline.base.exits import OK, refuse
from pipeline.base.folders import check_path
from pipeline.base.gpu_presets import GpuPreset
from pipeline.compose.errors import one_line
from pipeline.compose.jobs import composed
from pipeline.compose.overrides import check as check_overrides
from pipeline.compose.select import select
from pipeline.launch.plan import check_distinct, validate
from pipeline.matrix import counts

USAGE = """usage: python -m pipeline.list [--config-dir DIR] [OVERRIDE ...]

List the executions a multirun with these Hydra overrides would launch (execution id, then the
overrides that reproduce it) and count them; nothing is launched. --config-dir DIR searches DIR for
configs too, as pipeline.run's does: a suite of one's own in DIR/suite/NAME.yaml. With a GPU preset
(cluster=...), also the nodes and NVLink domains each EP size spans there. Examples:
  python -m pipeline.list                                   the report's matrix (110 executions)
  python -m pipeline.list suite=seed-003                    seed 003's 16 cases
  python -m pipeline.list --config-dir DIR suite=NAME       a suite of one's own, DIR/suite/NAME.yaml
  python -m pipeline.list cluster=h200 'workload=glob(training-*)'   ... and EP32, EP64 span 4, 8 nodes
  python -m pipeline.list workload=inference-ep8-f1536 'variant=glob(mok-*)' scale=ci"""


def config_dirs(arguments: list[str]) -> tuple[list[str], list[str]]:
    """(the overrides, the folders of ``--config-dir DIR`` / ``--config-dir=DIR``); a ValueError for
    any other option or a missing folder."""
    overrides, folders = [], []
    rest = iter(arguments)
    for arg in rest:
        if arg == "--config-dir" or arg.startswith("--config-dir="):
            folder = arg.partition("=")[2] if "=" in arg else next(rest, None)
            if not folder:
                raise ValueError("--config-dir needs a folder")
            if not Path(check_path(folder)).is_dir():
                raise ValueError(f"--config-dir {folder!r} is not a folder")
            folders.append(folder)
        elif arg.startswith("-"):
            raise ValueError(
                f"unknown option {arg}; allowed: -h, --help, --config-dir DIR (the rest are overrides)"
            )
        else:
            overrides.append(arg)
    return overrides, folders


def main(arguments: list[str]) -> int:
    if {"-h", "--help"} & set(arguments):
        print(USAGE)
        return OK
    try:
        arguments, folders = config_dirs(arguments)
    except ValueError as err:
        return refuse("error", err)
    try:
        check_overrides(arguments, folders)
        jobs = select(arguments, folders)
        # the launcher's own checks: what it would refuse is not listed as launchable
        composed_jobs = [composed(overrides, cfg) for overrides, cfg in jobs]
        checked = [validate(job) for job in composed_jobs]
        executions = [c.execution for c in checked]
        for c in checked:  # its form (nothing is written here, so not whether it can be written)
            _dataset_path(c.dataset_dir)
        check_distinct(
            [
                (j.overrides, c.dataset_dir, c.execution.execution_id)
                for j, c in zip(composed_jobs, checked, strict=True)
            ]
        )
    except (ValueError, HydraException, OmegaConfBaseException) as err:
        return refuse("error", one_line(err))
    for (overrides, _), execution in zip(jobs, executions, strict=True):
        print(execution.execution_id, *overrides)
    for line in spans(
        [
            (j.config.get("cluster"), c.shape.ep, c.shape.ranks)
            for j, c in zip(composed_jobs, checked, strict=True)
        ]
    ):
        print(line)
    n, workloads, pairs = counts(executions)
    print(f"{n} executions, {workloads} workloads, {pairs} pairs")
    return OK


def spans(placed: list[tuple[object, int, int]]) -> list[str]:
    """Where the ranks of each listed (composed ``cluster`` node, EP, ranks) sit on a GPU preset, at its
    ranks per node: ``h200: EP32 on 32 ranks spans 4 nodes x 8 GPUs, 4 NVLink domains of 8 GPUs, ...``."""
    lines = {}
    for node, ep, ranks in placed:
        if isinstance(node, dict) and node.get("gpus"):
            preset = GpuPreset.of(node)
            span = preset.span(ranks).describe()
            lines[(preset.name, ep, ranks)] = f"{preset.name}: EP{ep} on {ranks} ranks spans {span}"
    return [lines[key] for key in sorted(lines)]


def _dataset_path(root: object) -> None:
    """Refuse a ``dataset_dir`` that the run would refuse for its form: not a path, empty, too long."""
    if not isinstance(root, str):
        raise ValueError(f"dataset_dir must be a path, got {root!r}")
    try:
        check_path(root)
    except ValueError as err:
        raise ValueError(f"dataset_dir {err}") from None
