"""``python -m pipeline.history``: six reruns of 10 executions (synthetic shards, one seed), one
execution's windows x1.2 from the fourth dataset on: a step at the fourth for that execution alone,
and exit 1; the datasets sorted by when they were measured, whatever order they are named in; a run
measured under other conditions marked and left out; each step's statistic against a naive
recomputation; the page and JSON written; bad input refused with exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from pipeline.commands import cli
from pipeline.data.dataset import Dataset
from pipeline.data.schema import METADATA_KEY
from pipeline.matrix import EXECUTIONS
from pipeline.tools.compare import load
from pipeline.tools.compare.noise import Part
from pipeline.tools.history import history, ordered
from pipeline.tools.history.cli import main
from pipeline.tools.history.series import Point, step_at
from pipeline.tools.synthetic_shards import shard_table, write_table

SHAPES = ("inference-ep8-f1536", "training-ep32-f3072")
SUBSET = [e for e in EXECUTIONS if e.workload.name in SHAPES]  # 10 executions, 25 times
STEPPED = SUBSET[3].execution_id
STEP, FROM = 1.2, 3  # x1.2 from the fourth dataset (D3) on
RUNS = 6
RUN_SIGMA = 0.01  # each run's effect on an execution's level (log)


def _dated(table, when: str):
    """The table with its metadata's start and end at ``when`` (the synthetic shards' are fixed)."""
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta["started_at"] = meta["ended_at"] = when
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta, sort_keys=True).encode()})


def _rewrite(dataset: Path, execution_id: str, factor: float = 1.0, wait: float | None = None) -> None:
    """Scale an execution's windows, and set its recorded CPU wait share."""
    for path in Dataset(dataset).shard_dir(execution_id).glob("*.parquet"):
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[METADATA_KEY])
        if wait is not None:
            meta["contention"] |= {"cpu_wait_share": wait, "oversubscribed": wait > 1 / 3}
        column = table.schema.get_field_index("window_ms")
        scaled = pa.array(table.column(column).to_numpy() * factor)
        table = table.set_column(column, table.schema.field(column), scaled)
        pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)


@pytest.fixture(scope="module")
def reruns(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Six reruns, oldest first (a day apart), each execution at its level times a small run effect."""
    rng = np.random.default_rng(21)
    levels = rng.uniform(0.5, 20.0, len(SUBSET))
    folders = [tmp_path_factory.mktemp(f"night{k}") for k in range(RUNS)]
    for k, folder in enumerate(folders):
        for e, level in zip(SUBSET, levels, strict=True):
            move = math.exp(RUN_SIGMA * rng.normal()) * (
                STEP if e.execution_id == STEPPED and k >= FROM else 1
            )
            table = shard_table(
                e, 1, rng, ranks=2, windows=25, device="cpu", job_id="1_1", level=level * move
            )
            write_table(folder, _dated(table, f"2026-12-0{k + 1}T02:00:00+00:00"))
    return folders


def test_a_step_at_the_fourth_for_that_execution_alone(reruns, tmp_path, capsys) -> None:
    named = [reruns[k] for k in (4, 0, 5, 2, 1, 3)]  # any order: they are sorted by time
    assert main([*map(str, named), "--out", str(tmp_path / "out")]) == 1
    text = capsys.readouterr().out
    document = json.loads((tmp_path / "out" / "history.json").read_text())
    assert [d["dataset"] for d in document["datasets"]] == [str(r) for r in reruns]
    stepped = [e for e in document["series"] if e["steps"]]
    assert {e["execution_id"] for e in stepped} == {STEPPED}
    assert {e["metric"] for e in stepped} == {"iterationMS", "forwardMS", "backwardMS"} & {
        e["metric"] for e in document["series"] if e["execution_id"] == STEPPED
    }
    for e in stepped:
        (step,) = e["steps"]
        assert step["at"] == FROM and step["change"] == "slower" and e["open_slower"]
        assert step["ratio"] == pytest.approx(STEP, rel=0.05) and step["low"] > 1
    assert document["counts"]["open_slower"] == len(stepped) and document["counts"]["inconclusive"] == 0
    assert f"slower    iterationMS {STEPPED}  at D{FROM}" in text
    page = (tmp_path / "out" / "history.html").read_text()
    assert page.count("data:image/png;base64,") == 1 + 3  # the stepped series, then each metric
    assert "<script" not in page and STEPPED in page
    # every point carries its provenance and noise
    point = document["series"][0]["points"][0]
    assert point["ran"]["git_sha"] == "0" * 40 and point["ran"]["hosts"] == ["node0"]
    assert point["low"] < point["ms"] < point["high"]


def test_before_the_step_nothing_moved_and_moe_bench_runs_it(reruns, tmp_path, capsys) -> None:
    assert cli.main(["history", *map(str, reruns[:FROM]), "--out", str(tmp_path)]) == 0
    assert "0 steps" in capsys.readouterr().out


def test_a_step_that_the_series_came_back_from_does_not_end_it_slower(reruns, tmp_path) -> None:
    """The newest run back at the old level: a slower step at D3, a faster one at D6; exit 0."""
    back = tmp_path / "night6"
    for table in _tables(reruns[0]).values():
        write_table(back, _dated(table, "2026-12-07T02:00:00+00:00"))
    document = history(ordered([load(r) for r in (*reruns, back)]), 0.05)
    (e,) = [e for e in document["series"] if e["execution_id"] == STEPPED and e["metric"] == "iterationMS"]
    assert [(s["at"], s["change"]) for s in e["steps"]] == [(FROM, "slower"), (RUNS, "faster")]
    assert not e["open_slower"] and document["open_slower"] == []


def _tables(dataset: Path) -> dict[str, object]:
    return {
        path.parent.name: pq.read_table(path)
        for path in sorted((dataset / "shards").glob("*/attempt-1.parquet"))
    }


def test_a_contended_run_is_marked_and_left_out(reruns, tmp_path) -> None:
    """One execution's fifth run measured while its CPU waited 60% of the time (the others 1%), its
    windows x1.5: marked with the reason, no step, and a step next to it is inconclusive."""
    copies = []
    for k, r in enumerate(reruns):
        copy = tmp_path / f"night{k}"
        for table in _tables(r).values():
            write_table(copy, table)
        copies.append(copy)
    quiet = SUBSET[0].execution_id
    _rewrite(copies[4], quiet, factor=1.5, wait=0.6)
    _rewrite(copies[2], STEPPED, wait=0.6)  # the run just before the stepped execution's step
    document = history(ordered([load(c) for c in copies]), 0.05)
    for e in document["series"]:
        if e["execution_id"] == quiet:
            assert e["steps"] == []
            (marked,) = [p for p in e["points"] if p["differs"]]
            assert (
                marked["dataset"] == 4 and marked["differs"] == "this run contended (cpu wait 0.60 vs 0.01)"
            )
        if e["execution_id"] == STEPPED:
            (step,) = e["steps"]
            assert step["change"] == "inconclusive" and step["measured"] == "slower"
            assert step["conditions"] == "dataset 2: this run contended (cpu wait 0.60 vs 0.01)"


def test_a_step_is_the_difference_of_means_against_each_point_s_noise() -> None:
    """The statistic of a step between points [:j] and [j:], against a naive float64 recomputation:
    the difference of mean logs, its variance sum(w_i) / n_side^2 + rho (1 / n_left + 1 / n_right),
    Satterthwaite's df over the parts."""
    rng = np.random.default_rng(31)
    for _ in range(50):
        n = int(rng.integers(2, 9))
        ms = np.exp(rng.normal(2.0, 0.2, n))
        w = rng.uniform(1e-4, 1e-2, n)
        wdf = rng.uniform(3, 60, n)
        run = Part(float(rng.uniform(0, 1e-2)), float(rng.uniform(2, 30)), float(rng.uniform(1e-4, 1e-2)))
        points = [
            Point(k, float(ms[k]), Part(float(w[k]), float(wdf[k]), float(w[k])), None, None, None)
            for k in range(n)
        ]
        j = int(rng.integers(1, n))
        d, var, df = step_at(points, run, j)
        left, right = np.log(ms[:j]), np.log(ms[j:])
        assert d == pytest.approx(right.mean() - left.mean(), rel=1e-12, abs=1e-12)
        terms = [w[k] / j**2 for k in range(j)] + [w[k] / (n - j) ** 2 for k in range(j, n)]
        factor = 1 / j + 1 / (n - j)
        naive_var = sum(terms) + run.var * factor
        assert var == pytest.approx(naive_var, rel=1e-12)
        uncertainty = (
            sum(t**2 / f for t, f in zip(terms, wdf, strict=True)) + (run.scale * factor) ** 2 / run.df
        )
        assert df == pytest.approx(min(1000.0, max(1.0, naive_var**2 / uncertainty)), rel=1e-9)
        # and its two-sided p-value is Student's t
        from pipeline.tools.compare.classify import p_values

        (p,) = p_values([d], [var], [df])
        assert p == pytest.approx(2 * stats.t.sf(abs(d) / math.sqrt(naive_var), df), rel=1e-9)


def test_bad_input_is_refused_in_one_line(reruns, tmp_path, capsys) -> None:
    for argv, message in (
        ([str(reruns[0]), "--out", str(tmp_path)], "a history needs at least two datasets, got 1"),
        ([str(reruns[0]), str(reruns[0]), "--out", str(tmp_path)], "named twice"),
        ([str(reruns[0]), str(tmp_path / "nothing"), "--out", str(tmp_path)], "does not exist"),
        ([str(reruns[0]), str(reruns[1])], "the following arguments are required: --out"),
        ([str(reruns[0]), str(reruns[1]), "--out", str(tmp_path), "--threshold", "-1"], "threshold must be"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and message in err and err.count("\n") == 1, err


def _at_scale(source: Path, to: Path, scale: str, factor: float, when: str) -> Path:
    """``source``'s executions again, as a run at another scale would record them: its config names
    ``scale``, its windows are ``factor`` times longer, measured at ``when``."""
    for name, table in _tables(source).items():
        meta = json.loads(table.schema.metadata[METADATA_KEY])
        meta["config"]["scale"]["name"] = scale
        meta["started_at"] = meta["ended_at"] = when
        column = table.schema.get_field_index("window_ms")
        scaled = pa.array(table.column(column).to_numpy() * factor)
        table = table.set_column(column, table.schema.field(column), scaled)
        path = to / "shards" / name / "attempt-1.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)
    return to


@pytest.mark.slow
def test_a_series_is_split_where_the_settings_change_and_no_step_is_judged_across(reruns, tmp_path, capsys):
    """Three runs and a fourth at another scale, every time x4.165: before, "slower forwardMS at D3
    x4.165" and exit 1, without a word of the scale; now the text, the JSON and the page say the
    settings change at D3, every series stops before it, and nothing is slower. compare on the last
    pair calls each time inconclusive, naming the scale."""
    other = _at_scale(reruns[2], tmp_path / "cpu", "cpu", 4.165, "2026-12-09T02:00:00+00:00")
    out = tmp_path / "out"
    assert main([*map(str, reruns[:3]), str(other), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    said = (
        "settings change at D3 (scale: full -> cpu): every series is split there; no step is judged across it"
    )
    assert said in text.splitlines()
    document = json.loads((out / "history.json").read_text())
    assert document["settings_changes"] == [{"at": 3, "change": "scale: full -> cpu"}]
    assert document["counts"]["steps"] == 0 and not document["open_slower"]
    assert all(p["dataset"] < 3 for e in document["series"] for p in e["points"])
    scales = {t for e in document["series"] for t in e["settings"].split() if t.startswith("scale=")}
    assert scales == {"scale=full"}
    assert (
        "Settings change at D3 (scale: full -&gt; cpu): every series is split there"
        in (out / "history.html").read_text()
    )
    # with a fourth run at the first scale after it, that one joins the first three again
    again = _at_scale(reruns[3], tmp_path / "full-again", "full", 1.0, "2026-12-10T02:00:00+00:00")
    document = history(ordered([load(r) for r in (*reruns[:3], other, again)]), 0.05)
    assert [c["at"] for c in document["settings_changes"]] == [3, 4]
    assert {p["dataset"] for e in document["series"] for p in e["points"]} == {0, 1, 2, 4}

    from pipeline.tools.compare.cli import main as compare

    assert compare([str(reruns[2]), str(other)]) == 0
    text = capsys.readouterr().out
    assert "settings differ: scale: full -> cpu" in text
    assert "0 slower, 0 faster, 0 unchanged, 25 inconclusive" in text
    assert "measured slower; settings differ (scale full -> cpu)" in text
