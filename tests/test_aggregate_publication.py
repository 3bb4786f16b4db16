"""Publication as one set: a write that fails anywhere (a real full tmpfs, an injected ENOSPC or I/O
error at each call of each system function publication makes) leaves the previous publication
byte-identical and ends in one line with exit 1; a dataset that cannot be written is refused in one
line with exit 2 before anything is written; what is published names no absolute path."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.commands.aggregate import main
from pipeline.data.dataset import Dataset
from pipeline.matrix import EXECUTIONS
from pipeline.report import CSV_NAME, JSON_NAME, build
from pipeline.report.figures import figure_files
from pipeline.report.page import REPORT_NAME
from pipeline.report.publication import MANIFEST_NAME
from pipeline.tools.synthetic_shards import shard_table, write_table

FIVE = [e for e in EXECUTIONS if e.workload.name == "inference-ep8-f1536"]  # 5 executions, EP8
SIXTH = next(e for e in EXECUTIONS if e.execution_id == "inference-ep16-f1536-bf16-mok-native")  # EP16
ROOT = Path(__file__).resolve().parents[1]
# Unprivileged: root keeps its uid but loses the capabilities that let it ignore mode bits.
DROP_DAC = [
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
]


def _five(dataset: Path) -> None:
    rng = np.random.default_rng(5)
    for e in FIVE:
        write_table(dataset, shard_table(e, 1, rng, ranks=2))


def _add_sixth(dataset: Path) -> None:
    write_table(dataset, shard_table(SIXTH, 1, np.random.default_rng(6), ranks=2))


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None) under ``folder``, by relative path."""
    return {
        p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


def _manifest_problems(folder: Path) -> list[str]:
    """What ``sha256sum -c`` would fail in ``folder``: files missing or not as its manifest says."""
    problems = []
    for line in (folder / MANIFEST_NAME).read_text().splitlines():
        digest, name = line.split("  ", 1)
        path = folder / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(name)
    return problems


def _executions_everywhere(folder: Path) -> set[int]:
    """How many executions the CSV, the JSON and the page each say were published."""
    document = json.loads((folder / JSON_NAME).read_text())
    said = re.search(r"<p>([0-9]+) executions, ", (folder / REPORT_NAME).read_text())
    assert said is not None
    return {
        len((folder / CSV_NAME).read_text().splitlines()) - 1,
        document["meta"]["counts"]["executions"],
        len(document["executions"]),
        int(said.group(1)),
    }


def _run(*arguments: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m pipeline.aggregate`` as a shell runs it."""
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "pipeline.aggregate", *arguments],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts a fresh tmpfs of the given size (``4m``) under ``tmp_path``; skips where mounting is not
    permitted (not root, or no CAP_SYS_ADMIN in this container)."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"tmpfs{len(mounted)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


def _unprivileged() -> list[str]:
    """The command prefix under which mode bits hold: none for a user; for root, setpriv without the
    capabilities that override them (skips where that cannot be done)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root, and setpriv (util-linux) is missing: mode bits cannot be made to hold")
    trial = subprocess.run([*DROP_DAC, "true"], capture_output=True, text=True)
    if trial.returncode != 0:
        pytest.skip(
            f"running as root without CAP_SETPCAP, so mode bits cannot be made to hold: {trial.stderr}"
        )
    return DROP_DAC


# A full disk, for real -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_full_tmpfs_leaves_the_previous_publication_byte_identical(tmpfs) -> None:
    disk = tmpfs("4m")
    dataset = disk / "dataset"
    _five(dataset)
    first = _run(str(dataset))
    assert first.returncode == 0, first.stderr
    _add_sixth(dataset)
    before = _tree(dataset)
    assert {CSV_NAME, REPORT_NAME, MANIFEST_NAME, "mok-comparison-ep8.png"} <= set(before)
    filler = disk / "filler"  # fill the disk, then give back 64 KiB: the first figure fits, not all
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)
    os.truncate(filler, filler.stat().st_size - 65536)

    failed = _run(str(dataset))

    line = _one_line(failed.stderr)
    assert failed.returncode == 1 and failed.stdout == ""
    assert line.startswith(
        f"pipeline.aggregate: cannot publish into {str(dataset)!r}: No space left on device"
    )
    assert line.endswith("the previous publication is unchanged")
    assert _tree(dataset) == before  # every file's bytes, and no staging folder left
    assert _manifest_problems(dataset) == []
    filler.unlink()
    again = _run(str(dataset))
    assert again.returncode == 0, again.stderr
    assert _manifest_problems(dataset) == [] and "mok-comparison-ep16.png" in os.listdir(dataset)
    assert _executions_everywhere(dataset) == {6}


# Injected faults at every call ---------------------------------------------------------------------


class _Fault:
    """Replaces ``os.<name>``: its k-th call that concerns ``folder`` (a path in it, a file descriptor
    of a file in it) raises OSError(code); the others run. ``os.open`` counts only when it creates."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, folder: Path, name: str, code: int, k: int) -> None:
        self.real: Callable[..., Any] = getattr(os, name)
        self.folder, self.name, self.code, self.k, self.calls = str(folder), name, code, k, 0
        monkeypatch.setattr(os, name, self)

    def _concerns(self, args: tuple[Any, ...]) -> bool:
        if self.name == "open" and not args[1] & os.O_CREAT:
            return False
        for arg in args[:2] if self.name in ("replace", "link") else args[:1]:
            if isinstance(arg, int):
                try:
                    arg = os.readlink(f"/proc/self/fd/{arg}")
                except OSError:
                    continue
            if isinstance(arg, str | os.PathLike):
                path = os.path.abspath(arg)
                if Path(path).name.startswith(".write-probe-"):
                    return False  # the up-front check's probe, not the publication
                if path == self.folder or path.startswith(self.folder + os.sep):
                    return True
        return False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._concerns(args):
            self.calls += 1
            if self.calls == self.k:
                raise OSError(
                    self.code, os.strerror(self.code), *[a for a in args[:1] if not isinstance(a, int)]
                )
        return self.real(*args, **kwargs)


def _fault(name: str, code: int, change: str, slow: bool = False) -> object:
    """A fault's parameters; ``slow``: a few seconds (its publication draws figures once)."""
    return pytest.param(name, code, change, id=f"{name}-{change}", marks=[pytest.mark.slow] if slow else [])


FAULTS = [
    _fault("open", errno.ENOSPC, "sixth", slow=True),
    _fault("write", errno.ENOSPC, "sixth", slow=True),
    _fault("fsync", errno.ENOSPC, "sixth", slow=True),
    _fault("mkdir", errno.ENOSPC, "sixth"),
    _fault("link", errno.ENOSPC, "sixth", slow=True),
    _fault("replace", errno.EIO, "sixth", slow=True),
    _fault("replace", errno.EIO, "no figures"),
    _fault("unlink", errno.EIO, "no figures"),
]


@pytest.fixture(scope="module")
def drawings() -> dict[str, dict[str, bytes]]:
    """The figures drawn so far in this module, by what they were drawn from."""
    return {}


@pytest.fixture
def drawn_once(monkeypatch: pytest.MonkeyPatch, drawings: dict[str, dict[str, bytes]]) -> None:
    """The figures of the same rows drawn once and published by every attempt, of every test, that
    asks for them: drawing is nearly all of an attempt's time (matplotlib, about 4 s of 4.4), and the
    faults are in the writes, which every attempt still makes."""

    def once(rows: Any, pairs: Any, states: Any, *, paired: bool = True) -> dict[str, bytes]:
        key = json.dumps([rows, pairs, [repr(s) for s in states], paired], sort_keys=True, default=repr)
        if key not in drawings:
            drawings[key] = figure_files(rows, pairs, states, paired=paired)
        return drawings[key]

    monkeypatch.setattr(build, "figure_files", once)


@pytest.mark.parametrize(("name", "code", "change"), FAULTS)
def test_a_fault_at_any_call_leaves_the_previous_publication_byte_identical(
    drawn_once: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    code: int,
    change: str,
) -> None:
    """For k = 1, 2, ...: the k-th call fails, until k passes the last call and the publication is
    made. ``sixth``: a new execution (a new figure); ``no figures``: the figures and page go."""
    dataset = tmp_path / "dataset"
    _five(dataset)
    assert main([str(dataset)]) == 0
    arguments = [str(dataset)]
    if change == "sixth":
        _add_sixth(dataset)
    else:
        arguments.append("--no-figures")
    before = _tree(dataset)
    capsys.readouterr()
    for k in range(1, 100):
        with monkeypatch.context() as patch:
            fault = _Fault(patch, dataset, name, code, k)
            status = main(arguments)
        out, err = capsys.readouterr()
        if fault.calls < k:  # no call failed: published
            break
        line = _one_line(err)
        assert status == 1 and out == "", (k, status, out, err)
        assert line.startswith(
            f"pipeline.aggregate: cannot publish into {str(dataset)!r}: {os.strerror(code)}"
        )
        assert line.endswith("the previous publication is unchanged"), line
        assert _tree(dataset) == before, k
    assert k > 1, f"os.{name} was never called on the dataset's folder: the fault was not exercised"
    assert status == 0 and _manifest_problems(dataset) == []
    names = set(os.listdir(dataset))
    if change == "sixth":
        assert "mok-comparison-ep16.png" in names and _executions_everywhere(dataset) == {6}
    else:
        assert not {REPORT_NAME, "mok-comparison-ep8.png"} & names  # an earlier page would not match
    assert not [n for n in names if n.startswith(".")]


def test_a_commit_that_cannot_be_undone_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every rename from the JSON's on fails: the commit stops after the figures and the CSVs, and
    putting the previous files back (renames too) fails; the line says that the folder may mix the
    two and how to tell."""
    dataset = tmp_path / "dataset"
    _five(dataset)
    assert main([str(dataset)]) == 0
    _add_sixth(dataset)
    capsys.readouterr()
    real = os.replace
    failing = []

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        if os.path.basename(dst) == JSON_NAME:
            failing.append(dst)
        if failing and str(dataset) in os.path.abspath(dst):
            raise OSError(errno.EIO, os.strerror(errno.EIO), src)
        real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    assert main([str(dataset)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "Input/output error" in line and "may mix the two publications" in line
    assert f"sha256sum -c {MANIFEST_NAME}" in line
    monkeypatch.undo()
    assert CSV_NAME in _manifest_problems(dataset)  # six rows now, five in the manifest's


def test_a_crash_during_the_commit_leaves_the_previous_manifest_which_names_what_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash (simulated: an exception nothing catches, at the JSON's rename, after the figures and
    the CSVs) leaves each file whole and the manifest the previous one, which tells the files that
    changed; the next run publishes the whole set."""

    class Crash(BaseException):
        pass

    dataset = tmp_path / "dataset"
    _five(dataset)
    assert main([str(dataset)]) == 0
    previous_manifest = (dataset / MANIFEST_NAME).read_bytes()
    _add_sixth(dataset)
    real = os.replace
    calls = []

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        calls.append(dst)
        if os.path.basename(dst) == JSON_NAME:
            raise Crash
        real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Crash):
        main([str(dataset)])
    monkeypatch.undo()
    assert (dataset / MANIFEST_NAME).read_bytes() == previous_manifest
    torn = _manifest_problems(dataset)
    assert CSV_NAME in torn and JSON_NAME not in torn and REPORT_NAME not in torn
    assert main([str(dataset)]) == 0 and _manifest_problems(dataset) == []


def test_no_figures_publishes_a_set_without_the_earlier_page(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    _five(dataset)
    assert main([str(dataset)]) == 0
    assert main([str(dataset), "--no-figures"]) == 0
    published = sorted(n for n in os.listdir(dataset) if n != "shards")
    assert published == sorted([CSV_NAME, JSON_NAME, "mok-comparison-pairs.csv", MANIFEST_NAME])
    assert _manifest_problems(dataset) == []


# A dataset that cannot be written --------------------------------------------------------------------


def test_a_read_only_mounted_dataset_is_refused_in_one_line_without_out(tmpfs, tmp_path: Path) -> None:
    disk = tmpfs("8m")
    _five(disk)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
    assert remount.returncode == 0, remount.stderr
    before = _tree(disk)
    done = _run(str(disk))
    line = _one_line(done.stderr)
    assert done.returncode == 2 and done.stdout == ""
    assert line.startswith(f"pipeline.aggregate: dataset {str(disk)!r} cannot be written here")
    assert "(Read-only file system)" in line
    assert line.endswith("the files are published into the dataset unless --out names another folder")
    assert _tree(disk) == before
    elsewhere = _run(str(disk), "--out", str(tmp_path / "out"), "--no-figures")
    assert elsewhere.returncode == 0, elsewhere.stderr  # a read-only dataset publishes elsewhere


def test_a_dataset_without_write_permission_is_refused_in_one_line(tmp_path: Path) -> None:
    prefix = _unprivileged()
    dataset = tmp_path / "dataset"
    _five(dataset)
    dataset.chmod(0o555)
    try:
        before = _tree(dataset)
        done = _run(str(dataset), prefix=prefix)
        line = _one_line(done.stderr)
        assert done.returncode == 2 and done.stdout == ""
        assert line.startswith(f"pipeline.aggregate: dataset {str(dataset)!r} cannot be written here")
        assert "(Permission denied)" in line and "--out" in line
        assert _tree(dataset) == before
    finally:
        dataset.chmod(0o755)


# Dataset-relative paths only ---------------------------------------------------------------------


def test_a_skipped_shard_names_no_absolute_path_in_anything_published(tmp_path: Path) -> None:
    """A shard this process may not read: the reader's reason quotes the file as it was opened, by
    its absolute path; everything published names it relative to the dataset."""
    prefix = _unprivileged()
    dataset = tmp_path / "dataset"
    _five(dataset)
    unreadable = Dataset(dataset).shard_path(FIVE[0].execution_id, 2)
    shutil.copy(Dataset(dataset).shard_path(FIVE[0].execution_id, 1), unreadable)
    unreadable.chmod(0)
    done = _run(str(dataset), prefix=prefix)
    assert done.returncode == 0, done.stderr  # the execution has a row: attempt 1
    relative = f"shards/execution={FIVE[0].execution_id}/attempt-2.parquet"
    page = (dataset / REPORT_NAME).read_text()
    assert f"<td>{relative}</td>" in page and "Permission denied" in page
    for name in os.listdir(dataset):
        if (dataset / name).is_file():
            text = (dataset / name).read_bytes().decode("utf-8", "replace")
            for absolute in {str(tmp_path), os.path.realpath(tmp_path)}:
                assert absolute not in text, name
    assert f"'{relative}'" in (dataset / JSON_NAME).read_text()  # the reason's own quote, relative


def test_dataset_relative_withholds_what_lies_outside() -> None:
    from pipeline.report.build import OUTSIDE, dataset_relative

    folder = Dataset("/data/run")
    assert dataset_relative("open '/data/run/shards/x/a.parquet' failed", folder) == (
        "open 'shards/x/a.parquet' failed"
    )
    assert dataset_relative("/data/run is empty", folder) == ". is empty"
    assert dataset_relative("see /data/run2/x and /etc/passwd", folder) == f"see {OUTSIDE} and {OUTSIDE}"
    assert dataset_relative("ms / iteration, 1/2, bf16/mxfp8", folder) == "ms / iteration, 1/2, bf16/mxfp8"
