"""The matrix's choices that the report does not state, each with the executions it touches: how the
110 / 44 / 66 of the report come out of 22 shapes and 5 variants (``meta.assumptions`` of the published
JSON, ``docs/dataset.md``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.base.implementations import implementations
from pipeline.matrix import EXECUTIONS, Execution


@dataclass(frozen=True)
class Assumption:
    """One choice: what it concerns, what this project chose, and the executions it touches."""

    what: str
    choice: str
    executions: tuple[str, ...]


def _touching(test: Callable[[Execution], bool]) -> tuple[str, ...]:
    return tuple(sorted(e.execution_id for e in EXECUTIONS if test(e)))


def _running(implementation: str, precision: str) -> Callable[[Execution], bool]:
    return lambda e: e.variant.implementation == implementation and e.variant.precision == precision


ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        "imbalanced inference and training",
        "the inference and training width sweeps add one F = 3,072 shape per EP whose tracked GPU "
        "carries a load factor of 2.0 (the report names imbalance factors only for the packing profiles)",
        _touching(lambda e: e.workload.kind != "packing" and e.workload.imbalance != 1.0),
    ),
    Assumption(
        "balanced packing",
        "packing runs a balanced profile (load 1.0 in all ten layers) beside the report's profiles A "
        "and B, at EP32 and EP64",
        _touching(lambda e: e.workload.profile == "balanced"),
    ),
    *(  # what each implementation's record chose
        Assumption(c.what, c.choice, _touching(_running(i.name, c.precision)))
        for i in implementations()
        for c in i.choices
    ),
    Assumption(
        "routing outside the timed iteration",
        "the router's top-k choice and weights are fixed inputs, and the dispatch layout of a routing "
        "(count exchange, sort, per-expert counts, permutations) is built once before timing and reused, "
        "as CUDA graphs need; a timed forward moves rows and computes (docs/dataset.md gives its cost)",
        _touching(lambda e: True),
    ),
)
