"""``python -m pipeline.run [--multirun] [--resume] [overrides]``: run executions of the matrix.

With ``--multirun`` Hydra expands the sweep (by default the whole matrix) and the launcher plugin of
``hydra/launcher`` runs it. Without it, the one selected execution goes through the same launcher
path (validate, record the intent, submit, wait), so a single run also gets its ranks, ledger entry
and logs. ``--resume`` (the same as ``hydra.launcher.resume=true``) skips executions that already
have a valid shard in their dataset, which must have been set as this sweep is.

Exit status (``pipeline/base/exits.py``): 0 every execution done, 1 one failed, 2 bad input (an unknown
option or override, a value out of bounds, a dataset set otherwise: nothing launched), 130 / 143
interrupted by SIGINT / SIGTERM (the running job stopped and recorded as interrupted).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import hydra
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from pipeline.base.exits import BAD_INPUT, FAILED, OK, refuse, shorten
from pipeline.base.folders import check_path
from pipeline.compose import CONFIG_DIR, CONFIG_NAME, composed, output, register
from pipeline.compose.errors import one_line
from pipeline.compose.launcher import RESUME, claimed_sweep, cluster_of, launcher_settings, refusals
from pipeline.compose.overrides import check as check_overrides
from pipeline.launch.groups import check_limits
from pipeline.launch.plan import plan
from pipeline.launch.sweep import ExecutionFailed, run

PROG = "pipeline.run"


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    discard = lambda: output.discard(Path(hydra_cfg.runtime.output_dir))  # noqa: E731
    with refusals(PROG, cleanup=discard):
        settings = launcher_settings(hydra_cfg.launcher, cluster_of(cfg))
        planned = plan([composed(hydra_cfg.overrides.task, cfg)], settings)
        check_limits(planned, settings)
    with claimed_sweep(PROG, planned, hydra_cfg.launcher, discard) as sweep:
        outcomes = run(sweep.to_run, settings)
    if sweep.unwritable:
        raise ExecutionFailed(f"{sweep.unwritable[0][0].execution_id} is not written")
    if any(o.failed for o in outcomes):
        raise ExecutionFailed(f"{outcomes[0].planned.execution_id} failed or never started")


def cli(arguments: list[str] | None = None) -> int:
    """The command: Hydra's command line, its errors in one line with exit status 2, a failed
    execution exit status 1."""
    arguments = sys.argv[1:] if arguments is None else arguments
    parser = get_args_parser()  # Hydra's own: an option it does not know is refused in one line
    parser.prog = f"{PROG} (Hydra)"
    parser.error = lambda message: parser.exit(BAD_INPUT, f"{PROG}: error: {shorten(message)} (see --help)\n")  # type: ignore[method-assign]
    args = parser.parse_args([a for a in arguments if a != RESUME])
    register()
    try:
        _check(args)
    except ValueError as err:
        return refuse(PROG, err)
    called, full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = [sys.argv[0], *("hydra.launcher.resume=true" if a == RESUME else a for a in arguments)]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its errors rather than printing them: said here
    try:
        main()
    except (HydraException, OmegaConfBaseException) as err:
        return refuse(PROG, one_line(err))
    except ExecutionFailed:  # its FAILED line and the summary are printed already
        return FAILED
    finally:
        sys.argv = called
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR")
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    return OK


def _check(args: argparse.Namespace) -> None:
    """A ValueError for what Hydra would fail on later with a traceback, or take without using: two
    modes at once, a file name (a config, a pickled config) that no file can have, an override that
    chooses no option of its group or adds a key outside the extension points."""
    modes = [
        flag
        for flag, chosen in (
            ("--run", args.run),
            ("--multirun", args.multirun),
            ("--cfg", args.cfg is not None),
            ("--info", args.info is not None),
            ("--shell-completion", args.shell_completion),
        )
        if chosen
    ]
    if len(modes) > 1:
        raise ValueError(
            f"{' with '.join(modes)}: allowed: one of --run, --multirun, --cfg, --info, --shell-completion"
        )
    for option, name in (
        ("--config-name", args.config_name),
        ("--experimental-rerun", args.experimental_rerun),
    ):
        if name is not None:
            try:
                check_path(name)
            except ValueError as err:
                raise ValueError(f"{option} {err}") from None
    check_overrides(args.overrides, [args.config_dir] if args.config_dir else [])
