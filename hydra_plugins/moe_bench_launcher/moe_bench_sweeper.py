"""Hydra's basic sweeper, minus its composition of every job before the launch.

The MoE launcher composes the whole batch itself (:mod:`pipeline.compose.jobs`) and validates
every execution before it submits anything, so the basic sweeper's own pass only doubled the time a
sweep of the matrix takes to go out.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class MoEBenchSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Left to the launcher, which composes and checks each job before submitting any."""
