"""``python -m pipeline.run [--multirun] [overrides]``: run executions of the matrix.

With ``--multirun`` Hydra expands the sweep (by default the whole matrix) and the launcher plugin of
``hydra/launcher`` runs it. Without it, the one selected execution goes through the same launcher
path (validate, record, submit, wait), so a single run also gets its ranks, ledger entry and logs.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from pipeline.compose import CONFIG_DIR, CONFIG_NAME, job_config, register
from pipeline.compose.launcher import cluster_of, launcher_settings, refusals
from pipeline.launch.plan import plan
from pipeline.launch.sweep import run


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    with refusals("pipeline.run"):
        settings = launcher_settings(hydra_cfg.launcher, cluster_of(cfg))
        planned = plan([(list(hydra_cfg.overrides.task), job_config(cfg))], settings)
    (outcome,) = run(planned, settings)
    if outcome.error is not None:
        sys.exit(1)


def cli() -> None:
    """The command: the matrix and resolvers registered, then Hydra's own command line."""
    register()
    main()


if __name__ == "__main__":
    cli()
