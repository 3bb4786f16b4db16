"""A Hydra callback for the tests: each job event becomes one line of a file, with the job's number and
its workload and variant."""

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class RecordJobs(Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def _record(self, event: str, config: DictConfig) -> None:
        with open(self.path, "a") as f:
            choices = " ".join(o.split("=", 1)[1] for o in config.hydra.overrides.task[:2])
            f.write(f"{event} {config.hydra.job.num} {choices}\n")

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._record("start", config)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        self._record(f"end:{job_return.status.name}", config)
