"""Hydra's basic sweeper, minus its composition of every job before the launch.

The MoE launcher composes the whole batch itself (:mod:`pipeline.compose.jobs`) and validates
every execution before it submits anything, so the basic sweeper's own pass only doubled the time a
sweep of the matrix takes to go out. A sweep the launcher refuses leaves no sweep folder behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from pipeline.base.exits import BAD_INPUT
from pipeline.compose import output


class MoEBenchSweeper(BasicSweeper):
    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None, "setup() was not called"
        folder = Path(str(self.config.hydra.sweep.dir))
        try:
            return super().sweep(arguments)
        except SystemExit as refused:
            if refused.code == BAD_INPUT:
                output.discard(folder)
            raise

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Left to the launcher, which composes and checks each job before submitting any."""
