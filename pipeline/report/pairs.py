"""Pair every Dist-MoE execution with the MoK execution of its matched workload (shape + precision).

``speedup`` is MoK time / Dist-MoE time; paired metrics are Dist-MoE / MoK. Exactly one pipeline per
matched workload is ``selected``: the fastest Dist-MoE one (ties go to the smaller execution id).
"""

from __future__ import annotations

from typing import Any

from pipeline.report.executions import RATIO_METRICS

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


def pair_rows(executions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per Dist-MoE execution whose MoK partner is present, sorted by Dist-MoE execution id."""
    mok: dict[str, dict[str, Any]] = {}
    for row in executions:
        if row["implementation"] == "mok":
            if row["workload_id"] in mok:
                raise ValueError(
                    f"two MoK executions for workload {row['workload_id']!r}: "
                    f"{mok[row['workload_id']]['execution_id']!r} and {row['execution_id']!r}"
                )
            mok[row["workload_id"]] = row
    dist = sorted(
        (r for r in executions if r["implementation"] == "dist-moe" and r["workload_id"] in mok),
        key=lambda r: r["execution_id"],
    )
    fastest: dict[str, dict[str, Any]] = {}
    for row in dist:  # sorted by id, so strict < keeps the smaller id on ties
        best = fastest.get(row["workload_id"])
        if best is None or row["iterationMS"] < best["iterationMS"]:
            fastest[row["workload_id"]] = row
    return [_pair(row, mok[row["workload_id"]], fastest[row["workload_id"]] is row) for row in dist]


def _pair(dist: dict[str, Any], mok: dict[str, Any], selected: bool) -> dict[str, Any]:
    return {
        "dist_execution_id": dist["execution_id"],
        "mok_execution_id": mok["execution_id"],
        "workload_id": dist["workload_id"],
        "pipeline": dist["pipeline"],
        "distIterationMS": dist["iterationMS"],
        "mokIterationMS": mok["iterationMS"],
        "speedup": mok["iterationMS"] / dist["iterationMS"],
        "selected": selected,
        **{f"{m}Ratio": _ratio(dist[m], mok[m]) for m in RATIO_METRICS},
    }


def _ratio(dist: float | None, mok: float | None) -> float | None:
    return None if dist is None or mok is None or mok == 0 else dist / mok
