"""Strings from a dataset reach a terminal or a page with their control characters written out:
compare's text (stdout and stderr, as a shell sees them), aggregate's lines, both HTML pages."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from pipeline.base.printable import printable
from pipeline.commands.aggregate import main as aggregate_main
from pipeline.data.dataset import Dataset
from pipeline.matrix import EXECUTIONS
from pipeline.report.page import REPORT_NAME
from pipeline.tools.synthetic_shards import shard_table, write_table

FIVE = [e for e in EXECUTIONS if e.workload.name == "inference-ep8-f1536"]
# Clears the screen, retitles the window, rings the bell, returns to the line's start to overwrite it;
# and a figure title's mathematics that does not parse.
DEVICE = "NVIDIA H200 $x^{$\x1b[2J\x1b]0;owned\x07\rfake"
DEVICE_SHOWN = "NVIDIA H200 $x^{$\\x1b[2J\\x1b]0;owned\\x07\\x0dfake"
EXECUTION = f"{FIVE[0].execution_id}\x1b[31m\r\x9b"  # a shard folder named with ESC, CR and C1's CSI
EXECUTION_SHOWN = f"{FIVE[0].execution_id}\\x1b[31m\\x0d\\x9b"
ROOT = Path(__file__).resolve().parents[1]
# Any control character but the line feeds that end lines.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """BASE on an honest device; NEW on a device named with escape sequences, plus a shard folder
    whose name (its execution id) holds ESC, CR and a C1 control."""
    rng = np.random.default_rng(4)
    base, new = tmp_path_factory.mktemp("base"), tmp_path_factory.mktemp("new")
    for e in FIVE:
        write_table(base, shard_table(e, 1, rng, ranks=2, device="NVIDIA H200"))
        write_table(new, shard_table(e, 1, rng, ranks=2, device=DEVICE))
    folder = Dataset(new).shards_dir / f"execution={EXECUTION}"
    folder.mkdir()
    shutil.copy(Dataset(new).shard_path(FIVE[0].execution_id, 1), folder / "attempt-1.parquet")
    return base, new


def test_printable_writes_out_every_control_character() -> None:
    assert printable("a\x1b[31mb\rc\x07d\x00e\x7ff\x9bg\nh\ti") == (
        "a\\x1b[31mb\\x0dc\\x07d\\x00e\\x7ff\\x9bg\\x0ah\\x09i"
    )
    assert printable("x\u202ey\u2028z\udcff") == "x\\u202ey\\u2028z\\udcff"
    assert printable("H200 é µ / ms ≥ 1 \\ ok") == "H200 é µ / ms ≥ 1 \\ ok"
    assert printable(12) == "12"
    assert all(not RAW.search(printable(chr(c))) for c in range(0x3000))


def test_compare_text_shows_a_device_and_an_execution_id_neutralised(datasets, tmp_path: Path) -> None:
    base, new = datasets
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.compare", str(base), str(new), "--out", str(tmp_path)],
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode in (0, 1), err
    assert not RAW.search(out) and not RAW.search(err), (out, err)
    assert f"settings differ: device: NVIDIA H200 -> {DEVICE_SHOWN}" in out.splitlines()
    (skipped,) = [line for line in err.splitlines() if line.startswith("skipped (new)")]
    assert f"shards/execution={EXECUTION_SHOWN}/attempt-1.parquet" in skipped
    page = (tmp_path / "comparison.html").read_text()
    assert not RAW.search(page) and DEVICE_SHOWN in page


def test_aggregate_lines_page_and_figures_show_them_neutralised(
    datasets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, new = datasets
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        aggregate_main([str(new), "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert not [w for w in caught if "Glyph" in str(w.message)]  # the figure's title drew no control
    assert not RAW.search(out) and not RAW.search(err), (out, err)
    assert f"skipped shards/execution={EXECUTION_SHOWN}/attempt-1.parquet: " in err
    page = (tmp_path / REPORT_NAME).read_text()
    assert not RAW.search(page)
    assert f"{DEVICE_SHOWN} ({len(FIVE)})" in page  # what ran: the device and its executions
    assert os.path.isfile(tmp_path / "mok-comparison.csv")
