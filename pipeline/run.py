"""``python -m pipeline.run [--multirun] [overrides]``: run executions of the matrix.

With ``--multirun`` Hydra expands the sweep (by default the whole matrix) and the launcher plugin of
``hydra/launcher`` runs it. Without it, the one selected execution goes through the same launcher
path (validate, record, submit, wait), so a single run also gets its ranks, ledger entry and logs.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from pipeline.launch.sweep import plan, run
from pipeline.matrix.select import CONFIG_DIR, CONFIG_NAME


@hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")
def main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    launcher = OmegaConf.to_container(hydra_cfg.launcher, resolve=True)
    config = OmegaConf.to_container(cfg, resolve=True)
    (outcome,) = run(plan([(list(hydra_cfg.overrides.task), config)]), launcher)
    if outcome.error is not None:
        sys.exit(1)


if __name__ == "__main__":
    main()
