"""``pipeline.compare`` on datasets the local launcher really wrote (scale=ci, two gloo ranks): a copy
with one execution's windows 1.3x slower, the dataset against itself and against a rerun of the same
sweep, settings and membership differences, bad input, and the comparison page."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from scipy import stats

from pipeline.data.dataset import Dataset
from pipeline.data.schema import METADATA_KEY
from pipeline.report import aggregate
from pipeline.report.page import REPORT_NAME
from pipeline.report.publish import rounded
from pipeline.tools.compare import load
from pipeline.tools.compare.cli import main
from tests.sweeps import CI_SWEEP, run_sweep
from tests.test_compare_synthetic import compare_error

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def sweeps(ci_sweep, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same ten-execution sweep run twice, one after the other."""
    rerun = tmp_path_factory.mktemp("rerun")
    done = run_sweep(rerun, *CI_SWEEP)
    assert done.returncode == 0, done.stderr[-3000:]
    return ci_sweep[0], rerun


def _copy(dataset: Path, to: Path, without: tuple[str, ...] = ()) -> Path:
    shutil.copytree(dataset / "shards", to / "shards")
    for execution_id in without:
        shutil.rmtree(Dataset(to).shard_dir(execution_id))
    return to


def _rewrite(
    dataset: Path, execution_id: str | None, factor: float = 1.0, git_sha: str | None = None
) -> None:
    """Scale the window times of one execution's shards (all of them if None), or set their git sha,
    rewriting the parquet files with their metadata."""
    pattern = f"execution={execution_id or '*'}/*.parquet"
    for path in sorted((dataset / "shards").glob(pattern)):
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[METADATA_KEY])
        column = table.schema.get_field_index("window_ms")
        table = table.set_column(
            column, table.schema.field(column), pc.multiply(table.column(column), factor)
        )
        if git_sha is not None:
            meta["provenance"]["git_sha"] = git_sha
        pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)


def _compare(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, dict]:
    status = main([*arguments, "--json"])
    return status, json.loads(capsys.readouterr().out)


def test_one_execution_made_slower_is_reported_alone(sweeps, tmp_path, capsys) -> None:
    first = sweeps[0]
    # Against itself, each time's bound is what its own windows allow; scale the execution whose
    # combined time has the lowest bound to 1.5 x that bound (see docs/compare.md for the
    # detection rate of 1.3x over all of them).
    _, itself = _compare(capsys, str(first), str(first))
    combined = [t for t in itself["times"] if t["metric"] == "iterationMS"]
    target = min(combined, key=lambda t: t["bound"])
    # two decimals: new / base is then the factor within an ulp, never near a rounding boundary of the
    # published precision
    chosen, factor = target["execution_id"], math.ceil(150 * target["bound"]) / 100
    slower = _copy(first, tmp_path / "slower")
    _rewrite(slower, chosen, factor=factor)
    status, document = _compare(capsys, str(first), str(slower))
    assert status == 1
    changed = [
        (t["execution_id"], t["metric"], t["change"]) for t in document["times"] if t["change"] != "unchanged"
    ]
    assert (chosen, "iterationMS", "slower") in changed, document["times"]
    assert {execution_id for execution_id, _, _ in changed} == {chosen}
    assert {change for _, _, change in changed} == {"slower"}
    for t in document["times"]:  # the JSON's ratios at the published precision
        assert t["ratio"] == rounded(factor if t["execution_id"] == chosen else 1.0)
    # every other time is exactly 1: no run-to-run scatter, so the windows set every sigma, exactly as
    # against itself (scaling all of a time's windows leaves their log spread as it was); the bound is
    # the t quantile at 5% / 25 of its own df times that sigma, and the df move only by the run-to-run
    # estimate's own error (the scaled execution is left out of it)
    assert all(s["between_sigma"] == 0.0 for s in document["noise"])
    for t, alone in zip(document["times"], itself["times"], strict=True):
        assert t["sigma"] == pytest.approx(alone["sigma"], rel=1e-9)
        noise = math.exp(stats.t.isf(0.05 / (2 * len(document["times"])), t["df"]) * t["sigma"])
        # sigma and the bound are published to six significant digits: the bound's log is off by up to
        # its own size times sigma's relative rounding (5e-5 at most), plus the bound's own rounding
        want = math.log(max(1.05, noise))
        assert abs(math.log(t["bound"]) - want) <= 5e-5 * want + 1e-5, (t["bound"], math.exp(want))
        assert t["bound"] == pytest.approx(alone["bound"], rel=0.2)
    # the pairs of the scaled execution move by the factor (up when MoK got slower, down for Dist-MoE)
    moved = {s["dist_execution_id"] for s in document["speedups"] if s["ratio"] != pytest.approx(1.0)}
    partners = {s["dist_execution_id"] for s in document["speedups"] if chosen in s.values()}
    assert moved == partners


def test_the_same_dataset_and_a_rerun_report_nothing_slower(sweeps, capsys) -> None:
    first, rerun = sweeps
    status, itself = _compare(capsys, str(first), str(first))
    assert status == 0 and itself["counts"]["unchanged"] == len(itself["times"]) == 25
    assert all(t["ratio"] == 1.0 and t["low"] < 1 < t["high"] for t in itself["times"])
    assert not any(s["flipped"] for s in itself["selections"]) and itself["settings_differ"] == []
    status, document = _compare(capsys, str(first), str(rerun))
    assert status == 0 and document["counts"]["slower"] == 0, [
        t for t in document["times"] if t["change"] == "slower"
    ]
    assert document["only_in_base"] == document["only_in_new"] == []
    # the tree may move between (or during) the two sweeps; nothing else can
    assert {d["setting"] for d in document["settings_differ"]} <= {"git_sha"}
    # the run-to-run part is estimated per stratum: zero where the runs differ no more than their
    # windows do (as on a quiet host), never negative
    assert all(s["between_sigma"] >= 0 for s in document["noise"])
    assert document["bounds"]["times"]["low"] >= 1.05


def test_differences_between_the_datasets_are_listed_first(sweeps, tmp_path, capsys) -> None:
    first = sweeps[0]
    ids = sorted(load(first).rows)
    base = _copy(first, tmp_path / "base", without=(ids[0],))
    new = _copy(first, tmp_path / "new", without=(ids[1],))
    _rewrite(new, None, git_sha="f" * 40)
    assert main([str(base), str(new)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("settings differ: git_sha: ") and lines[2].endswith(f"-> {'f' * 40}")
    assert lines[3] == f"only in BASE (1): {ids[1]}" and lines[4] == f"only in NEW (1): {ids[0]}"
    assert lines[5].startswith("threshold 5%") and lines[-1].startswith("0 slower")


def test_bad_input_is_one_line_and_exit_two(sweeps, tmp_path) -> None:
    first = sweeps[0]
    ids = sorted(load(first).rows)
    only_first = _copy(first, tmp_path / "a", without=tuple(ids[1:]))
    only_second = _copy(first, tmp_path / "b", without=(ids[0], *ids[2:]))
    (tmp_path / "empty").mkdir()
    cases = [
        (
            [str(tmp_path / "absent"), str(first)],
            f"dataset directory '{tmp_path / 'absent'}' does not exist",
        ),
        ([str(tmp_path / "empty"), str(first)], "has no usable shard (no shards/execution=*/*.parquet)"),
        ([str(only_first), str(only_second)], "no common executions: "),
        ([str(first), str(first), "--threshold", "-0.1"], "threshold must be a finite number >= 0"),
    ]
    for arguments, message in cases:
        assert message in compare_error(arguments)


def _self_contained(page: str) -> None:
    """No reference leaves the file: no http(s) URL, no script, every image a PNG data URI."""
    assert re.search(r"https?://", page) is None and "<script" not in page
    sources = re.findall(r'<img [^>]*src="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert not re.search(r'(href|src)="(?!data:)', page)


def test_comparison_page_and_report_page_are_self_contained(sweeps, tmp_path, capsys) -> None:
    first, rerun = sweeps
    # what the comparison finds is the other tests' business; here only what the page holds
    assert main([str(first), str(rerun), "--out", str(tmp_path / "cmp")]) in (0, 1)
    page = (tmp_path / "cmp" / "comparison.html").read_text()
    _self_contained(page)
    for heading in ("The two datasets", "Time ratios", "Changed times", "Speedups", "Selected", "All times"):
        assert f"<h2>{heading}" in page
    assert page.count("<img ") == 1 and page.count("<table>") >= 4  # "Changed times" may be "None."
    assert all(page.count(f"<td>{i}</td>") >= 2 for i in load(first).rows)  # every time is listed
    aggregate(first, tmp_path / "published")
    report = (tmp_path / "published" / REPORT_NAME).read_text()
    _self_contained(report)
    assert report.count("<img ") == 6  # speedups; EP8, EP32 times and phase accounts; saved state
    headings = re.findall(r"<h2>([^<]*)", report)
    assert headings == [
        "The answer",
        "What ran",
        "Deviations from the report",
        "Choices the report does not state",
        "Completeness of the matrix",
        "Iteration time per EP degree",
        "Where the time went",
        "Pairs",
        "Executions",
        "Saved state of the packing cases",
    ]
    assert report.count("<table>") == 10  # a table in every section, two in the answer
    assert "packing-ep32-f3072-profile-a-bf16-mok-native" in report and "ci (10)" in report
