"""The noise of each time ratio: what its own windows say, plus the run-to-run scatter of its stratum.

A ratio compares two published medians, each over one execution's windows (the slowest rank's).
Its log has two sources of noise, estimated separately and added:

- **within an execution**, from each side's windows: the variance of the log of a median of n
  windows, v(n) x s^2, with s the windows' normal-consistent mean absolute deviation from their
  median (robust to a slow window, and less noisy than the MAD at five windows). Windows come in
  slow and fast stretches, so the windows of a stratum and side give one pooled lag-1
  autocorrelation (von Neumann's ratio against its exact expectation under AR(1) at each n),
  moderated towards the other strata's of the same side (random effects: a few dozen series of five
  windows pin rho to only +-0.15), which inflates v(n) x s^2 for the median (the sign correlations
  of an AR(1)) and for what dependence hides from s. A side's few windows give a noisy variance,
  so each is moderated towards the stratum's (empirical Bayes on the log variances, as limma does
  for genes), with degrees of freedom measured from how much BASE's and NEW's estimates of the same
  time disagree;
- **between runs**, from the stratum: two runs of a sweep differ by what else the machine did
  while each execution ran, which moves all its windows together and which no window sees. Its
  variance is the one that makes the stratum's log ratios, each divided by its own total, look like
  draws of unit variance: first at their median (robust to real changes), then at the mean of those
  within three sigma (efficient).

With a history (earlier datasets of the same sweep beside BASE), each ratio's run-to-run noise is
its own instead: the sample variance of its time's log over BASE and the history, moderated
towards its stratum's like the window variances, is the variance of one run's time; each side
counts that, or its own window part where that is larger. One stratum's variance cannot tell an
execution that moves 24% between runs from one that moves 7%; its own history can.

Strata are kind x metric (executions that share noise); one with fewer than ``MIN_STRATUM`` ratios
uses its metric's, then the whole comparison's. Each estimate carries degrees of freedom, and a
ratio's total is tested against Student's t with the Satterthwaite combination of them, so a ratio
judged on few windows or a small stratum needs a larger change. A run-to-run estimate that rests on
fewer than ``MIN_EXECUTIONS`` executions cannot tell a small variance from none: it is reported as
such, with how large it may be (one standard error above it), and never as zero noise.

Root finding is scipy's (``brentq``); what is written here has no library form: the median's
variance under AR(1) dependence, the moderation of variances (limma's empirical Bayes) and of the
dependence (DerSimonian and Laird), and the robust run-to-run estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, stats

from pipeline.tools.compare.special import MAX_DF, digamma, inverse_trigamma, trigamma

MIN_STRATUM = 12  # ratios for a stratum of its own; fewer use the next coarser one
MIN_RATIOS = 8  # fewer ratios in the whole comparison: no run-to-run estimate at all
# Fewer executions behind a run-to-run estimate: its relative error, sqrt(2 / (0.7 (n - 1))), is
# above 40%, too much to tell a small variance from none (reported so, with one standard error above it).
MIN_EXECUTIONS = 20
MAX_DEPENDENCE = 0.95
_KEEP = 9.0  # three sigma
_MEDIAN_CHI2_1 = float(stats.chi2.median(1))
# mean of chi-square with 1 df below 9: x f_1(x) = f_3(x), so E[X; X < 9] = P(chi2_3 < 9)
_TRUNCATED_MEAN = float(stats.chi2.cdf(_KEEP, 3) / stats.chi2.cdf(_KEEP, 1))
# Degrees of freedom per ratio of the three-sigma mean: below the 0.95 it has for normal data with known
# weights, because each weight carries an estimated window part (at 0.9, simulated reruns in GPU-like
# noise flagged something 3 - 4% of the time at a nominal 2.5%; benchmarks/compare_error_rates.py).
_BETWEEN_EFFICIENCY = 0.7


@dataclass(frozen=True)
class Windows:
    """One side of one time: the log of its per-iteration window times, summarised."""

    median: float
    scale: float  # normal-consistent mean absolute deviation from the median, in log units
    n: int
    successive: float  # sum of squared successive differences of the windows (clipped at 3 scales)
    spread: float  # sum of squared deviations of the (clipped) windows from their mean


def windows(samples: Sequence[np.ndarray]) -> list[Windows]:
    """Summarise each sample of positive window times (per iteration, in the order they were
    timed); samples of one length are summarised together."""
    out: list[Windows | None] = [None] * len(samples)
    by_length: dict[int, list[int]] = {}
    for i, sample in enumerate(samples):
        by_length.setdefault(len(sample), []).append(i)
    for n, idx in by_length.items():
        x = np.log(np.array([samples[i] for i in idx], np.float64).reshape(len(idx), n))
        median = np.median(x, axis=1) if n else np.zeros(len(idx))
        if n < 2:
            for i, mid in zip(idx, median.tolist(), strict=True):
                out[i] = Windows(mid, 0.0, n, 0.0, 0.0)
            continue
        deviation = x - median[:, None]
        scale = math.sqrt(math.pi / 2 * n / (n - 1)) * np.mean(np.abs(deviation), axis=1)
        z = np.clip(deviation, -3 * scale[:, None], 3 * scale[:, None])
        successive = np.sum(np.diff(z, axis=1) ** 2, axis=1)
        spread = np.sum((z - z.mean(axis=1, keepdims=True)) ** 2, axis=1)
        for i, mid, sc, su, sp in zip(
            idx, median.tolist(), scale.tolist(), successive.tolist(), spread.tolist(), strict=True
        ):
            out[i] = Windows(mid, sc, n, su, sp)
    return [w for w in out if w is not None]


@dataclass(frozen=True)
class Part:
    """One variance component of a log ratio and its uncertainty, as a chi-square's degrees of
    freedom on ``scale``: Var(estimate) = 2 scale^2 / df (``scale`` is the estimate itself for a
    window part; for the run-to-run part see ``Noise.between``)."""

    var: float
    df: float
    scale: float


def combined(parts: Sequence[Part]) -> tuple[float, float]:
    """(variance, Satterthwaite degrees of freedom) of a sum of independent components."""
    var = sum(p.var for p in parts)
    uncertainty = sum(p.scale**2 / p.df for p in parts if p.scale > 0)
    return var, (min(MAX_DF, max(1.0, var**2 / uncertainty)) if uncertainty > 0 else MAX_DF)


@dataclass(frozen=True)
class Stratum:
    """What a stratum's ratios share: their run-to-run component and the windows' dependence."""

    name: str
    ratios: int
    # tau^2 as counted, its df, and the scale of its error (the harmonic mean of the stratum's totals);
    # None: too few ratios in the comparison for a run-to-run estimate
    between: Part | None
    dependence: tuple[float, float]  # pooled lag-1 autocorrelation of the windows, BASE and NEW
    moderation: tuple[float, float]  # prior degrees of freedom of the window variances, BASE and NEW
    # with a history: the prior of the per-run variances (its sigma, its df); None without one
    runs: tuple[float, float] | None = None
    executions: int = 0  # distinct executions behind the run-to-run estimate

    @property
    def few(self) -> bool:
        """Whether the run-to-run estimate rests on too few executions to be told from zero."""
        return self.between is not None and self.executions < MIN_EXECUTIONS

    @property
    def upper(self) -> float | None:
        """The run-to-run sigma one standard error of its variance above the estimate,
        sqrt(tau^2 + sqrt(2 / df) x H): how large it may be (None without an estimate)."""
        if self.between is None:
            return None
        return math.sqrt(self.between.var + math.sqrt(2 / self.between.df) * self.between.scale)


@dataclass(frozen=True)
class Noise:
    """The noise of one log ratio: each side's window part and the stratum's run-to-run part, or,
    with a history, the variance of one run of this time (``runs``) on each side whose windows say
    less."""

    base: Part
    new: Part
    stratum: Stratum
    runs: Part | None = None
    between: Part | None = field(init=False)
    var: float = field(init=False)
    df: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "between", self._between())
        var, df = combined(self.parts())
        object.__setattr__(self, "var", var)
        object.__setattr__(self, "df", df)

    def _between(self) -> Part | None:
        """The stratum's run-to-run part, its error counted on at most this time's own total (none
        with a history of this time).

        The estimate of tau^2 is off by about sqrt(2 / df) x the harmonic mean H of the stratum's
        totals, at tau^2 = 0 too (an estimate at the boundary is not exact). For a time quieter than
        H, Satterthwaite would turn that into a t with 1 or 2 df, whose tails its total, which never
        falls below its own window part, does not have; so the error is taken relative to
        min(H, window part + tau^2)."""
        stratum = self.stratum.between
        if stratum is None or self.runs is not None:
            return None
        own = self.base.var + self.new.var + stratum.var
        return Part(stratum.var, stratum.df, min(stratum.scale, own))

    def parts(self, sides: str = "both") -> list[Part]:
        """The components of this ratio's variance (``sides="new"``: of NEW's log time alone, one run).
        With a history, one estimate serves every side that counts it, so those add into one part."""
        windows = [self.new] if sides == "new" else [self.base, self.new]
        if self.runs is None:
            return windows + ([self.between] if self.between is not None else [])
        own = [w for w in windows if w.var > self.runs.var]
        k = len(windows) - len(own)
        return own + ([Part(k * self.runs.var, self.runs.df, k * self.runs.scale)] if k else [])

    @property
    def sigma(self) -> float:
        return math.sqrt(self.var)

    @property
    def within_sigma(self) -> float:
        return math.sqrt(self.base.var + self.new.var)

    @property
    def between_sigma(self) -> float:
        """The run-to-run part of sigma: the stratum's, or what the history adds to the windows."""
        if self.runs is not None:
            return math.sqrt(max(0.0, self.var - self.base.var - self.new.var))
        between = self.stratum.between
        return 0.0 if between is None else math.sqrt(between.var)


def ratio_noise(
    log_ratios: Sequence[float],
    base: Sequence[Windows],
    new: Sequence[Windows],
    strata: Sequence[tuple[str, ...]],
    runs: Sequence[Sequence[float]] | None = None,
    executions: Sequence[str] | None = None,
) -> list[Noise]:
    """The noise of every log ratio of one comparison. ``strata`` names each ratio's strata from the
    finest (kind x metric) to the coarsest; the finest with ``MIN_STRATUM`` ratios is used. ``runs``
    (a history): per ratio, the log of its time in BASE and in every earlier dataset that has it;
    a ratio with fewer than two has no history and counts its stratum's run-to-run part.
    ``executions``: per ratio, its execution (how many distinct executions a run-to-run estimate
    rests on); default: each its own."""
    if not len(log_ratios) == len(base) == len(new) == len(strata):
        raise ValueError("one log ratio, two window summaries and a strata tuple per ratio are required")
    if runs is not None and len(runs) != len(log_ratios):
        raise ValueError("the history needs one sequence of log times per ratio")
    if executions is not None and len(executions) != len(log_ratios):
        raise ValueError("one execution per ratio is required")
    owner = [str(i) for i in range(len(log_ratios))] if executions is None else list(executions)
    sizes: dict[str, int] = {}
    for names in strata:
        for name in names:
            sizes[name] = sizes.get(name, 0) + 1
    chosen = [next((s for s in names if sizes[s] >= MIN_STRATUM), names[-1]) for names in strata]
    members: dict[str, list[int]] = {name: [] for name in chosen}
    for i, names in enumerate(strata):
        for name in names:
            if name in members:
                members[name].append(i)
    estimate_between = len(log_ratios) >= MIN_RATIOS
    # each stratum's dependence per side, moderated towards the side's other strata
    rho = {
        side: dict(zip(members, dependences([[of[i] for i in idx] for idx in members.values()]), strict=True))
        for side, of in (("base", base), ("new", new))
    }
    noises: dict[int, Noise] = {}
    for name, idx in members.items():
        stratum, parts, history = _stratum(
            name,
            [log_ratios[i] for i in idx],
            [base[i] for i in idx],
            [new[i] for i in idx],
            (rho["base"][name], rho["new"][name]),
            estimate_between,
            None if runs is None else [runs[i] for i in idx],
            [owner[i] for i in idx],
        )
        for i, (b, n), r in zip(idx, parts, history, strict=True):
            if chosen[i] == name:
                noises[i] = Noise(b, n, stratum, r)
    return [noises[i] for i in range(len(log_ratios))]


def _stratum(
    name: str,
    log_ratios: list[float],
    base: list[Windows],
    new: list[Windows],
    rho: tuple[float, float],
    estimate_between: bool,
    runs: list[Sequence[float]] | None,
    executions: list[str],
) -> tuple[Stratum, list[tuple[Part, Part]], list[Part | None]]:
    excess = _samples_spread(base, new)
    sides = [_moderated(w, excess, r) for w, r in zip((base, new), rho, strict=True)]
    parts = [(b, n) for b, n in zip(sides[0][0], sides[1][0], strict=True)]
    within = [b.var + n.var for b, n in parts]
    between = _between(log_ratios, within) if estimate_between else None
    history: list[Part | None] = [None] * len(parts)
    prior = None
    if runs is not None:
        history, prior = _run_variances(runs)
    return (
        Stratum(
            name,
            len(log_ratios),
            between,
            (sides[0][1], sides[1][1]),
            (sides[0][2], sides[1][2]),
            prior,
            len(set(executions)),
        ),
        parts,
        history,
    )


def _run_variances(runs: Sequence[Sequence[float]]) -> tuple[list[Part | None], tuple[float, float] | None]:
    """Each time's variance of one run, from its log times over BASE and the history (ddof 1),
    moderated towards the stratum's: (parts, (prior sigma, prior df)); None for a time with fewer
    than two runs, and no prior where fewer than three times have one."""
    has = [i for i, r in enumerate(runs) if len(r) >= 2]
    out: list[Part | None] = [None] * len(runs)
    if not has:
        return out, None
    raw = np.array([np.var(np.asarray(runs[i], np.float64), ddof=1) for i in has])
    df = np.array([len(runs[i]) - 1 for i in has], np.float64)
    var, total, prior_df, prior = _squeezed(raw, df)
    for i, v, d in zip(has, var.tolist(), total.tolist(), strict=True):
        out[i] = Part(v, d, v)
    return out, (None if math.isnan(prior) else (math.sqrt(prior), prior_df))


def dependence(sides: Sequence[Windows]) -> float:
    """Pooled lag-1 autocorrelation of windows (AR(1) rho in [0, 0.95]): the rho at which the summed
    squared successive differences over the summed squared deviations equal their expectation,
    s^2 2 (n - 1)(1 - rho) over s^2 (n - g(n, rho)) summed over the series (g: n x the variance of a
    mean of n). Sums of the windows themselves, not of each series divided by its own spread: that
    ratio of two dependent quantities is biased at a few windows."""
    return _dependence(sides)[0]


def dependences(groups: Sequence[Sequence[Windows]]) -> list[float]:
    """Each group's pooled dependence, moderated towards their common one (DerSimonian and Laird's
    random effects, each estimate weighted by its sampling variance): a group of a few dozen short
    series estimates rho to +-0.1 to 0.2, and the median's variance moves by a third for 0.1 of rho
    near 0.5, so groups that do not differ beyond that share one estimate, and groups that do keep
    their own."""
    estimates = [_dependence(g) for g in groups]
    known = [(r, v) for r, v in estimates if 0 < v < math.inf]
    if len(known) < 2:
        return [r for r, _ in estimates]
    weight = np.array([1 / v for _, v in known])
    rho = np.array([r for r, _ in known])
    mean = float(np.sum(weight * rho) / weight.sum())
    q = float(np.sum(weight * (rho - mean) ** 2))
    spread = max(0.0, (q - (len(known) - 1)) / float(weight.sum() - np.sum(weight**2) / weight.sum()))
    out = []
    for r, v in estimates:
        if not v < math.inf:
            out.append(mean)
        elif v == 0:  # every series says the same
            out.append(r)
        else:
            out.append((r * spread + mean * v) / (spread + v))
    return out


def _dependence(sides: Sequence[Windows]) -> tuple[float, float]:
    """``dependence`` and its sampling variance: the jackknife over series of the observed ratio,
    through the slope of its expectation in rho (infinite with fewer than two usable series)."""
    usable = [w for w in sides if w.n >= 3 and w.spread > 0]
    if not usable:
        return 0.0, math.inf
    successive = np.array([w.successive for w in usable], np.float64)
    spread = np.array([w.spread for w in usable], np.float64)
    observed = float(successive.sum() / spread.sum())
    n = np.array([w.n for w in usable], np.float64)
    weight = np.array([w.scale for w in usable], np.float64) ** 2

    def expected(rho: float) -> float:
        return float(np.sum(weight * 2 * (n - 1) * (1 - rho)) / np.sum(weight * (n - _mean_factor(n, rho))))

    if observed >= expected(0.0):
        rho = 0.0
    elif observed <= expected(MAX_DEPENDENCE):
        rho = MAX_DEPENDENCE
    else:  # the expectation falls with rho: one root between
        rho = float(optimize.brentq(lambda r: expected(r) - observed, 0.0, MAX_DEPENDENCE, xtol=1e-10))
    if len(usable) < 2:
        return rho, math.inf
    left = (successive.sum() - successive) / (spread.sum() - spread)
    ratio_var = (len(left) - 1) / len(left) * float(np.sum((left - left.mean()) ** 2))
    step = 1e-4
    at = min(max(rho, step), MAX_DEPENDENCE - step)
    slope = (expected(at + step) - expected(at - step)) / (2 * step)
    return rho, ratio_var / slope**2


def median_variance(sides: Sequence[Windows], rho: float) -> np.ndarray:
    """Variance of the log of the median of each side's windows: v(n) s^2 for independent normal
    windows (v(n) ~ pi / (2n + 1), odd n; pi / (2n + 2.7), even), times the AR(1) inflation of a
    median (its sign correlations, (2 / pi) asin(rho^k)) over the shrinkage of s under the same
    dependence ((n - g) / (n - 1)). NaN for fewer than two windows."""
    n = np.array([w.n for w in sides], np.float64)
    scale = np.array([w.scale for w in sides], np.float64)
    v = np.where(n % 2 == 1, math.pi / (2 * n + 1), math.pi / (2 * n + 2.7))
    factor = np.ones_like(n)
    if rho > 0:
        for size in np.unique(n[n >= 2]).astype(int).tolist():
            k = np.arange(1, size)
            inflation = 1 + 2 / size * float(np.sum((size - k) * (2 / math.pi) * np.arcsin(rho**k)))
            factor[n == size] = inflation / ((size - _mean_factor(size, rho)) / (size - 1))
    return np.where(n >= 2, v * scale**2 * factor, np.nan)


def _mean_factor(n: Any, rho: float) -> Any:
    """n x Var(mean of n AR(1) values of unit variance), 1 + (2 / n) sum_k<n (n - k) rho^k, in closed
    form (elementwise in n)."""
    if rho == 0:
        return np.ones_like(n, dtype=np.float64) if isinstance(n, np.ndarray) else 1.0
    geometric = rho * (1 - rho ** (n - 1)) / (1 - rho)
    weighted = rho * (1 - n * rho ** (n - 1) + (n - 1) * rho**n) / (1 - rho) ** 2
    return 1 + 2 / n * (n * geometric - weighted)


def _iid_log_spread(n: np.ndarray) -> np.ndarray:
    """Variance of the log of s^2 (s as in ``windows``) for n independent normal windows: 1.1 x
    psi'((n - 1) / 2), within 3% of simulation for n = 5 to 60 (n >= 2)."""
    return 1.1 * trigamma((np.maximum(n, 2) - 1) / 2)


def _window_df(n: np.ndarray, excess: float) -> np.ndarray:
    """Degrees of freedom of each side's window variance (``n`` windows each): those of a chi-square
    whose log is ``excess`` x as noisy as for n independent normal windows; 1 below two windows."""
    sizes, where = np.unique(n, return_inverse=True)
    df = 2 * inverse_trigamma(excess * _iid_log_spread(sizes))
    return np.where(sizes < 2, 1.0, df)[where]


def _samples_spread(base: Sequence[Windows], new: Sequence[Windows]) -> float:
    """How many times noisier the log window variances are than for independent normal windows:
    BASE's and NEW's estimates of the same time should agree as well as two samples do (at least 1)."""
    pairs = [(b, n) for b, n in zip(base, new, strict=True) if b.scale > 0 and n.scale > 0]
    if len(pairs) < 3:
        return 1.0
    observed = sum((2 * math.log(b.scale / n.scale)) ** 2 for b, n in pairs)
    expected = float(np.sum(_iid_log_spread(np.array([[b.n, n.n] for b, n in pairs], np.float64))))
    return max(1.0, observed / expected)


def _moderated(sides: Sequence[Windows], excess: float, rho: float) -> tuple[list[Part], float, float]:
    """Each side's median variance moderated towards the stratum's: (parts, dependence, prior df).
    Each raw variance has the degrees of freedom of a chi-square whose log is ``excess`` x as noisy as
    for independent normal windows; prior and posterior as limma's (log variances have mean
    log s0^2 + psi(d/2) - log(d/2) and variance psi'(d/2) + psi'(d0/2))."""
    raw = median_variance(sides, rho)
    n = np.array([w.n for w in sides], np.float64)
    var, total, prior_df, _ = _squeezed(raw, _window_df(n, excess))
    return [Part(v, d, v) for v, d in zip(var.tolist(), total.tolist(), strict=True)], rho, prior_df


def _squeezed(raw: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Variances with ``df`` degrees of freedom each, moderated towards their common prior as
    limma's: (posterior variances, their df, prior df, prior variance). Log variances have mean
    log s0^2 + psi(d/2) - log(d/2) and variance psi'(d/2) + psi'(d0/2); the prior df is what makes
    their spread beyond sampling's. NaN and 0 give no log variance (0 kept, no prior below three)."""
    known = raw > 0
    raw = np.where(known, raw, 0.0)
    if known.sum() < 3:
        return raw, df, 0.0, math.nan
    z = np.log(raw[known]) - digamma(df[known] / 2) + np.log(df[known] / 2)
    extra = float(np.var(z, ddof=1) - np.mean(trigamma(df[known] / 2)))
    prior_df = min(MAX_DF, float(2 * inverse_trigamma(extra))) if extra > 1e-6 else MAX_DF
    prior = math.exp(float(np.mean(z)) + float(digamma(prior_df / 2)) - math.log(prior_df / 2))
    var = (prior_df * prior + df * raw) / (prior_df + df)
    return var, np.minimum(MAX_DF, prior_df + df), prior_df, prior


def _between(log_ratios: list[float], within: list[float]) -> Part:
    """Run-to-run variance tau^2 of a stratum: the value at which (d - median d)^2 / (w + tau^2)
    has the median of a chi-square with 1 df, then at which those below 9 have its truncated mean;
    0 where the windows already account for the scatter."""
    d = np.asarray(log_ratios, np.float64)
    w = np.asarray(within, np.float64)
    r2 = (d - np.median(d)) ** 2

    def statistic(tau2: float, keep: np.ndarray, reduce: str) -> float:
        total = w[keep] + tau2
        ratio = np.divide(r2[keep], total, out=np.where(r2[keep] > 0, np.inf, 0.0), where=total > 0)
        return float(np.median(ratio) if reduce == "median" else np.mean(ratio))

    def solve(keep: np.ndarray, reduce: str, target: float) -> float:
        if statistic(0.0, keep, reduce) <= target:
            return 0.0
        # the statistic falls with tau^2: its root in log tau^2, between a millionth of the smallest
        # and the largest that can matter (where every ratio is below the target)
        lo = 1e-6 * max(float(np.min(r2[keep & (r2 > 0)], initial=np.inf)), 1e-300)
        hi = float(r2[keep].max()) / min(target, _MEDIAN_CHI2_1) + 1e-300
        if statistic(lo, keep, reduce) <= target:
            return lo
        root = optimize.brentq(
            lambda u: statistic(math.exp(u), keep, reduce) - target, math.log(lo), math.log(hi), xtol=1e-10
        )
        return math.exp(root)

    everything = np.ones(d.size, bool)
    first = solve(everything, "median", _MEDIAN_CHI2_1)
    total = w + first
    keep = np.divide(r2, total, out=np.where(r2 > 0, np.inf, 0.0), where=total > 0) < _KEEP
    tau2 = solve(keep, "mean", _TRUNCATED_MEAN) if keep.sum() >= 2 else first
    df = max(1.0, _BETWEEN_EFFICIENCY * (int(keep.sum()) - 1))
    # d(mean of r^2 / (w + tau^2)) / d tau^2 is about -1 / H, so the estimate's error is H-sized
    totals = w[keep] + tau2
    totals = totals[totals > 0]
    harmonic = float(totals.size / np.sum(1 / totals)) if totals.size else 0.0
    return Part(tau2, df, harmonic)
