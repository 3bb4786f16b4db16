"""The timed steps of an execution: one forward, one backward (where the kind has one), and one
iteration of both, the unit that warm-up, calibration, timing and diagnostics repeat.

The steps are eager calls of the layers, or (on GPUs) CUDA-graph replays of them
(:mod:`pipeline.bench.graphs`); whoever repeats them does not need to know which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Steps:
    """``forward()`` returns what ``backward(out)`` consumes; ``backward`` is None for inference.
    ``graphs`` says whether they are graph replays, ``reason`` why not (None when they are)."""

    forward: Callable[[], Any]
    backward: Callable[[Any], None] | None
    graphs: bool = False
    reason: str | None = None

    def iteration(self) -> None:
        """One iteration of the kind: a forward, then its backward."""
        out = self.forward()
        if self.backward is not None:
            self.backward(out)

    def warm_up(self, iterations: int) -> None:
        """``iterations`` whole iterations, untimed."""
        for _ in range(iterations):
            self.iteration()
