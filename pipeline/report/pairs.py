"""Pair every Dist-MoE execution with the MoK execution of its matched workload (shape + precision).

``speedup`` is MoK time / Dist-MoE time; paired metrics are Dist-MoE / MoK. Exactly one pipeline per
matched workload is ``selected``: the fastest Dist-MoE one (ties go to the smaller execution id).
"""

from __future__ import annotations

from pipeline.report.executions import RATIO_METRICS
from pipeline.report.publish import Row, number, optional_number

COLUMNS = (
    "dist_execution_id",
    "mok_execution_id",
    "workload_id",
    "pipeline",
    "distIterationMS",
    "mokIterationMS",
    "speedup",
    "selected",
    *(f"{m}Ratio" for m in RATIO_METRICS),
)


def pair_rows(executions: list[Row]) -> list[Row]:
    """One row per Dist-MoE execution whose MoK partner is present, sorted by Dist-MoE execution id."""
    mok: dict[str, Row] = {}
    for row in executions:
        if row["implementation"] == "mok":
            workload = str(row["workload_id"])
            if workload in mok:
                raise ValueError(
                    f"two MoK executions for workload {workload!r}: "
                    f"{mok[workload]['execution_id']!r} and {row['execution_id']!r}"
                )
            mok[workload] = row
    dist = sorted(
        (r for r in executions if r["implementation"] == "dist-moe" and r["workload_id"] in mok),
        key=lambda r: str(r["execution_id"]),
    )
    fastest: dict[str, Row] = {}
    for row in dist:  # sorted by id, so strict < keeps the smaller id on ties
        best = fastest.get(str(row["workload_id"]))
        if best is None or number(row, "iterationMS") < number(best, "iterationMS"):
            fastest[str(row["workload_id"])] = row
    return [_pair(row, mok[str(row["workload_id"])], fastest[str(row["workload_id"])] is row) for row in dist]


def _pair(dist: Row, mok: Row, selected: bool) -> Row:
    return {
        "dist_execution_id": dist["execution_id"],
        "mok_execution_id": mok["execution_id"],
        "workload_id": dist["workload_id"],
        "pipeline": dist["pipeline"],
        "distIterationMS": dist["iterationMS"],
        "mokIterationMS": mok["iterationMS"],
        "speedup": number(mok, "iterationMS") / number(dist, "iterationMS"),
        "selected": selected,
        **{f"{m}Ratio": _ratio(optional_number(dist, m), optional_number(mok, m)) for m in RATIO_METRICS},
    }


def _ratio(dist: float | None, mok: float | None) -> float | None:
    return None if dist is None or mok is None or mok == 0 else dist / mok
