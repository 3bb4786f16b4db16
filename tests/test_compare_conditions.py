"""Measuring conditions in a comparison: the bounds on hand-made conditions, then real shards (the
synthetic helper's, one seed) whose metadata says an execution ran contended, on slower clocks or a
shared GPU: its times are inconclusive with the reason, in text, JSON and page, and exit 1 only with
``--strict``; a change under equal conditions is still slower; where clocks differ the ratio at equal
clocks is given."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.data.dataset import Dataset
from pipeline.data.meta import GpuConditions
from pipeline.data.schema import METADATA_KEY
from pipeline.matrix import EXECUTIONS
from pipeline.tools.compare import compare, load
from pipeline.tools.compare.cli import main
from pipeline.tools.compare.conditions import Measured, clock_ratio, differences, typical
from pipeline.tools.synthetic_shards import shard_table, write_table

SHAPES = ("inference-ep8-f1536", "training-ep32-f3072")
SUBSET = [e for e in EXECUTIONS if e.workload.name in SHAPES]  # 10 executions, 25 times
QUIET = Measured(0.05, ("n1",), None, None, None, (), None, "no GPU")


def _gpu(sm: float, memory: float = 3201.0, throttled: float = 0.0, processes: int | None = 1) -> Measured:
    reasons = ("sw_power_cap",) if throttled else ()
    return Measured(0.01, ("n1",), sm, memory, throttled, reasons, processes, None)


def test_the_bounds_of_each_condition() -> None:
    def cpu(base: float, new: float) -> list[str]:
        return differences(
            dataclasses.replace(QUIET, cpu_wait_share=base), dataclasses.replace(QUIET, cpu_wait_share=new)
        )

    assert cpu(0.046, 0.396) == ["NEW contended (cpu wait 0.40 vs 0.05)"]  # stretch 1.58
    assert cpu(0.05, 0.25) == ["NEW contended (cpu wait 0.25 vs 0.05)"]  # 0.95 / 0.75 = 1.267 > 1.25
    assert cpu(0.10, 0.20) == [] and cpu(0.2, 0.36) == []  # 1.125, 1.25: within
    assert cpu(0.60, 0.10) == ["BASE contended (cpu wait 0.60 vs 0.10)"]
    assert cpu(1.0, 1.0) == [] and cpu(0.5, 1.0) == ["NEW contended (cpu wait 1.00 vs 0.50)"]  # no 1 / 0
    assert cpu(5.0, 1.0) == [] and cpu(5.0, 0.1) == [
        "BASE contended (cpu wait 5.00 vs 0.10)"
    ]  # a shard's word
    assert differences(QUIET, dataclasses.replace(QUIET, cpu_wait_share=None)) == []  # unknown never differs
    assert differences(QUIET, dataclasses.replace(QUIET, hosts=("n2",))) == ["nodes differ (BASE n1, NEW n2)"]
    assert differences(QUIET, dataclasses.replace(QUIET, hosts=())) == []
    assert differences(_gpu(1980), _gpu(1890)) == []  # 4.8% apart
    assert differences(_gpu(1980), _gpu(1860)) == ["NEW SM clock lower (1860 vs 1980 MHz)"]
    assert differences(_gpu(1700), _gpu(1980)) == ["BASE SM clock lower (1700 vs 1980 MHz)"]
    assert differences(_gpu(1980), _gpu(1980, memory=2600)) == ["NEW memory clock lower (2600 vs 3201 MHz)"]
    assert differences(_gpu(1980), _gpu(1980, throttled=0.2)) == []
    assert differences(_gpu(1980), _gpu(1980, throttled=0.3)) == [
        "NEW throttled (sw_power_cap: 30% of samples vs 0%)"
    ]
    assert differences(_gpu(1980, processes=3), _gpu(1980)) == [
        "BASE GPU shared (3 compute processes at once)"
    ]
    assert differences(_gpu(1980, processes=None), _gpu(1980, processes=3)) == []
    assert differences(QUIET, _gpu(1980)) == []  # clocks known on one side only: not compared
    assert clock_ratio(_gpu(2000), _gpu(1500)) == 0.75 and clock_ratio(QUIET, _gpu(1500)) is None
    usual = typical([dataclasses.replace(QUIET, cpu_wait_share=w) for w in (0.01, 0.02, 0.6)])
    assert usual.cpu_wait_share == 0.02 and usual.hosts == ("n1",)


def _with(dataset: Path, execution_id: str, factor: float = 1.0, **meta_changes) -> None:
    """Rewrite an execution's shard: windows x ``factor``, metadata fields replaced (JSON paths)."""
    for path in Dataset(dataset).shard_dir(execution_id).glob("*.parquet"):
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[METADATA_KEY])
        for key, value in meta_changes.items():
            meta[key] = value if not isinstance(meta.get(key), dict) else meta[key] | value
        column = table.schema.get_field_index("window_ms")
        scaled = pa.array(table.column(column).to_numpy() * factor)
        table = table.set_column(column, table.schema.field(column), scaled)
        pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)


def _gpus(sm: float, ranks: int = 2) -> dict[str, object]:
    gpus = [
        dataclasses.asdict(
            GpuConditions("node0", r, r, "NVIDIA H200", 40, sm, 3201.0, 1980.0, 3201.0, (), 0.0, 1)
        )
        for r in range(ranks)
    ]
    return {"gpus": gpus, "unknown": None}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(41)
    folder = tmp_path_factory.mktemp("base")
    for e in SUBSET:
        write_table(folder, shard_table(e, 1, rng, ranks=2, windows=25, device="NVIDIA H200", job_id="1_1"))
    for e in SUBSET:
        _with(folder, e.execution_id, conditions=_gpus(1980.0))
    return folder


def _copy(base: Path, to: Path) -> Path:
    shutil.copytree(base, to)
    return to


def test_a_contended_side_is_inconclusive_and_an_equal_one_still_slower(base, tmp_path, capsys) -> None:
    new = _copy(base, tmp_path / "new")
    contended, changed = SUBSET[2].execution_id, SUBSET[7].execution_id
    _with(new, contended, 1.8, contention={"cpu_wait_share": 0.6, "oversubscribed": True})
    _with(new, changed, 1.8)
    document = compare(load(base), load(new), 0.05)
    for t in document["times"]:
        if t["execution_id"] == contended:
            assert t["change"] == "inconclusive" and t["measured"] == "slower"
            assert t["conditions"] == "NEW contended (cpu wait 0.60 vs 0.01)"
        elif t["execution_id"] == changed:
            assert t["change"] == "slower" and t["conditions"] is None
        else:
            assert t["change"] == "unchanged" and t["measured"] == "unchanged"
    counts = document["counts"]
    assert counts["inconclusive"] == sum(t["execution_id"] == contended for t in document["times"])
    assert document["conditions"]["differ"] == 1 and document["conditions"]["unknown"] == {
        "base": 0,
        "new": 0,
    }
    assert document["conditions"]["executions"][contended]["differ"] == [
        "NEW contended (cpu wait 0.60 vs 0.01)"
    ]
    inconclusive_speedups = [s for s in document["speedups"] if s["change"] == "inconclusive"]
    assert inconclusive_speedups and all(contended in s["conditions"] for s in inconclusive_speedups)
    # text and exit status: the contended execution alone is exit 0, with --strict 1
    only_contended = _copy(base, tmp_path / "contended")
    _with(only_contended, contended, 1.8, contention={"cpu_wait_share": 0.6, "oversubscribed": True})
    assert main([str(base), str(only_contended), "--out", str(tmp_path / "page")]) == 0
    out = capsys.readouterr().out
    assert f"inconclusive iterationMS {contended}" in out
    assert "measured slower; NEW contended (cpu wait 0.60 vs 0.01)" in out
    assert "measuring conditions: 1 of 10 executions differ beyond the bounds" in out
    page = (tmp_path / "page" / "comparison.html").read_text()
    assert "NEW contended (cpu wait 0.60 vs 0.01)" in page and "Measuring conditions" in page
    assert main([str(base), str(only_contended), "--strict"]) == 1
    assert main([str(base), str(new)]) == 1  # the change under equal conditions


def test_other_clocks_are_inconclusive_and_say_the_ratio_at_equal_clocks(base, tmp_path, capsys) -> None:
    new = _copy(base, tmp_path / "new")
    slow = SUBSET[4].execution_id
    _with(new, slow, 1980 / 1500, conditions=_gpus(1500.0))
    document = compare(load(base), load(new), 0.05)
    for t in document["times"]:
        if t["execution_id"] == slow:
            assert (
                t["change"] == "inconclusive" and t["conditions"] == "NEW SM clock lower (1500 vs 1980 MHz)"
            )
            assert t["clock_ratio"] == pytest.approx(1500 / 1980, rel=1e-12)
            # the time ratio in clock cycles: x1.32 in time, x1.0 at equal clocks
            assert t["normalized_ratio"] == pytest.approx(t["new"] / t["base"] * 1500 / 1980, rel=1e-12)
            assert t["normalized_ratio"] == pytest.approx(1.0, rel=1e-9)
        else:
            assert t["clock_ratio"] == 1.0 and t["change"] == "unchanged"
    assert main([str(base), str(new)]) == 0
    out = capsys.readouterr().out
    assert "(x1.000 at equal SM clocks: NEW's clock x0.758)" in out


def test_a_run_to_run_estimate_of_few_executions_never_reads_as_zero(base, tmp_path, capsys) -> None:
    """A copy: every ratio exactly 1, so the estimate is 0; it rests on 10 executions, and the line
    says so with how large it may be; fewer than 8 times have no estimate, not a zero one."""
    new = _copy(base, tmp_path / "new")
    _with(new, SUBSET[0].execution_id, 1.5)
    assert main([str(base), str(new)]) == 1
    out = capsys.readouterr().out
    (stratum,) = compare(load(base), load(new), 0.05)["noise"]
    assert stratum["between_sigma"] == 0.0 and stratum["few"] and stratum["executions"] == 10
    upper = stratum["between_upper"]
    assert upper > 0 and f"it may be as large as {upper:.3f}" in out and "too few (under 20)" in out
    assert f"runs 0.000, up to {upper:.3f} (few executions)" in out
    small_base, small_new = tmp_path / "small-base", tmp_path / "small-new"
    for folder, source in ((small_base, base), (small_new, new)):
        for e in SUBSET[:2]:  # 4 times
            shutil.copytree(
                Dataset(source).shard_dir(e.execution_id), Dataset(folder).shard_dir(e.execution_id)
            )
    assert main([str(small_base), str(small_new)]) == 1
    out = capsys.readouterr().out
    assert "no run-to-run estimate (fewer than 8 times)" in out and "runs no estimate" in out
    assert "runs 0.000" not in out and not math.isnan(0.0)


@pytest.mark.slow
def test_any_finite_value_a_shard_records_is_bounded_before_arithmetic(base, tmp_path, capsys) -> None:
    """A GPU clock of 1e308 MHz on one side and 5e-324 on the other (and wait shares as absurd): before,
    compare's text died with ``math domain error``; now such a value is no measurement (unknown), and
    compare (text, JSON, page) and history read both sides to the end."""
    huge, tiny = _copy(base, tmp_path / "huge"), _copy(base, tmp_path / "tiny")
    for folder, value in ((huge, 1e308), (tiny, 5e-324)):
        for e in SUBSET:
            _with(folder, e.execution_id, conditions=_gpus(value), contention={"cpu_wait_share": value})
    assert Measured.of(_shard(huge)).sm_clock_mhz is None and Measured.of(_shard(tiny)).sm_clock_mhz is None
    for arguments in (
        [huge, tiny],
        [tiny, huge],
        [tiny, huge, "--json"],
        [huge, tiny, "--out", tmp_path / "page"],
    ):
        assert main([str(a) for a in arguments]) == 0
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
    document = compare(load(huge), load(tiny), 0.05)
    assert all(t["clock_ratio"] is None and t["change"] == "unchanged" for t in document["times"])
    from pipeline.tools.history.cli import main as history

    assert history([str(base), str(huge), str(tiny), "--out", str(tmp_path / "history")]) == 0
    assert "Traceback" not in "".join(capsys.readouterr())


def _shard(folder: Path):
    from pipeline.data.reader import read_shard

    return read_shard(next(folder.glob("shards/*/*.parquet")))
