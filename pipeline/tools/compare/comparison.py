"""Compare two datasets: time ratios per execution, speedup ratios per pair, selection flips.

Only executions present in both datasets are compared, and pairs and selections are rebuilt from
those alone (``pipeline.report.pairs``), so an execution missing on one side cannot flip a selection.
Every ratio gets its own noise (``noise.py``), a p-value adjusted within its family (all times, all
speedups, all flips: ``family.py``) and a class (``classify.py``). A time whose two sides were
measured under conditions that differ beyond their bounds (``conditions.py``: CPU contention,
nodes, GPU clocks, throttling, a shared GPU) is ``inconclusive``, whatever its statistics say (kept
as ``measured``), with the reason: such a ratio measures the conditions as much as the code. The
result is a plain JSON-ready document, like the aggregate's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from pipeline.base.intervals import CONFIDENCE, Interval, ratio_interval, ratio_of_ratios_interval
from pipeline.data.comparable import text
from pipeline.report import pairs
from pipeline.report.provenance import SETTINGS
from pipeline.tools.compare import conditions, family
from pipeline.tools.compare.classify import (
    SPEEDUP_CLASSES,
    TIME_CLASSES,
    bounds,
    check_threshold,
    direction,
    noise_intervals,
    p_values,
    speedup_change,
    time_change,
)
from pipeline.tools.compare.noise import (
    MIN_EXECUTIONS,
    MIN_RATIOS,
    Noise,
    Part,
    Stratum,
    combined,
    ratio_noise,
    windows,
)
from pipeline.tools.compare.side import METRICS, Side

METHOD = (
    "ratio of the published slowest-rank medians; noise per ratio: its windows (median variance "
    "from the mean absolute deviation, corrected for the windows' pooled lag-1 dependence (each "
    "stratum's moderated towards its side's other strata), "
    "moderated within the stratum) plus the run-to-run variance of its stratum (kind x metric), "
    "with Satterthwaite degrees of freedom; a change is beyond 1 + threshold, significant in a t "
    "test after the family's multiplicity control, and significant in the exact Mann-Whitney / "
    "Hodges-Lehmann interval of the windows"
)
INCONCLUSIVE = "inconclusive"  # a time or speedup whose sides' measuring conditions differ
REFERENCE, CANDIDATE = pairs.REFERENCE_ID, pairs.CANDIDATE_ID
HISTORY_METHOD = (
    "; with a history, each time's run-to-run part is its own: the variance of its log over BASE and "
    "the history (moderated within the stratum) on each side whose windows say less"
)


def compare(
    base: Side,
    new: Side,
    threshold: float,
    confidence: float = CONFIDENCE,
    multiplicity: str = "holm",
    history: Sequence[Side] = (),
) -> dict[str, Any]:
    """The comparison document of NEW against BASE; ``ValueError`` if they share no execution.
    ``history``: earlier datasets of the same sweep, whose times with BASE's give each time its own
    run-to-run variance (``noise.py``); NEW is never one of them."""
    check_threshold(threshold)
    family.check_method(multiplicity)
    common = sorted(set(base.rows) & set(new.rows))
    if not common:
        raise ValueError(
            f"no common executions: {str(base.path)!r} has {len(base.rows)}, {str(new.path)!r} has "
            f"{len(new.rows)}, none in both"
        )
    keys = [
        (i, m) for i in common for m in METRICS if base.rows[i][m] is not None and new.rows[i][m] is not None
    ]
    noises = dict(zip(keys, time_noises(base, new, keys, history), strict=True))
    differ = {i: _differences(base, new, i) for i in common}
    times = [_time(base, new, i, m, noises[i, m], confidence) for i, m in keys]
    _judge(times, threshold, multiplicity, confidence, time_change)
    _inconclusive(times, lambda t: differ[t["execution_id"]])
    base_pairs = pairs.pair_rows([base.rows[i] for i in common])
    new_pairs = {p[pairs.CANDIDATE_ID]: p for p in pairs.pair_rows([new.rows[i] for i in common])}
    speedups = [
        _speedup(base, new, p, new_pairs[p[pairs.CANDIDATE_ID]], noises, confidence) for p in base_pairs
    ]
    _judge(speedups, threshold, multiplicity, confidence, speedup_change)
    _inconclusive(speedups, lambda s: [f"{i}: {w}" for i in (s[REFERENCE], s[CANDIDATE]) for w in differ[i]])
    selections = _selections(new, base_pairs, list(new_pairs.values()), noises, confidence)
    flips = [s for s in selections if s["flipped"]]
    _judge(flips, threshold, multiplicity, confidence, lambda *a: direction(*a) == -1, "significant")
    strata = {n.stratum.name: n.stratum for n in noises.values()}
    return {
        "threshold": threshold,
        "confidence": confidence,
        "method": METHOD + (HISTORY_METHOD if history else ""),
        "multiplicity": {
            "method": multiplicity,
            "alpha": family.ALPHA,
            "times": family.promise(multiplicity, "time"),
            "speedups": family.promise(multiplicity, "speedup"),
        },
        "noise": [_stratum_entry(strata[name]) for name in sorted(strata)],
        "conditions": _conditions(base, new, common, differ),
        "bounds": {"times": _bounds_summary(times), "speedups": _bounds_summary(speedups)},
        "base": _side(base),
        "new": _side(new),
        "history": [_side(h) for h in history],
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
            **{c: sum(t["change"] == c for t in times) for c in (*TIME_CLASSES, INCONCLUSIVE)},
            **{
                f"speedup_{c}": sum(s["change"] == c for s in speedups)
                for c in (*SPEEDUP_CLASSES, INCONCLUSIVE)
            },
            "selections": len(selections),
            "selections_flipped": len(flips),
        },
    }


def any_slower(document: dict[str, Any]) -> bool:
    """Whether any time got significantly slower beyond the threshold (the exit status of the CLI)."""
    return document["counts"]["slower"] > 0


def any_inconclusive(document: dict[str, Any]) -> bool:
    """Whether any time's sides were measured under differing conditions (exit 1 with ``--strict``)."""
    return document["counts"][INCONCLUSIVE] > 0


def time_noises(
    base: Side, new: Side, keys: list[tuple[str, str]], history: Sequence[Side] = ()
) -> list[Noise]:
    """The noise of every time ratio (execution, metric) of NEW against BASE: strata kind x metric,
    then metric, then all times (each stratum knowing how many executions it rests on); with a history,
    each time's log in BASE and in every history dataset that publishes it."""
    runs = None
    if history:
        runs = [
            [math.log(s.rows[i][m]) for s in (base, *history) if s.rows.get(i, {}).get(m) is not None]
            for i, m in keys
        ]
    return ratio_noise(
        [math.log(new.rows[i][m] / base.rows[i][m]) for i, m in keys],
        windows([base.windows[i][m] for i, m in keys]),
        windows([new.windows[i][m] for i, m in keys]),
        [(f"{base.rows[i]['kind']} {m}", m, "all") for i, m in keys],
        runs,
        [i for i, _ in keys],
    )


def bounds_text(document: dict[str, Any]) -> str:
    """What a time must exceed to count, and why: the threshold or its own noise, under which
    multiplicity control, with what promise."""
    noise = document["noise"]
    between = [s["between_sigma"] for s in noise if s["between_sigma"] is not None]
    names = ", ".join(s["stratum"] for s in noise)
    strata = f"{len(noise)} {'stratum' if len(noise) == 1 else 'strata'}: {names}"
    own = [t["run_sigma"] for t in document["times"] if t["run_sigma"] is not None]
    few = [s for s in noise if s["few"]]
    if not between:
        scatter = (
            f"no run-to-run estimate (fewer than {MIN_RATIOS} times): changes rest on their windows "
            "alone, and what the machine did between the runs is not counted"
        )
    elif min(between) == max(between):
        scatter = f"run-to-run sigma {between[0]:.3f} ({strata})"
    else:
        scatter = f"run-to-run sigma {min(between):.3f} to {max(between):.3f} ({strata})"
    if few:
        executions = sorted({s["executions"] for s in few})
        upper = [s["between_upper"] for s in few]
        scatter += (
            f"; {'it rests' if len(few) == len(noise) else f'{len(few)} of them rest'} on "
            f"{' / '.join(map(str, executions))} executions, too few (under {MIN_EXECUTIONS}) to tell a "
            f"small run-to-run sigma from none: it may be as large as {min(upper):.3f}"
            + (f" to {max(upper):.3f}" if max(upper) > min(upper) else "")
            + " (one standard error above it), which each time's degrees of freedom count"
        )
    scatter = f"its windows + {scatter}"
    if document["history"]:
        rest = len(document["times"]) - len(own)
        scatter = (
            f"each run's own sigma over BASE and {len(document['history'])} history datasets "
            f"{min(own, default=0.0):.3f} to {max(own, default=0.0):.3f} for {len(own)} times, "
            "where above its windows'" + (f"; for {rest} without a history: {scatter}" if rest else "")
        )
    b = document["bounds"]["times"]
    if b["low"] is None:
        counts = "no time has windows enough for a test"
    else:
        counts = (
            f"a change counts beyond x{_factor(b['low'])} to x{_factor(b['high'])} (set by the threshold for "
            f"{b['threshold']} times, by their noise for {b['noise']})"
        )
    return (
        f"threshold {100 * document['threshold']:g}%; noise of each time: {scatter}; "
        f"{document['multiplicity']['times']}: {counts}"
    )


def conditions_text(document: dict[str, Any]) -> str:
    """How many executions were measured under conditions that differ, by what bounds, and how many
    could not be checked."""
    c = document["conditions"]
    total = len(c["executions"])
    unknown = c["unknown"]
    line = (
        f"measuring conditions: {c['differ']} of {total} executions differ beyond the bounds ({c['bounds']})"
    )
    if unknown["base"] or unknown["new"]:
        line += (
            f"; not recorded for {unknown['base']} in BASE, {unknown['new']} in NEW (unknown: never counted "
            "as differing)"
        )
    return line


def _factor(ratio: float) -> str:
    """A bound as the line prints it: three decimals, or three digits where that would be a long line."""
    return f"{ratio:.3f}" if ratio < 1e6 else f"{ratio:.3g}"


def _judge(
    entries: list[dict[str, Any]],
    threshold: float,
    multiplicity: str,
    confidence: float,
    classify: Callable[[float, float | None, Interval | None, float], Any],
    key: str = "change",
) -> None:
    """Test a family at once: each entry's noise interval, p-value, adjusted p-value and bound, then
    its class (``classify(ratio, p_adjusted, window interval, threshold)`` into ``entry[key]``).
    An entry without a window interval (too few windows) is not tested."""
    tested = [e for e in entries if e["window_low"] is not None]
    logs = [math.log(e["ratio"]) for e in tested]
    var, df = [e["sigma"] ** 2 for e in tested], [e["df"] for e in tested]
    p = p_values(logs, var, df)
    for e, (low, high), raw, adjusted, (least, by) in zip(
        tested,
        noise_intervals(logs, var, df, confidence),
        p,
        family.adjusted(p, multiplicity),
        bounds(threshold, var, df, len(tested)),
        strict=True,
    ):
        e |= {"low": low, "high": high, "p": raw, "p_adjusted": adjusted, "bound": least, "bound_by": by}
    for e in entries:
        window = None if e["window_low"] is None else (e["window_low"], e["window_high"])
        e[key] = classify(e["ratio"], e["p_adjusted"], window, threshold)


def _tested(ratio: float, noise_var: float, df: float, window: Interval | None) -> dict[str, Any]:
    """A ratio's fields before its family is tested (``_judge`` fills the tests in)."""
    w_low, w_high = window if window is not None else (None, None)
    return {
        "ratio": ratio,
        "low": None,
        "high": None,
        "window_low": w_low,
        "window_high": w_high,
        "sigma": math.sqrt(noise_var),
        "df": df,
        "p": None,
        "p_adjusted": None,
        "bound": None,
        "bound_by": None,
    }


def _time(base: Side, new: Side, execution_id: str, metric: str, noise: Noise, confidence: float) -> dict:
    """One execution's metric in both datasets with its noise and tests."""
    before, after = base.rows[execution_id][metric], new.rows[execution_id][metric]
    window = ratio_interval(base.windows[execution_id][metric], new.windows[execution_id][metric], confidence)
    clocks = _clock_ratio(base, new, execution_id)
    return {
        "execution_id": execution_id,
        "workload_id": base.rows[execution_id]["workload_id"],
        "metric": metric,
        "base": before,
        "new": after,
        **_tested(after / before, noise.var, noise.df, window),
        "within_sigma": noise.within_sigma,
        # None: no run-to-run estimate at all (too few times), which is not zero noise
        "between_sigma": (
            None if noise.stratum.between is None and noise.runs is None else noise.between_sigma
        ),
        # where the stratum's estimate rests on too few executions: how large it may be
        "between_upper": noise.stratum.upper if noise.stratum.few and noise.runs is None else None,
        "run_sigma": None if noise.runs is None else math.sqrt(noise.runs.var),
        "stratum": noise.stratum.name,
        "clock_ratio": clocks,
        "normalized_ratio": None if clocks is None else after / before * clocks,
    }


def _speedup(
    base: Side,
    new: Side,
    before: dict[str, Any],
    after: dict[str, Any],
    noises: dict[tuple[str, str], Noise],
    confidence: float,
) -> dict[str, Any]:
    """A pair's speedup (reference / candidate time: MoK / Dist-MoE) in both datasets: its ratio is
    the reference's time ratio over the candidate's, so its noise is the sum of theirs (independent
    executions)."""
    ref, cand = before[pairs.REFERENCE_ID], before[pairs.CANDIDATE_ID]
    window = ratio_of_ratios_interval(
        (base.windows[ref]["iterationMS"], new.windows[ref]["iterationMS"]),
        (base.windows[cand]["iterationMS"], new.windows[cand]["iterationMS"]),
        confidence,
    )
    var, df = _sum(noises[ref, "iterationMS"], noises[cand, "iterationMS"])
    return {
        pairs.CANDIDATE_ID: cand,
        pairs.REFERENCE_ID: ref,
        "workload_id": before["workload_id"],
        "pipeline": before["pipeline"],
        "base": before["speedup"],
        "new": after["speedup"],
        **_tested(after["speedup"] / before["speedup"], var, df, window),
    }


def _sum(first: Noise, second: Noise, sides: str = "both") -> tuple[float, float]:
    """Variance and df of the difference of two executions' log times: the parts of each (two
    stratum run-to-run parts of one stratum are one estimate, so their errors add). ``sides="new"``
    keeps only NEW's parts (its windows, or with a history one run's variance): two executions of
    one dataset."""
    parts = first.parts(sides) + second.parts(sides)
    a, b = first.between, second.between
    if a is not None and b is not None and first.stratum is second.stratum:
        parts = [p for p in parts if p is not a and p is not b]
        parts.append(Part(a.var + b.var, a.df, a.scale + b.scale))
    return combined(parts)


def _selections(
    new: Side,
    base_pairs: list[dict[str, Any]],
    new_pairs: list[dict[str, Any]],
    noises: dict[tuple[str, str], Noise],
    confidence: float,
) -> list[dict[str, Any]]:
    """Per matched workload with more than one candidate (Dist-MoE) pipeline, the selected one in each
    dataset. A flip carries NEW's time ratio of the newly to the formerly selected pipeline, its noise
    (NEW's windows of both and two executions' run-to-run scatter) and window interval:
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
            was, now = before[pairs.CANDIDATE_ID], after[pairs.CANDIDATE_ID]
            ratio = new.rows[now]["iterationMS"] / new.rows[was]["iterationMS"]
            window = ratio_interval(
                new.windows[was]["iterationMS"], new.windows[now]["iterationMS"], confidence
            )
            var, df = _sum(noises[now, "iterationMS"], noises[was, "iterationMS"], sides="new")
            entry |= _tested(ratio, var, df, window)
        out.append(entry)
    return out


def _stratum_entry(stratum: Stratum) -> dict[str, Any]:
    between = stratum.between
    return {
        "stratum": stratum.name,
        "ratios": stratum.ratios,
        "between_sigma": None if between is None else math.sqrt(between.var),
        "between_df": None if between is None else between.df,
        "dependence": list(stratum.dependence),
        "window_prior_df": list(stratum.moderation),
        "run_prior": None if stratum.runs is None else {"sigma": stratum.runs[0], "df": stratum.runs[1]},
        "executions": stratum.executions,
        "few": stratum.few,
        "between_upper": stratum.upper,
    }


def _bounds_summary(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How far the bounds of a family range and how many of them each term set."""
    values = [e["bound"] for e in entries if e["bound"] is not None]
    return {
        "low": min(values, default=None),
        "median": statistics.median(values) if values else None,
        "high": max(values, default=None),
        "threshold": sum(e["bound_by"] == "threshold" for e in entries),
        "noise": sum(e["bound_by"] == "noise" for e in entries),
        "untested": sum(e["bound"] is None for e in entries),
    }


def _side(dataset: Side) -> dict[str, Any]:
    return {
        "dataset": str(dataset.path),
        "executions": len(dataset.rows),
        "described": dataset.described,
        "skipped": [{"path": s.path, "reason": s.reason} for s in dataset.skipped],
    }


def _differences(base: Side, new: Side, execution_id: str) -> list[str]:
    """How the two sides' comparable settings of an execution differ (another scale, seed, ranks cap
    or cluster: another quantity, never a change), then how their measuring conditions differ beyond
    their bounds (none where either side lacks them)."""
    out = []
    settings = base.comparable.get(execution_id), new.comparable.get(execution_id)
    if settings[0] is not None and settings[1] is not None:
        keys = settings[1].differing(settings[0])
        if keys:
            shown = ", ".join(
                f"{k} {text(settings[0].value(k))} -> {text(settings[1].value(k))}" for k in keys
            )
            out.append(f"settings differ ({shown})")
    before, after = base.conditions.get(execution_id), new.conditions.get(execution_id)
    return out if before is None or after is None else [*out, *conditions.differences(before, after)]


def _clock_ratio(base: Side, new: Side, execution_id: str) -> float | None:
    before, after = base.conditions.get(execution_id), new.conditions.get(execution_id)
    return None if before is None or after is None else conditions.clock_ratio(before, after)


def _inconclusive(entries: list[dict[str, Any]], reasons: Callable[[dict[str, Any]], list[str]]) -> None:
    """Keep each entry's class as ``measured``; where its sides' conditions differ, its class becomes
    ``inconclusive`` and ``conditions`` says why (None where they agree)."""
    for e in entries:
        why = reasons(e)
        e["measured"] = e["change"]
        e["conditions"] = "; ".join(dict.fromkeys(why)) or None
        if why:
            e["change"] = INCONCLUSIVE


def _conditions(base: Side, new: Side, common: list[str], differ: dict[str, list[str]]) -> dict[str, Any]:
    """Each common execution's measuring conditions on both sides, the bounds, and what is unknown."""
    executions = {
        i: {
            "base": base.conditions[i].as_json() if i in base.conditions else None,
            "new": new.conditions[i].as_json() if i in new.conditions else None,
            "differ": differ[i],
        }
        for i in common
    }
    return {
        "bounds": conditions.BOUNDS_TEXT,
        "differ": sum(bool(d) for d in differ.values()),
        "unknown": {
            side: sum(i not in s.conditions or not s.conditions[i].known for i in common)
            for side, s in (("base", base), ("new", new))
        },
        "executions": executions,
    }
