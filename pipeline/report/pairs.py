"""Pair every Dist-MoE execution with the MoK execution of its matched workload (shape + precision).

``speedup`` is MoK time / Dist-MoE time; paired metrics are Dist-MoE / MoK. Each pair says what ran:
the ranks launched, the device and how the MXFP8 products ran (both partners ran alike in a dataset
of one scale and device; the candidate's row is named). Exactly one pipeline per
matched workload is ``selected``: the fastest Dist-MoE one (ties go to the smaller execution id).
MoK and Dist-MoE are the registry's pair roles (:func:`pipeline.base.implementations.reference` and
``candidate``), and the columns keep the report's names for them (``mok*`` the reference, ``dist*`` the
candidate); any other implementation is published in no pair.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pipeline.base.implementations import candidate, reference
from pipeline.base.intervals import ratio_interval
from pipeline.report.executions import RATIO_METRICS
from pipeline.report.publish import Row, number, optional_number

REFERENCE_ID, CANDIDATE_ID = "mok_execution_id", "dist_execution_id"
COLUMNS = (
    CANDIDATE_ID,
    REFERENCE_ID,
    "workload_id",
    "pipeline",
    "ranks",
    "device",
    "mxfp8Products",
    "distIterationMS",
    "mokIterationMS",
    "speedup",
    "speedupLow",
    "speedupHigh",
    "selected",
    *(f"{m}Ratio" for m in RATIO_METRICS),
)


def pair_rows(executions: list[Row], windows: Mapping[str, np.ndarray] | None = None) -> list[Row]:
    """One row per candidate execution whose reference partner is present, sorted by candidate
    execution id; ``windows`` (per execution id, its slowest rank's per-iteration combined window
    times) give each speedup its 95% interval (:func:`pipeline.base.intervals.ratio_interval`: MoK's
    windows over Dist-MoE's), empty without them or where the windows are too few."""
    ref, cand = reference(), candidate()
    partners: dict[str, Row] = {}
    for row in executions:
        if row["implementation"] == ref.name:
            workload = str(row["workload_id"])
            if workload in partners:
                raise ValueError(
                    f"two {ref.label} executions for workload {workload!r}: "
                    f"{partners[workload]['execution_id']!r} and {row['execution_id']!r}"
                )
            partners[workload] = row
    paired = sorted(
        (r for r in executions if r["implementation"] == cand.name and r["workload_id"] in partners),
        key=lambda r: str(r["execution_id"]),
    )
    selected = fastest(paired)
    return [
        _pair(row, partners[str(row["workload_id"])], selected[str(row["workload_id"])] is row, windows or {})
        for row in paired
    ]


def fastest(rows: list[Row]) -> dict[str, Row]:
    """Per matched workload, the row of the shortest iteration (ties go to the smaller execution id):
    the rule that selects a pipeline."""
    best: dict[str, Row] = {}
    for row in sorted(rows, key=lambda r: str(r["execution_id"])):  # strict < keeps the smaller id
        found = best.get(str(row["workload_id"]))
        if found is None or number(row, "iterationMS") < number(found, "iterationMS"):
            best[str(row["workload_id"])] = row
    return best


def _pair(dist: Row, mok: Row, selected: bool, windows: Mapping[str, np.ndarray]) -> Row:
    mine, theirs = windows.get(str(dist["execution_id"])), windows.get(str(mok["execution_id"]))
    interval = None if mine is None or theirs is None else ratio_interval(mine, theirs)
    return {
        CANDIDATE_ID: dist["execution_id"],
        REFERENCE_ID: mok["execution_id"],
        "workload_id": dist["workload_id"],
        "pipeline": dist["pipeline"],
        "ranks": dist["ranks"],
        "device": dist["device"],
        "mxfp8Products": dist["mxfp8Products"],
        "distIterationMS": dist["iterationMS"],
        "mokIterationMS": mok["iterationMS"],
        "speedup": number(mok, "iterationMS") / number(dist, "iterationMS"),
        "speedupLow": None if interval is None else interval[0],
        "speedupHigh": None if interval is None else interval[1],
        "selected": selected,
        **{f"{m}Ratio": _ratio(optional_number(dist, m), optional_number(mok, m)) for m in RATIO_METRICS},
    }


def _ratio(dist: float | None, mok: float | None) -> float | None:
    return None if dist is None or mok is None or mok == 0 else dist / mok
