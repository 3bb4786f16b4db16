"""Hydra's basic sweeper, minus its composition of every job before the launch, with the names of
``workload`` and ``variant`` expanded over the chosen suite.

The MoE launcher composes the whole batch itself (:mod:`pipeline.compose.jobs`) and validates
every execution before it submits anything, so the basic sweeper's own pass only doubled the time a
sweep of the matrix takes to go out. ``workload`` and ``variant`` are names of the suite's workloads
and variants, not config groups: their globs (the default sweep) expand here, over the suite the
command line chose (:func:`pipeline.compose.select.named`). A sweep the launcher refuses leaves no
sweep folder behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override

from pipeline.base.exits import BAD_INPUT
from pipeline.compose import output
from pipeline.compose.launcher import refusals
from pipeline.compose.select import named
from pipeline.matrix import suite_of


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

    def split_arguments(  # type: ignore[override]  # Hydra's is static; this one needs the suite
        self, overrides: list[Override], max_batch_size: int | None
    ) -> list[list[list[str]]]:
        assert self.config is not None and self.hydra_context is not None, "setup() was not called"
        with refusals("pipeline.run"):
            parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
            overrides = named(overrides, suite_of(self.config), parser)
        return BasicSweeper.split_arguments(overrides, max_batch_size)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Left to the launcher, which composes and checks each job before submitting any."""
