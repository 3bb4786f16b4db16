"""The workload matrix: the cells (:mod:`pipeline.matrix.cells`) and the suites that list them
(:mod:`pipeline.matrix.suite`).

A suite is configuration (``conf/suite/*.yaml``); the report's, ``suite=report`` and the default, is
22 shapes x 5 variants = 110 executions, 44 matched workloads and 66 pairs. The names below are the
report's suite, for what has no dataset to take a suite from (a dataset written before suites, the
benchmarks); every command that reads a dataset takes the suite the dataset recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.base.implementations import candidate, reference
from pipeline.matrix.cells import PROFILES, REFERENCE, Execution, Variant, Workload
from pipeline.matrix.suite import Suite, report

__all__ = [
    "EXECUTIONS",
    "EXECUTION_BY_ID",
    "PROFILES",
    "REFERENCE",
    "REPORT",
    "VARIANTS",
    "VARIANT_BY_NAME",
    "WORKLOADS",
    "WORKLOAD_BY_NAME",
    "Execution",
    "Suite",
    "Variant",
    "Workload",
    "counts",
    "execution_of",
    "report",
    "suite_of",
]

REPORT = report()
WORKLOADS: tuple[Workload, ...] = REPORT.workloads
VARIANTS: tuple[Variant, ...] = REPORT.variants
WORKLOAD_BY_NAME = {w.name: w for w in WORKLOADS}
VARIANT_BY_NAME = {v.name: v for v in VARIANTS}
EXECUTIONS: tuple[Execution, ...] = REPORT.executions
EXECUTION_BY_ID = REPORT.by_id


def counts(executions: tuple[Execution, ...] | list[Execution]) -> tuple[int, int, int]:
    """(executions, matched workloads, pairs) of a selection: a pair is an execution of the pairs'
    candidate (Dist-MoE) whose reference partner (MoK, same workload id) is also selected."""
    ids = {e.workload_id for e in executions}
    ref, cand = reference().name, candidate().name
    partnered = {e.workload_id for e in executions if e.variant.implementation == ref}
    pairs = sum(1 for e in executions if e.variant.implementation == cand and e.workload_id in partnered)
    return len(executions), len(ids), pairs


def suite_of(cfg: Mapping[str, Any]) -> Suite:
    """The suite of a composed config (the report's where it has none: configs written before suites)."""
    node = cfg.get("suite")
    return REPORT if node is None else Suite.of(node)


def execution_of(cfg: Mapping[str, Any]) -> Execution:
    """The execution a composed config names in its suite; a ValueError lists the allowed names."""
    return suite_of(cfg).execution_of(cfg)
