"""A suite's choices that its source does not state, each with the executions it touches
(``meta.assumptions`` of the published JSON, ``docs/dataset.md``): the suite's own (its file's
``assumptions``: for the report, how the 110 / 44 / 66 come out of 22 shapes and 5 variants), what
each implementation's record chose, and how routing is timed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.base.implementations import implementations
from pipeline.matrix import REPORT, Execution, Suite


@dataclass(frozen=True)
class Assumption:
    """One choice: what it concerns, what this project chose, and the executions it touches."""

    what: str
    choice: str
    executions: tuple[str, ...]


def assumptions(suite: Suite) -> tuple[Assumption, ...]:
    """The choices of ``suite``, each touching at least one of its executions."""

    def touching(test: Callable[[Execution], bool]) -> tuple[str, ...]:
        return tuple(sorted(e.execution_id for e in suite.executions if test(e)))

    def running(implementation: str, precision: str) -> Callable[[Execution], bool]:
        return lambda e: e.variant.implementation == implementation and e.variant.precision == precision

    def named(workloads: tuple[str, ...]) -> Callable[[Execution], bool]:
        return lambda e: e.workload.name in workloads

    found = (
        *(Assumption(a.what, a.choice, touching(named(a.workloads))) for a in suite.assumptions),
        *(  # what each implementation's record chose
            Assumption(c.what, c.choice, touching(running(i.name, c.precision)))
            for i in implementations()
            for c in i.choices
        ),
        Assumption(
            "routing outside the timed iteration",
            "the router's top-k choice and weights are fixed inputs, and the dispatch layout of a routing "
            "(count exchange, sort, per-expert counts, permutations) is built once before timing and "
            "reused, as CUDA graphs need; a timed forward moves rows and computes (docs/dataset.md gives "
            "its cost)",
            touching(lambda e: True),
        ),
    )
    return tuple(a for a in found if a.executions)


ASSUMPTIONS: tuple[Assumption, ...] = assumptions(REPORT)
