"""Every execution's times across datasets, ordered by when each was measured, and the steps in them.

A series is one execution's one time (``iterationMS``, ``forwardMS``, ``backwardMS``) over the
datasets, oldest first (each dataset's earliest ``started_at``). Each point carries the noise that
``pipeline.compare`` gives it, not a second model: compare runs on every two neighbouring datasets,
and the point takes its side's window part (the variance of the log of a median of its windows,
dependence-corrected and moderated, with its degrees of freedom), and each series one run's
run-to-run variance, half of its stratum's run-to-run variance of a ratio averaged over the
neighbouring comparisons (those sharing a dataset are not independent: half their degrees of
freedom count; an estimate that rests on few executions says so, as in compare).

**Steps** (change points), found by circular binary segmentation (Olshen et al., 2004): in a segment of
points, every run of consecutive points [i, j) not starting at its first point is a candidate, the
rest of the segment its outside (a run to the end is one step, a run inside it a step and a step
back); its log ratio is the difference of the two means of log times, its variance the sum of each
point's window part over its side's size squared plus one run's variance x (1 / inside + 1 /
outside), its degrees of freedom Satterthwaite's; the candidate of the smallest two-sided t p-value
wins, its p multiplied by the candidates tried (Bonferroni). Over all series, the first winners'
p-values are Holm-adjusted; a series whose first winner passes is cut at its ends and each part
searched again, at 5% over the number of series. A step counts when it is significant so and
beyond the threshold (5%: x1.050 either way); each is reported over the final segments on either
side of it. **What this promises**: with no real step in any series, and each point's noise as compare's model
says, the chance that any step is reported is at most 5%. A point whose measuring conditions
differ from the series' usual ones (``pipeline.compare.conditions``: contended, another node, other
clocks) is marked and left out of the search; a step whose points next to it differ so is
``inconclusive``. The command exits 1 when a series ends on a slower step: its newest point lies
after a step found ``slower``.

**Settings.** A time measured at another scale, seed, ranks cap or cluster is another quantity, not
a step. So the datasets are taken in groups of equal comparable settings
(:mod:`pipeline.data.comparable`), each group's series built and searched on its own (noise from
neighbouring datasets of the group only), and where the settings change from one dataset to the
next the document, the page and the command line say so: every series is split there and no step
is judged across it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from pipeline.data.comparable import KEYS
from pipeline.tools.compare import conditions, family
from pipeline.tools.compare.classify import check_threshold, p_values
from pipeline.tools.compare.comparison import time_noises
from pipeline.tools.compare.conditions import Measured
from pipeline.tools.compare.noise import MIN_EXECUTIONS, Part, combined
from pipeline.tools.compare.side import METRICS, Ran, Side
from pipeline.tools.compare.special import t_isf

INCONCLUSIVE = "inconclusive"
CONFIDENCE = 0.95
# the module's own words on steps, as one line for the document
METHOD = " ".join((__doc__ or "").split("**Steps** (change points), ")[1].split("**What")[0].split())
_LOG_MAX = 700.0  # exp of more overflows
PROMISE = (
    "with no real step in any series (and each point's noise as compare's model says), "
    "P(any step reported) <= {alpha:g}%: Bonferroni over a segment's candidates, Holm over the series"
)


@dataclass(frozen=True)
class Point:
    """One dataset's value of a series."""

    dataset: int  # index in time order
    ms: float
    window: Part  # the variance of the log of its published median, from its windows (compare's)
    measured: Measured | None
    differs: str | None  # how its conditions differ from the series' usual ones (left out of steps)
    ran: Ran | None  # what ran it: code, versions, hosts, when


@dataclass(frozen=True)
class Series:
    execution_id: str
    metric: str
    kind: str
    points: tuple[Point, ...]
    run: Part | None  # one run's run-to-run variance (None: no estimate, too few times)
    few: bool  # that estimate rests on too few executions to tell a small variance from none
    settings: str = ""  # the comparable settings of its datasets (one series per settings)


def settings_of(side: Side) -> dict[str, str]:
    """A dataset's comparable settings, key -> value as text (the values of a dataset that holds
    several, ``ci|cpu``; ``unknown`` where its shards do not say)."""
    return {k: "|".join(side.described.get(k, {})) or "unknown" for k in KEYS}


def settings_groups(sides: Sequence[Side]) -> list[list[int]]:
    """The datasets (their indices, oldest first) in groups of equal comparable settings, the groups
    in the order each first appears."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for k, side in enumerate(sides):
        groups.setdefault(tuple(settings_of(side).values()), []).append(k)
    return list(groups.values())


def settings_changes(sides: Sequence[Side]) -> list[dict[str, Any]]:
    """Where the comparable settings change from one dataset to the next: ``at`` (the later one) and
    ``change`` (``scale: ci -> cpu``, each key that differs)."""
    out = []
    for k in range(1, len(sides)):
        before, after = settings_of(sides[k - 1]), settings_of(sides[k])
        changed = [f"{key}: {before[key]} -> {after[key]}" for key in KEYS if before[key] != after[key]]
        if changed:
            out.append({"at": k, "change": "; ".join(changed)})
    return out


def ordered(sides: Sequence[Side]) -> list[Side]:
    """The datasets oldest first: by their earliest recorded start (ties: as given)."""
    return sorted(sides, key=lambda s: min((r.started_at for r in s.ran.values()), default=""))


def build(sides: Sequence[Side]) -> list[Series]:
    """Every (execution, metric) that some dataset publishes, with its points in the datasets' order
    (``sides`` oldest first) and compare's noise for each."""
    windows: dict[tuple[str, str, int], Part] = {}
    between: dict[tuple[str, str], list[Part]] = {}
    few: dict[tuple[str, str], bool] = {}
    for k in range(1, len(sides)):
        before, after = sides[k - 1], sides[k]
        keys = [
            (i, m)
            for i in sorted(set(before.rows) & set(after.rows))
            for m in METRICS
            if before.rows[i][m] is not None and after.rows[i][m] is not None
        ]
        if not keys:
            continue
        for key, noise in zip(keys, time_noises(before, after, keys), strict=True):
            windows.setdefault((*key, k - 1), noise.base)
            windows[(*key, k)] = noise.new
            if noise.stratum.between is not None:
                between.setdefault(key, []).append(noise.stratum.between)
                few[key] = few.get(key, False) or noise.stratum.executions < MIN_EXECUTIONS
    out = []
    names = sorted(
        {(i, m) for s in sides for i, row in s.rows.items() for m in METRICS if row[m] is not None}
    )
    for i, m in names:
        points = [
            (k, s)
            for k, s in enumerate(sides)
            if i in s.rows and s.rows[i][m] is not None and (i, m, k) in windows
        ]
        if not points:
            continue
        typical = conditions.typical([s.conditions[i] for _, s in points if i in s.conditions])
        built = tuple(
            Point(
                k,
                s.rows[i][m],
                windows[(i, m, k)],
                s.conditions.get(i),
                _differs(typical, s.conditions.get(i)),
                s.ran.get(i),
            )
            for k, s in points
        )
        kind = next(s.rows[i]["kind"] for _, s in points)
        run = _one_run(between.get((i, m), []))
        out.append(Series(i, m, kind, built, run, few.get((i, m), False)))
    return out


def _differs(typical: Measured, measured: Measured | None) -> str | None:
    if measured is None:
        return None
    return "; ".join(conditions.differences(typical, measured, ("usual", "this run"))) or None


def _one_run(parts: list[Part]) -> Part | None:
    """One run's run-to-run variance from the neighbouring comparisons' variances of a ratio (two
    runs): half their mean; neighbouring comparisons share a dataset, so half their df count."""
    if not parts:
        return None
    var = float(np.mean([p.var for p in parts])) / 2
    df = max(1.0, sum(p.df for p in parts) / (2 if len(parts) > 1 else 1))
    scale = float(np.mean([p.scale for p in parts])) / 2
    return Part(var, df, scale)


@dataclass(frozen=True)
class Candidate:
    """The best candidate of a segment of a series' eligible points: its inside [start, end)."""

    start: int
    end: int
    log_ratio: float
    p: float  # Bonferroni over the candidates tried

    def cuts(self, length: int) -> list[int]:
        """Where the segment of ``length`` points changes level: one step, or a step and one back."""
        return [self.start] if self.end == length else [self.start, self.end]


def contrast(points: Sequence[Point], run: Part | None, start: int, end: int) -> tuple[float, float, float]:
    """(log ratio, variance, df) of points[start:end] against the others: the difference of the
    means of their log times; each point's window part over its side's size squared, and one run's
    variance x (1 / inside + 1 / outside), combined by Satterthwaite."""
    inside = list(points[start:end])
    outside = list(points[:start]) + list(points[end:])
    d = float(np.mean([math.log(p.ms) for p in inside]) - np.mean([math.log(p.ms) for p in outside]))
    parts = [
        Part(p.window.var / len(side) ** 2, p.window.df, p.window.scale / len(side) ** 2)
        for side in (outside, inside)
        for p in side
    ]
    if run is not None:
        factor = 1 / len(inside) + 1 / len(outside)
        parts.append(Part(run.var * factor, run.df, run.scale * factor))
    var, df = combined(parts)
    return d, var, df


def step_at(points: Sequence[Point], run: Part | None, j: int) -> tuple[float, float, float]:
    """The step between points[:j] and points[j:] (:func:`contrast` of the points from j on)."""
    return contrast(points, run, j, len(points))


def best(points: Sequence[Point], run: Part | None) -> Candidate | None:
    """The candidate of smallest p-value in ``points`` (None for fewer than two)."""
    n = len(points)
    if n < 2:
        return None
    spans = [(i, j) for i in range(1, n) for j in range(i + 1, n + 1)]
    tried = [contrast(points, run, i, j) for i, j in spans]
    p = p_values([d for d, _, _ in tried], [v for _, v, _ in tried], [f for _, _, f in tried])
    k = int(np.argmin(p))
    return Candidate(*spans[k], tried[k][0], min(1.0, p[k] * len(spans)))


def history(sides: Sequence[Side], threshold: float) -> dict[str, Any]:
    """The history document of datasets given oldest first: each series, its points, its steps; the
    series of each group of equal comparable settings apart (:func:`settings_groups`)."""
    check_threshold(threshold)
    series = []
    for members in settings_groups(sides):
        text = " ".join(f"{k}={v}" for k, v in settings_of(sides[members[0]]).items() if v != "unknown")
        for s in build([sides[k] for k in members]):
            points = tuple(replace(p, dataset=members[p.dataset]) for p in s.points)
            series.append(replace(s, points=points, settings=text))
    series.sort(key=lambda s: (s.execution_id, s.metric, s.points[0].dataset))
    eligible = [[p for p in s.points if p.differs is None] for s in series]
    first = [best(points, s.run) for points, s in zip(eligible, series, strict=True)]
    tested = {i: c for i, c in enumerate(first) if c is not None}
    adjusted = dict(zip(tested, family.adjusted([c.p for c in tested.values()], "holm"), strict=True))
    level = family.ALPHA / max(1, len(tested))
    entries = []
    for i, s in enumerate(series):
        found: list[tuple[int, float]] = []  # (where the later side starts, in eligible; its p adjusted)
        candidate = first[i]
        if candidate is not None and _counts(candidate, adjusted[i], family.ALPHA, threshold):
            found = _segment(eligible[i], s.run, 0, candidate, adjusted[i], level, threshold)
        entries.append(_entry(s, eligible[i], sorted(found), sides))
    open_slower = [e for e in entries if e["open_slower"]]
    return {
        "threshold": threshold,
        "alpha": family.ALPHA,
        "method": METHOD,
        "promise": PROMISE.format(alpha=100 * family.ALPHA),
        "conditions_bounds": conditions.BOUNDS_TEXT,
        "datasets": [_dataset(k, s) for k, s in enumerate(sides)],
        "settings_changes": settings_changes(sides),
        "series": entries,
        "counts": {
            "series": len(entries),
            "steps": sum(len(e["steps"]) for e in entries),
            **{
                c: sum(st["change"] == c for e in entries for st in e["steps"])
                for c in ("slower", "faster", INCONCLUSIVE)
            },
            "points_differing": sum(p["differs"] is not None for e in entries for p in e["points"]),
            "newest_differing": sum(e["newest_differs"] for e in entries),
            "open_slower": len(open_slower),
        },
        "open_slower": [f"{e['execution_id']} {e['metric']}" for e in open_slower],
    }


def _counts(candidate: Candidate, p: float, level: float, threshold: float) -> bool:
    return p <= level and abs(candidate.log_ratio) > math.log1p(threshold)


def _segment(
    points: list[Point],
    run: Part | None,
    offset: int,
    candidate: Candidate,
    p: float,
    level: float,
    threshold: float,
) -> list[tuple[int, float]]:
    """The cuts of a counted ``candidate`` of ``points`` (a segment that starts at ``offset`` of the
    series' eligible points), then those found in each part it leaves (each at ``level``)."""
    cuts = [offset + c for c in candidate.cuts(len(points))]
    found = [(c, p) for c in cuts]
    edges = [offset, *cuts, offset + len(points)]
    for start, end in zip(edges[:-1], edges[1:], strict=True):
        part = points[start - offset : end - offset]
        inner = best(part, run)
        if inner is not None and _counts(inner, inner.p, level, threshold):
            found += _segment(part, run, start, inner, inner.p, level, threshold)
    return found


def _entry(
    s: Series,
    eligible: list[Point],
    found: list[tuple[int, float]],
    sides: Sequence[Side],
) -> dict[str, Any]:
    """A series as the document gives it: its points with their intervals, and its steps, each over
    the final segments on either side of it (the p-value is the search's)."""
    points = []
    for p in s.points:
        var, df = combined([p.window] + ([s.run] if s.run is not None else []))
        half = _half_width(var, df)
        points.append(
            {
                "dataset": p.dataset,
                "ms": p.ms,
                "low": p.ms * math.exp(-half),
                "high": p.ms * math.exp(min(half, _LOG_MAX)),
                "sigma": math.sqrt(var),
                "window_sigma": math.sqrt(p.window.var),
                "differs": p.differs,
                "conditions": None if p.measured is None else p.measured.as_json(),
                "ran": None if p.ran is None else asdict(p.ran),
            }
        )
    edges = [0, *(at for at, _ in found), len(eligible)]
    steps = []
    for n, (at, p_adjusted) in enumerate(found):
        left, right = eligible[edges[n] : at], eligible[at : edges[n + 2]]
        d, var, df = step_at(left + right, s.run, len(left))
        half = _half_width(var, df)
        measured = "slower" if d > 0 else "faster"
        # runs left out between the two sides of the step: measured under other conditions
        skipped = [p for p in s.points if left[-1].dataset < p.dataset < right[0].dataset and p.differs]
        steps.append(
            {
                "at": right[0].dataset,
                "dataset": str(sides[right[0].dataset].path),
                "before_ms": _mean(left),
                "after_ms": _mean(right),
                "ratio": math.exp(d),
                "low": math.exp(d - half),
                "high": math.exp(min(d + half, _LOG_MAX)),
                "sigma": math.sqrt(var),
                "df": df,
                "p_adjusted": p_adjusted,
                "change": INCONCLUSIVE if skipped else measured,
                "measured": measured,
                "conditions": "; ".join(f"dataset {p.dataset}: {p.differs}" for p in skipped) or None,
            }
        )
    newest = len(sides) - 1
    return {
        "execution_id": s.execution_id,
        "metric": s.metric,
        "kind": s.kind,
        "settings": s.settings,
        "run_sigma": None if s.run is None else math.sqrt(s.run.var),
        "run_df": None if s.run is None else s.run.df,
        "run_few": s.few,
        "points": points,
        "steps": steps,
        # the series reaches the newest dataset on the slow side of its last step
        "open_slower": bool(steps) and steps[-1]["change"] == "slower" and s.points[-1].dataset == newest,
        "newest_differs": s.points[-1].dataset == newest and s.points[-1].differs is not None,
    }


def _mean(points: Sequence[Point]) -> float:
    """The geometric mean of the points' times (the mean of their logs, as the step compares)."""
    return math.exp(float(np.mean([math.log(p.ms) for p in points])))


def _half_width(var: float, df: float) -> float:
    """Half the CONFIDENCE interval of a log with this variance and df."""
    return float(t_isf((1 - CONFIDENCE) / 2, max(1.0, df))) * math.sqrt(var) if var > 0 else 0.0


def _dataset(k: int, side: Side) -> dict[str, Any]:
    ran = list(side.ran.values())
    return {
        "index": k,
        "dataset": str(side.path),
        "measured": [
            min((r.started_at for r in ran), default=None),
            max((r.ended_at for r in ran), default=None),
        ],
        "executions": len(side.rows),
        "settings": settings_of(side),
        "described": side.described,
        "schema_versions": sorted({r.schema_version for r in ran}),
        "skipped": [{"path": s.path, "reason": s.reason} for s in side.skipped],
    }
