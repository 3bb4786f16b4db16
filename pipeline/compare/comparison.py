"""Compare two datasets: time ratios per execution, speedup ratios per pair, selection flips.

Only executions present in both datasets are compared, and pairs and selections are rebuilt from
those alone (``pipeline.report.pairs``), so an execution missing on one side cannot flip a selection.
The result is a plain JSON-ready document, like the aggregate's.
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.compare.classify import (
    SPEEDUP_CLASSES,
    TIME_CLASSES,
    bound,
    check_threshold,
    direction,
    run_to_run_sigma,
    speedup_change,
    time_change,
)
from pipeline.compare.side import METRICS, Side
from pipeline.compare.statistics import CONFIDENCE, Interval, ratio_interval, ratio_of_ratios_interval
from pipeline.report import pairs
from pipeline.report.provenance import SETTINGS

METHOD = (
    "ratio of the published slowest-rank medians; interval: Hodges-Lehmann / Mann-Whitney on the log "
    "window times of each dataset's slowest rank (speedups: MoK's and Dist-MoE's intervals combined "
    "by the union bound); a change is significant and beyond the bound: 1 + threshold or the "
    "run-to-run scatter of all time ratios (1.4826 MAD) x the Bonferroni normal quantile, if larger"
)


def compare(base: Side, new: Side, threshold: float, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The comparison document of NEW against BASE; ``ValueError`` if they share no execution."""
    check_threshold(threshold)
    common = sorted(set(base.rows) & set(new.rows))
    if not common:
        raise ValueError(
            f"no common executions: {str(base.path)!r} has {len(base.rows)}, {str(new.path)!r} has "
            f"{len(new.rows)}, none in both"
        )
    candidates = (_time(base, new, i, metric, confidence) for i in common for metric in METRICS)
    times = [t for t in candidates if t is not None]
    base_pairs = pairs.pair_rows([base.rows[i] for i in common])
    new_pairs = {p["dist_execution_id"]: p for p in pairs.pair_rows([new.rows[i] for i in common])}
    speedups = [_speedup(base, new, p, new_pairs[p["dist_execution_id"]], confidence) for p in base_pairs]
    selections = _selections(new, base_pairs, list(new_pairs.values()), confidence)
    sigma = run_to_run_sigma([math.log(t["ratio"]) for t in times])
    bounds = {
        "times": bound(threshold, sigma, len(times)),
        "speedups": bound(threshold, sigma, len(speedups), math.sqrt(2)),
        "selections": bound(threshold, sigma, sum(s["flipped"] for s in selections)),
    }
    for t in times:
        t["change"] = time_change(t["ratio"], _interval(t), bounds["times"])
    for s in speedups:
        s["change"] = speedup_change(s["ratio"], _interval(s), bounds["speedups"])
    for s in selections:
        if s["flipped"]:
            s["significant"] = direction(s["ratio"], _interval(s), bounds["selections"]) == -1
    return {
        "threshold": threshold,
        "confidence": confidence,
        "method": METHOD,
        "run_to_run_sigma": sigma,
        "bounds": bounds,
        "base": _side(base),
        "new": _side(new),
        "settings_differ": [
            {"setting": s, "base": sorted(base.described[s]), "new": sorted(new.described[s])}
            for s in SETTINGS
            if base.described[s].keys() != new.described[s].keys()
        ],
        "only_in_base": sorted(set(base.rows) - set(new.rows)),
        "only_in_new": sorted(set(new.rows) - set(base.rows)),
        "times": times,
        "speedups": speedups,
        "selections": selections,
        "counts": {
            **{c: sum(t["change"] == c for t in times) for c in TIME_CLASSES},
            **{f"speedup_{c}": sum(s["change"] == c for s in speedups) for c in SPEEDUP_CLASSES},
            "selections": len(selections),
            "selections_flipped": sum(s["flipped"] for s in selections),
        },
    }


def any_slower(document: dict[str, Any]) -> bool:
    """Whether any time got significantly slower beyond the threshold (the exit status of the CLI)."""
    return document["counts"]["slower"] > 0


def _side(dataset: Side) -> dict[str, Any]:
    return {
        "dataset": str(dataset.path),
        "executions": len(dataset.rows),
        "described": dataset.described,
        "skipped": [{"path": s.path, "reason": s.reason} for s in dataset.skipped],
    }


def _time(base: Side, new: Side, execution_id: str, metric: str, confidence: float) -> dict[str, Any] | None:
    """One execution's metric in both datasets, or ``None`` where either lacks it (no backward)."""
    before, after = base.rows[execution_id][metric], new.rows[execution_id][metric]
    if before is None or after is None:
        return None
    ratio = after / before
    interval = ratio_interval(
        base.samples[execution_id][metric], new.samples[execution_id][metric], confidence
    )
    return {
        "execution_id": execution_id,
        "workload_id": base.rows[execution_id]["workload_id"],
        "metric": metric,
        "base": before,
        "new": after,
        **_ratio(ratio, interval),
    }


def _speedup(
    base: Side,
    new: Side,
    before: dict[str, Any],
    after: dict[str, Any],
    confidence: float,
) -> dict[str, Any]:
    """A pair's speedup (MoK / Dist-MoE) in both datasets: its ratio is MoK's time ratio over
    Dist-MoE's, so its interval combines theirs."""
    mok, dist = before["mok_execution_id"], before["dist_execution_id"]
    ratio = after["speedup"] / before["speedup"]
    interval = ratio_of_ratios_interval(
        (base.samples[mok]["iterationMS"], new.samples[mok]["iterationMS"]),
        (base.samples[dist]["iterationMS"], new.samples[dist]["iterationMS"]),
        confidence,
    )
    return {
        "dist_execution_id": dist,
        "mok_execution_id": mok,
        "workload_id": before["workload_id"],
        "pipeline": before["pipeline"],
        "base": before["speedup"],
        "new": after["speedup"],
        **_ratio(ratio, interval),
    }


def _selections(
    new: Side, base_pairs: list[dict[str, Any]], new_pairs: list[dict[str, Any]], confidence: float
) -> list[dict[str, Any]]:
    """Per matched workload with more than one Dist-MoE pipeline, the selected one in each dataset.
    A flip carries NEW's time ratio of the newly to the formerly selected pipeline and its interval:
    ``significant`` (set by the caller) says whether NEW's order of the two is beyond noise."""
    chosen = {
        side: {p["workload_id"]: p for p in ps if p["selected"]}
        for side, ps in (("base", base_pairs), ("new", new_pairs))
    }
    candidates: dict[str, int] = {}
    for pair in base_pairs:
        candidates[pair["workload_id"]] = candidates.get(pair["workload_id"], 0) + 1
    out = []
    for workload_id in sorted(w for w, n in candidates.items() if n > 1):
        before, after = chosen["base"][workload_id], chosen["new"][workload_id]
        entry: dict[str, Any] = {
            "workload_id": workload_id,
            "base": before["pipeline"],
            "new": after["pipeline"],
            "flipped": before["pipeline"] != after["pipeline"],
        }
        if entry["flipped"]:
            was, now = before["dist_execution_id"], after["dist_execution_id"]
            ratio = new.rows[now]["iterationMS"] / new.rows[was]["iterationMS"]
            interval = ratio_interval(
                new.samples[was]["iterationMS"], new.samples[now]["iterationMS"], confidence
            )
            entry |= _ratio(ratio, interval)
        out.append(entry)
    return out


def _ratio(ratio: float, interval: Interval | None) -> dict[str, Any]:
    """Ratio and interval ends (``None``: too few windows for an interval at this confidence)."""
    low, high = interval if interval is not None else (None, None)
    return {"ratio": ratio, "low": low, "high": high}


def _interval(entry: dict[str, Any]) -> Interval | None:
    return None if entry["low"] is None else (entry["low"], entry["high"])
