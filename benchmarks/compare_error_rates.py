"""Benchmark: false alarms and power of ``pipeline.compare`` under realistic noise, by simulation.

Each setting draws pairs of datasets (BASE, NEW) of the whole matrix (110 executions, two ranks)
from one noise model and counts how often the comparison exits 1 when nothing changed, and how
often it catches one execution made 1.1x or 1.3x slower (all its windows, in NEW) and flags
nothing else. The noise of a window's log time is

    level(execution, phase) + run(execution, side) + scale(execution) x sigma x e(t) + rank part

with ``e`` an AR(1) series along the windows of one phase (normal or t3 innovations, t3 scaled to
the normal's interquartile range), ``scale`` x2 either way across executions (log-uniform, the
same on both sides), ``run`` one normal effect per execution and side shared by its phases, and a
second rank 5% faster with its own small jitter. Window counts are five (the report's) or what
``scale=cpu`` calibrates to (23 to 60 for inference and training, 9 to 11 for packing), drawn per
execution and side once per setting. ``--history N`` also draws N earlier runs of BASE (each with
its own run effects, BASE's windows' layout) and passes them as the comparison's history. Beside
each power draw, an oracle: whether a test that knew every time's variance exactly (the model's,
z at Holm's first step, and the comparison's other two conditions) would have caught the change,
which is what the noise itself allows; and where the comparison's power goes short of it, the same
test with the comparison's own sigma (the variance estimate's cost) and with the true sigma at the
comparison's degrees of freedom (the cost of counting that estimate's error). The oracle's z test at
the normal quantile is not held to anything: with t3 windows its z has heavier tails than the
normal's, so each setting also counts how often it flags a rerun, and gives the oracle held to 5%
(its critical value the 95th percentile of the reruns' largest |z|), the power that knowing every
variance buys under the comparison's own promise. Reruns count both how often the comparison exits
1 (a time `slower`) and how often it flags anything (`slower` or `faster`), which its promise bounds.

The comparison is the real one, on real shards: per setting the two datasets are written once as
parquet by the shard writer's format (``pipeline/tools/synthetic_shards.py``) and read back by the shard
reader; each draw replaces the window times of those shards in memory and runs the side builder
(``pipeline.compare.side.side``: the report's rows, the slowest rank's windows) and
``pipeline.compare.compare``, so a draw costs the comparison, not the parquet. ``--check K``
also writes the first K draws of every setting as parquet files and runs the command line on
them, which must give the same document.

    python benchmarks/compare_error_rates.py [--draws 2000] [--settings NAME,...] [--jobs 2]
        [--check 1] [--seed 1] [--history N] [--json FILE]
    python benchmarks/compare_error_rates.py --table FILE  # the table of results already appended

``--settings`` takes names or prefixes (``gpu-``, ``cpu-all``); ``--list`` lists them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import math
import multiprocessing
import platform
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.base.vocabulary import PHASES  # noqa: E402
from pipeline.data.dataset import Dataset  # noqa: E402
from pipeline.data.reader import Shard  # noqa: E402
from pipeline.data.scan import scan_shards  # noqa: E402
from pipeline.matrix import EXECUTIONS, Execution  # noqa: E402
from pipeline.report.publish import json_text  # noqa: E402
from pipeline.tools.compare import any_slower, compare, family  # noqa: E402
from pipeline.tools.compare.cli import main as compare_main  # noqa: E402
from pipeline.tools.compare.side import METRICS, Side, side  # noqa: E402
from pipeline.tools.compare.special import t_sf  # noqa: E402
from pipeline.tools.synthetic_shards import shard_table, write_table  # noqa: E402

# Window sigma (log) and each run's effect per execution (log): GPU-like noise moves a window by 1%
# and an execution's time by 1.5% between two runs (the run effects of both runs together).
LEVELS = {
    "gpu": (0.01, 0.015 / math.sqrt(2)),
    "gpu2": (0.01, 0.015),  # each run's effect 1.5%: 2.1% between two runs
    "cpu": (0.15, 0.10),  # between two runs 14%; quiet scale=ci reruns scattered by 13 - 31%
}
FEATURES = {  # scale spread (x either way), innovations, AR(1) rho, run effect
    "equal": (1.0, "normal", 0.0, "normal"),
    "het": (2.0, "normal", 0.0, "normal"),
    "t3": (1.0, "t3", 0.0, "normal"),
    "ar": (1.0, "normal", 0.5, "normal"),
    "all": (2.0, "t3", 0.5, "normal"),
    "windows": (2.0, "t3", 0.5, None),  # no run effect: the windows are all the noise
    # beyond the model (normal run effects of one scale per stratum): shown, not promised
    "run-t3": (2.0, "t3", 0.5, "t3"),
    "run-het": (2.0, "t3", 0.5, "scaled"),  # the run effect x the execution's window scale
}
CHANGES = (1.1, 1.3)
RANK_OFFSET, RANK_JITTER = -0.05, 0.25  # the second rank: 5% faster, jitter 0.25 x window sigma


@dataclass(frozen=True)
class Setting:
    level: str
    feature: str
    windows: str  # "5" or "cpu"
    changes: tuple[float, ...] = ()
    history: int = 0  # earlier runs of BASE given to the comparison

    @property
    def name(self) -> str:
        return f"{self.level}-{self.feature}-{self.windows}"

    @property
    def label(self) -> str:
        """The name, with the history's size where there is one (how results are told apart)."""
        return self.name + (f"-h{self.history}" if self.history else "")

    @property
    def promised(self) -> bool:
        """A setting of the model's promise (P(exit 1 | no change) <= 5%); the others show more."""
        return not self.feature.startswith("run-") and self.level != "gpu2"

    @property
    def note(self) -> str:
        if self.feature.startswith("run-"):
            return " (beyond the model)"
        return " (each run 1.5%)" if self.level == "gpu2" else ""


def settings() -> list[Setting]:
    out = []
    for level in ("gpu", "cpu"):
        for feature in FEATURES:
            for windows in ("5", "cpu"):
                power = level == "gpu" and feature in ("equal", "all")
                out.append(Setting(level, feature, windows, CHANGES if power else ()))
    out += [Setting("gpu2", feature, "5", CHANGES) for feature in ("equal", "all")]
    return sorted(out, key=lambda s: not s.promised)  # what the model promises first


def window_counts(execution: Execution, regime: str, rng: np.random.Generator) -> int:
    if regime == "5":
        return 5
    if execution.workload.kind == "packing":
        return int(rng.integers(9, 12))
    return int(rng.integers(23, 61))


@dataclass
class Templates:
    """BASE's and NEW's shards of one (level, window regime), read back from parquet, and for every
    row its phase, rank and window position, so a draw can lay new window times over them."""

    root: Path
    shards: tuple[dict[str, Shard], dict[str, Shard]]
    tables: tuple[dict[str, pa.Table], dict[str, pa.Table]]
    level: dict[str, np.ndarray]  # execution -> log ms per iteration per phase index

    @classmethod
    def write(
        cls, root: Path, executions: Sequence[Execution], level: str, regime: str, seed: int
    ) -> Templates:
        rng = np.random.default_rng(seed)
        device = "NVIDIA H200" if level.startswith("gpu") else "cpu"
        scale = "full" if regime == "5" else "cpu"
        tables: tuple[dict[str, pa.Table], dict[str, pa.Table]] = ({}, {})
        for e in executions:
            for side_tables in tables:
                table = shard_table(
                    e,
                    1,
                    rng,
                    ranks=2,
                    scale=scale,
                    device=device,
                    job_id="1_1",
                    windows=window_counts(e, regime, rng),
                )
                side_tables[e.execution_id] = table
        shards = []
        for name, side_tables in zip(("base", "new"), tables, strict=True):
            for table in side_tables.values():
                write_table(root / name, table)
            shards.append(scan_shards(Dataset(root / name)).newest)
        levels = {}
        for execution_id, shard in shards[0].items():
            per_iteration = np.log(shard.window_ms / shard.iterations)
            levels[execution_id] = np.array(
                [
                    np.median(per_iteration[shard.phase == p]) if (shard.phase == p).any() else 0.0
                    for p in PHASES
                ]
            )
        return cls(root, (shards[0], shards[1]), tables, levels)


def _layout(shard: Shard) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: phase index, rank, and position among its (phase, rank)'s rows (the window order)."""
    phase = np.array([PHASES.index(p) for p in shard.phase])
    rank = shard.rank
    group = phase * (rank.max() + 1) + rank
    position = np.zeros(group.size, np.int64)
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        position[rows] = np.arange(rows.size)
    return phase, rank, position


class Drawer:
    """Draws the window times of BASE and NEW for one setting."""

    def __init__(self, setting: Setting, templates: Templates, rng: np.random.Generator) -> None:
        self.setting, self.templates, self.rng = setting, templates, rng
        self.sigma, self.run_sigma = LEVELS[setting.level]
        self.spread, self.innovations, self.rho, self.run = FEATURES[setting.feature]
        self.layouts = [{i: _layout(s) for i, s in shards.items()} for shards in templates.shards]
        self.ids = sorted(templates.shards[0])

    def draw(self, history: int = 0) -> list[dict[str, np.ndarray]]:
        """BASE's, NEW's and ``history`` earlier BASE runs' window times (each its own run effects)."""
        scale = np.exp(self.rng.uniform(-math.log(self.spread), math.log(self.spread), len(self.ids)))
        self.scale = dict(zip(self.ids, scale.tolist(), strict=True))
        return [
            {i: self._side(min(k, 1), i, float(s)) for i, s in zip(self.ids, scale, strict=True)}
            for k in (0, 1, *[0] * history)
        ]

    def _side(self, side_index: int, execution_id: str, scale: float) -> np.ndarray:
        shard = self.templates.shards[side_index][execution_id]
        phase, rank, position = self.layouts[side_index][execution_id]
        n = int(position.max()) + 1
        e = self._innovations((len(PHASES), n))
        series = np.empty_like(e)
        series[:, 0] = e[:, 0]
        c = math.sqrt(1 - self.rho**2)
        for t in range(1, n):
            series[:, t] = self.rho * series[:, t - 1] + c * e[:, t]
        run = 0.0
        if self.run is not None:
            run = self._innovations(()) if self.run == "t3" else float(self.rng.normal())
            run *= self.run_sigma * (scale if self.run == "scaled" else 1.0)
        log_ms = (
            self.templates.level[execution_id][phase]
            + run
            + scale * self.sigma * series[phase, position]
            + RANK_OFFSET * rank
            + RANK_JITTER * scale * self.sigma * self.rng.normal(size=phase.size) * (rank > 0)
        )
        return np.exp(log_ms) * shard.iterations

    def _innovations(self, shape: tuple[int, ...]) -> Any:
        if self.innovations == "t3":
            return self.rng.standard_t(3, size=shape) * (0.6745 / 0.7649)
        return self.rng.normal(size=shape)

    def true_variance(self, execution_id: str, metric: str) -> float:
        """The variance of a time's log ratio in this model, which the comparison has to estimate:
        each side's log median of its windows (rank 0's, the slowest) and the two runs' effects."""
        if self.run == "t3":
            raise ValueError("a t3 run effect is not normal: no z test knows it")
        phase = PHASES.index(METRICS[metric])
        run_scale = self.scale[execution_id] if self.run == "scaled" else 1.0
        var = 2 * (self.run_sigma * run_scale) ** 2 if self.run else 0.0
        for side_index in (0, 1):
            phases, rank, _ = self.layouts[side_index][execution_id]
            n = int(np.sum((phases == phase) & (rank == 0)))
            var += (self.scale[execution_id] * self.sigma) ** 2 * median_variance(
                n, self.rho, self.innovations
            )
        return var


@functools.cache
def median_variance(n: int, rho: float, innovations: str) -> float:
    """Variance of the median of n windows of the model's unit series (AR(1) from its first
    innovation, as ``Drawer`` draws it), by 200,000 draws of a fixed seed."""
    rng = np.random.default_rng(n)
    e = (
        rng.standard_t(3, (200_000, n)) * (0.6745 / 0.7649)
        if innovations == "t3"
        else rng.normal(size=(200_000, n))
    )
    series = np.empty_like(e)
    series[:, 0] = e[:, 0]
    for t in range(1, n):
        series[:, t] = rho * series[:, t - 1] + math.sqrt(1 - rho**2) * e[:, t]
    return float(np.var(np.median(series, axis=1)))


# How a power draw is judged besides the comparison's own verdict: the oracle (each time's true variance,
# the normal quantile), and the two halves of the gap to it, each with one of the comparison's own
# estimates: its sigma at the normal quantile (what estimating the variance costs through its bias and
# scatter), the true sigma at its degrees of freedom (what counting that estimate's error costs).
JUDGES = ("oracle", "own_sigma", "own_df")


def _level(document: dict[str, Any]) -> float:
    """Holm's first step: the family's level over the times tested."""
    return family.ALPHA / sum(t["window_low"] is not None for t in document["times"])


def judged(drawer: Drawer, document: dict[str, Any], execution_id: str, threshold: float) -> dict[str, bool]:
    """Whether each of ``JUDGES`` catches the change in ``execution_id``: a two-sided test at Holm's first
    step over the tested times, under the comparison's other two conditions (beyond the threshold, the
    windows' interval excluding 1). The oracle is what the noise itself allows."""
    level = _level(document)
    caught = dict.fromkeys(JUDGES, False)
    for t in document["times"]:
        if (
            t["window_low"] is None
            or t["execution_id"] != execution_id
            or t["ratio"] <= 1 + threshold
            or t["window_low"] <= 1
        ):
            continue
        log_ratio = math.log(t["ratio"])
        true_sigma = math.sqrt(drawer.true_variance(execution_id, t["metric"]))
        caught["oracle"] |= math.erfc(log_ratio / true_sigma / math.sqrt(2)) < level
        caught["own_sigma"] |= math.erfc(log_ratio / t["sigma"] / math.sqrt(2)) < level
        caught["own_df"] |= 2 * float(t_sf(log_ratio / true_sigma, t["df"])) < level
    return caught


def oracle_z(drawer: Drawer, document: dict[str, Any], threshold: float) -> list[tuple[str, float]]:
    """(execution, z with the true sigma) of every time the comparison's other two conditions would let
    it flag, either way: beyond the threshold, the windows' interval on the same side of 1. The
    largest |z| of a rerun is what the oracle's critical value must stay above for its false alarms;
    its 95th percentile over a setting's reruns is the critical value that keeps them at 5%."""
    out = []
    for t in document["times"]:
        if t["window_low"] is None:
            continue
        slower = t["ratio"] > 1 + threshold and t["window_low"] > 1
        faster = t["ratio"] < 1 / (1 + threshold) and t["window_high"] < 1
        if slower or faster:
            sigma = math.sqrt(drawer.true_variance(t["execution_id"], t["metric"]))
            out.append((t["execution_id"], math.log(t["ratio"]) / sigma))
    return out


def build(
    templates: Templates, side_index: int, window_ms: dict[str, np.ndarray], path: Path | None = None
) -> Side:
    """The real side builder over the template shards with these window times."""
    shards = templates.shards[side_index]
    drawn = {i: dataclasses.replace(s, window_ms=window_ms[i]) for i, s in shards.items()}
    root = path or templates.root / ("base", "new")[side_index]
    return side(root, Dataset(root), drawn, [])


def histories(templates: Templates, drawn: Sequence[dict[str, np.ndarray]]) -> list[Side]:
    """The history's sides: BASE's shards with each earlier run's window times."""
    return [build(templates, 0, ms, templates.root / f"history-{k}") for k, ms in enumerate(drawn)]


def changed(templates: Templates, new: Side, execution_id: str, window_ms: np.ndarray) -> Side:
    """NEW with one execution's windows replaced: the side builder on that shard alone, its row and
    windows put in place of the old ones (rows are per shard; the provenance does not change)."""
    shard = dataclasses.replace(templates.shards[1][execution_id], window_ms=window_ms)
    one = side(new.path, Dataset(new.path), {execution_id: shard}, [])
    return dataclasses.replace(new, rows=new.rows | one.rows, windows=new.windows | one.windows)


def written(templates: Templates, side_index: int, window_ms: dict[str, np.ndarray], root: Path) -> Path:
    """The same draw as parquet files in a dataset folder of its own, for the command line."""
    for execution_id, table in templates.tables[side_index].items():
        column = table.schema.get_field_index("window_ms")
        write_table(
            root, table.set_column(column, table.schema.field(column), pa.array(window_ms[execution_id]))
        )
    return root


@dataclass
class Counts:
    draws: int = 0
    exits: int = 0  # null comparisons that exit 1
    faster: int = 0  # null comparisons with any time `faster`
    flagged: int = 0  # null comparisons with any time `slower` or `faster` (the family-wise promise)
    oracle_flagged: int = 0  # null comparisons in which the oracle flags a time
    null_z: list[float] = dataclasses.field(default_factory=list)  # per rerun, the oracle's largest |z|
    changed_z: dict[float, list[float]] = dataclasses.field(default_factory=dict)  # the changed time's z
    caught: dict[float, int] = dataclasses.field(default_factory=dict)
    judged: dict[float, dict[str, int]] = dataclasses.field(default_factory=dict)  # by each of JUDGES
    others: dict[float, int] = dataclasses.field(default_factory=dict)  # any other time flagged slower
    bounds: list[float] = dataclasses.field(default_factory=list)  # median bound of the times per draw
    seconds: float = 0.0


def run_setting(
    setting: Setting, draws: int, seed: int, executions: Sequence[Execution], check: int = 0
) -> dict[str, Any]:
    """Draw ``draws`` comparisons of one setting; ``check``: how many go through parquet and the CLI too."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        regime_seed = seed * 1000 + list(LEVELS).index(setting.level) * 10 + (setting.windows == "cpu")
        templates = Templates.write(Path(tmp), executions, setting.level, setting.windows, regime_seed)
        rng = np.random.default_rng([seed, zlib.crc32(setting.name.encode())])
        drawer = Drawer(setting, templates, rng)
        counts = Counts(
            caught=dict.fromkeys(setting.changes, 0),
            others=dict.fromkeys(setting.changes, 0),
            judged={factor: dict.fromkeys(JUDGES, 0) for factor in setting.changes},
            changed_z={factor: [] for factor in setting.changes},
        )
        known = drawer.run != "t3"  # no z test knows a t3 run effect's variance
        written_start = time.perf_counter() - start
        for k in range(draws):
            base_ms, new_ms, *history_ms = drawer.draw(setting.history)
            base, new = build(templates, 0, base_ms), build(templates, 1, new_ms)
            history = histories(templates, history_ms)
            document = compare(base, new, 0.05, history=history)
            if k < check:
                _check(templates, base_ms, new_ms, history_ms, Path(tmp) / f"check-{k}")
            counts.draws += 1
            counts.exits += any_slower(document)
            counts.faster += document["counts"]["faster"] > 0
            counts.flagged += document["counts"]["slower"] + document["counts"]["faster"] > 0
            if known:
                z = [abs(v) for _, v in oracle_z(drawer, document, 0.05)]
                counts.null_z.append(max(z, default=0.0))
                counts.oracle_flagged += math.erfc(counts.null_z[-1] / math.sqrt(2)) < _level(document)
            counts.bounds.append(document["bounds"]["times"]["median"])
            chosen = drawer.ids[int(rng.integers(len(drawer.ids)))]
            for factor in setting.changes:
                power = compare(
                    base, changed(templates, new, chosen, new_ms[chosen] * factor), 0.05, history=history
                )
                slower = [t["execution_id"] for t in power["times"] if t["change"] == "slower"]
                counts.caught[factor] += chosen in slower
                counts.others[factor] += any(i != chosen for i in slower)
                if known:
                    for judge, hit in judged(drawer, power, chosen, 0.05).items():
                        counts.judged[factor][judge] += hit
                    z = [v for i, v in oracle_z(drawer, power, 0.05) if i == chosen and v > 0]
                    counts.changed_z[factor].append(max(z, default=0.0))
    counts.seconds = time.perf_counter() - start
    return _result(setting, counts, written_start, len(executions))


def _check(
    templates: Templates,
    base_ms: dict[str, np.ndarray],
    new_ms: dict[str, np.ndarray],
    history_ms: Sequence[dict[str, np.ndarray]],
    root: Path,
) -> None:
    """The draw as parquet through ``python -m pipeline.compare --json`` (in-process) must give the
    same document as the in-memory path (dataset paths aside) and the same exit status."""
    base_dir, new_dir = (
        written(templates, 0, base_ms, root / "base"),
        written(templates, 1, new_ms, root / "new"),
    )
    history_dirs = [written(templates, 0, ms, root / f"history-{k}") for k, ms in enumerate(history_ms)]
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        status = compare_main(
            [str(base_dir), str(new_dir), "--json"]
            + (["--history", *map(str, history_dirs)] if history_dirs else [])
        )
    from_disk = json.loads(sink.getvalue())
    in_memory = compare(
        build(templates, 0, base_ms, base_dir),
        build(templates, 1, new_ms, new_dir),
        0.05,
        history=[build(templates, 0, ms, d) for ms, d in zip(history_ms, history_dirs, strict=True)],
    )
    if json.loads(json_text(in_memory)) != from_disk or status != int(any_slower(in_memory)):
        raise AssertionError(f"the in-memory comparison differs from the command line's on {root}")
    shutil.rmtree(root)


def _rate(k: int, n: int) -> dict[str, float]:
    """Rate with its Wilson 95% interval."""
    if n == 0:
        return {"rate": math.nan, "low": math.nan, "high": math.nan}
    z = 1.959964
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"rate": p, "low": max(0.0, centre - half), "high": min(1.0, centre + half)}


def _result(setting: Setting, counts: Counts, setup: float, executions: int) -> dict[str, Any]:
    run_t3 = FEATURES[setting.feature][3] == "t3"
    return {
        "setting": setting.label,
        "history": setting.history,
        "level": setting.level,
        "feature": setting.feature,
        "windows": setting.windows,
        "promised": setting.promised,
        "executions": executions,
        "draws": counts.draws,
        "exit_1": _rate(counts.exits, counts.draws),
        "any_faster": _rate(counts.faster, counts.draws),
        "any_flagged": _rate(counts.flagged, counts.draws),
        "oracle_flagged": _rate(counts.oracle_flagged, counts.draws) if counts.null_z else None,
        "median_bound": float(np.median(counts.bounds)) if counts.bounds else math.nan,
        "power": {
            f"{factor:g}": {
                "caught": _rate(counts.caught[factor], counts.draws),
                **{  # no z test knows a t3 run effect's variance
                    judge: None if run_t3 else _rate(counts.judged[factor][judge], counts.draws)
                    for judge in JUDGES
                },
                "oracle_at_5": _calibrated(counts.null_z, counts.changed_z[factor]),
                "others_flagged": _rate(counts.others[factor], counts.draws),
            }
            for factor in setting.changes
        },
        "seconds": counts.seconds,
        "setup_seconds": setup,
    }


def _calibrated(null_z: list[float], changed_z: list[float]) -> dict[str, float] | None:
    """The oracle held to the comparison's promise: its critical value the 95th percentile of the
    reruns' largest |z|, so that it flags something in 5% of them; the rate at which the changed
    time's z passes it. None without an oracle."""
    if not null_z or not changed_z:
        return None
    critical = float(np.quantile(null_z, 1 - family.ALPHA))
    return _rate(sum(z > critical for z in changed_z), len(changed_z)) | {"critical": critical}


def table(results: Sequence[dict[str, Any]]) -> str:
    """The results as a markdown table. Beside a power draw's catch rate: others flagged; then the
    oracle, the comparison's own sigma, its own df, and the oracle held to 5% (where drawn)."""
    lines = [
        "| setting | windows | draws | P(exit 1), no change | P(any flagged), no change (oracle's) | "
        "1.1x caught (others flagged; oracle / own sigma / own df / oracle at 5%) | "
        "1.3x caught (others flagged; ...) | median bound | s / draw |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        power = []
        for factor in ("1.1", "1.3"):
            p = r["power"].get(factor)
            judges = [p[j] for j in (*JUDGES, "oracle_at_5") if p and p.get(j)]  # older results have fewer
            verdicts = "; " + " / ".join(f"{100 * j['rate']:.1f}%" for j in judges) if judges else ""
            power.append(
                f"{100 * p['caught']['rate']:.1f}% ({100 * p['others_flagged']['rate']:.1f}%{verdicts})"
                if p
                else ""
            )
        e = r["exit_1"]
        flagged = r.get("any_flagged")
        oracle = r.get("oracle_flagged")
        any_text = (
            f"{100 * flagged['rate']:.1f}% [{100 * flagged['low']:.1f}, {100 * flagged['high']:.1f}]"
            + (f" ({100 * oracle['rate']:.1f}%)" if oracle else "")
            if flagged
            else ""
        )
        name = f"{r['level']}-{r['feature']}" + Setting(r["level"], r["feature"], r["windows"]).note
        if r.get("history"):
            name += f", history {r['history']}"
        lines.append(
            f"| {name} | {r['windows']} | {r['draws']} | {100 * e['rate']:.1f}% "
            f"[{100 * e['low']:.1f}, {100 * e['high']:.1f}] | {any_text} | {power[0]} | {power[1]} | "
            f"x{r['median_bound']:.3f} | {(r['seconds'] - r['setup_seconds']) / max(1, r['draws']):.2f} |"
        )
    return "\n".join(lines)


def _job(arguments: tuple[Setting, int, int, int]) -> dict[str, Any]:
    setting, draws, seed, check = arguments
    result = run_setting(setting, draws, seed, EXECUTIONS, check)
    print(
        f"{setting.label}: {result['draws']} draws, P(exit 1) {100 * result['exit_1']['rate']:.1f}%, "
        f"P(any flagged) {100 * result['any_flagged']['rate']:.1f}%, "
        f"{result['seconds']:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--settings", default="", help="comma-separated names or prefixes (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="settings run in parallel processes")
    parser.add_argument(
        "--check", type=int, default=1, help="draws per setting also run through parquet + CLI"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--history", type=int, default=0, help="earlier runs of BASE drawn and given to every comparison"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="append each setting's result here (JSON lines)"
    )
    parser.add_argument("--list", action="store_true", help="list the settings and exit")
    parser.add_argument(
        "--table", type=Path, default=None, help="print the table of the JSON lines in this file and exit"
    )
    args = parser.parse_args()
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return
    chosen = settings()
    if args.list:
        print("\n".join(s.name + s.note for s in chosen))
        return
    if args.settings:
        wanted = args.settings.split(",")
        chosen = [s for s in chosen if any(s.name == w or s.name.startswith(w) for w in wanted)]
        if not chosen:
            parser.exit(2, f"no setting matches {args.settings!r}; see --list\n")
    start = time.perf_counter()
    if args.history < 0:
        parser.exit(2, f"--history must be >= 0 (earlier runs of BASE), got {args.history}\n")
    jobs = [(dataclasses.replace(s, history=args.history), args.draws, args.seed, args.check) for s in chosen]
    results = []
    finished: Iterator[dict[str, Any]]
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(args.jobs))
            finished = pool.imap(_job, jobs, chunksize=1)
        else:
            finished = map(_job, jobs)
        for result in finished:  # in order; each written as soon as it and those before it are done
            results.append(result)
            if args.json:
                with args.json.open("a") as out:
                    out.write(json.dumps(result) + "\n")
    wall = time.perf_counter() - start
    print(table(results))
    print(
        f"\n{len(results)} settings x {args.draws} draws, {len(EXECUTIONS)} executions x 2 ranks a dataset, "
        f"{wall:.0f} s wall with {args.jobs} process(es) on {platform.machine()} "
        f"({multiprocessing.cpu_count()} CPUs), seed {args.seed}"
    )


if __name__ == "__main__":
    main()
