"""A dataset is untrusted input: reading it never runs what it holds, and no path or name read from it
leads outside it. A real sweep's dataset is tampered with as a hostile copy would be (a crafted
pickle wherever submitit keeps one and where a record points, records naming paths and ids that lead
out, a truncated record) and every command that only reads it is run on it. Then the writers: every
command, those that write included, on twelve crafted copies whose claims, heartbeats and folders
are forged, special or lead out (docs/reliability.md)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.commands.cli import main as cli_main
from pipeline.data import claims, ledger
from pipeline.data.dataset import Dataset
from tests.sweeps import run_sweep

# one rank: what is under test is the dataset, read and written; the two ranks of the scale add only
# their processes to every execution a command runs
SWEEP = ("workload=inference-ep8-f1536", "variant=mok-bf16,dist-moe-bf16", "scale=ci", "max_ranks=1")
MOK = "inference-ep8-f1536-bf16-mok-native"


class Payload:
    """Unpickling this runs ``os.system``: it leaves a marker file where it ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *arguments], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A real two-execution sweep, done."""
    dataset = tmp_path_factory.mktemp("swept") / "dataset"
    done = run_sweep(dataset, *SWEEP)
    assert done.returncode == 0, done.stderr[-2000:]
    return dataset


@pytest.fixture
def hostile(swept: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the sweep with one shard removed, a crafted pickle at every ``*.pkl`` of it and where
    submitit would keep a result, and a ledger record whose log folder leads out of it to another
    crafted pickle: the dataset and the marker that any unpickling would create."""
    dataset, marker = tmp_path / "copy", tmp_path / "code-ran"
    subprocess.run(["cp", "-a", str(swept), str(dataset)], check=True)
    for shard in (dataset / "shards" / f"execution={MOK}").glob("*.parquet"):
        shard.unlink()
    crafted = pickle.dumps(("success", Payload(marker)))
    pickles = list(dataset.rglob("*.pkl"))
    assert pickles  # submitit's own files of the sweep
    for path in pickles:
        path.write_bytes(crafted)
    submitted = [r for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Submitted)]
    for r in submitted:
        folder = Dataset(dataset).log_dir(r.execution_id, r.attempt)
        (folder / f"{r.job_id}_0_result.pkl").write_bytes(crafted)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{submitted[0].job_id}_0_result.pkl").write_bytes(crafted)
    record = {**submitted[0].to_json(), "attempt": 2, "log_dir": "../../../outside"}
    (dataset / "ledger" / "99999999999999999999-evil-000000.json").write_text(json.dumps(record))
    return dataset, marker


@pytest.mark.slow
def test_reading_a_hostile_copy_runs_none_of_its_code(hostile: tuple[Path, Path]):
    dataset, marker = hostile
    status = cli("pipeline.status", str(dataset))
    assert status.returncode == 1, status.stderr  # the removed execution counts as failed or missing
    assert MOK in status.stdout and "Traceback" not in status.stderr
    dry = cli("pipeline.resubmit", str(dataset), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would resubmit {MOK}" in dry.stdout
    assert not marker.exists(), "a command that only reads the dataset ran code from it"


def test_paths_from_a_dataset_stay_inside_it(tmp_path: Path):
    root = tmp_path / "dataset"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "link").symlink_to(tmp_path)
    dataset = Dataset(root)
    assert dataset.locate("logs/x") == root / "logs" / "x"
    for recorded, why in (
        ("../../etc", "leaves the dataset"),
        ("logs/../../x", "leaves the dataset"),
        ("/etc/passwd", "leaves the dataset"),
        ("logs/link/secret", "links out of the dataset"),
    ):
        with pytest.raises(ValueError, match=why):
            dataset.locate(recorded)
    for name in ("../x", "a/b", ".hidden", "x" * 300, "", "a\nb"):
        with pytest.raises(ValueError, match="is not a plain name"):
            dataset.log_dir(name, 1)


@pytest.mark.slow
def test_a_record_naming_a_path_as_an_execution_or_a_job_is_no_record(swept: Path, tmp_path: Path):
    """Ids become paths (log folders, claims) and scheduler arguments: a record whose execution id
    or job id is not a plain one is unreadable, named, and the rest of the ledger still counts; so is
    a truncated record."""
    dataset = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(swept), str(dataset)], check=True)
    submitted = next(r for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Submitted))
    bad = {
        "00000000000000000001-a-000000.json": {**submitted.to_json(), "execution_id": "../../x"},
        "00000000000000000002-b-000000.json": {**submitted.to_json(), "job_id": "--help"},
    }
    for name, record in bad.items():
        (dataset / "ledger" / name).write_text(json.dumps(record))
    (dataset / "ledger" / "00000000000000000003-c-000000.json").write_text('{"event": "fin')
    os.mkfifo(dataset / "ledger" / "00000000000000000004-d-000000.json")
    records, unreadable = ledger.survey(Dataset(dataset))
    assert len(records) == len(ledger.read(Dataset(swept)))
    reasons = dict(unreadable)
    assert "is not a plain name" in reasons["ledger/00000000000000000001-a-000000.json"]
    assert "is not a scheduler's" in reasons["ledger/00000000000000000002-b-000000.json"]
    assert "not a ledger record" in reasons["ledger/00000000000000000003-c-000000.json"]
    assert reasons["ledger/00000000000000000004-d-000000.json"] == "not a regular file"
    status = cli("pipeline.status", str(dataset))
    assert status.returncode == 0, status.stderr
    assert "2 done" in status.stdout
    for name in (*bad, "00000000000000000003-c-000000.json", "00000000000000000004-d-000000.json"):
        assert f"skipped ledger/{name}: " in status.stderr


# Crafted copies of the sweep, each as the attack of one row of docs/reliability.md left it: the MoK
# execution's shard is gone (so it is to be run again) and the attack sits on it; the Dist-MoE
# execution is done and must stay as it is.
DIST = "inference-ep8-f1536-bf16-dist-moe-bf16"
ELSEWHERE = {"sweep": "1-elsewhere-7", "host": "elsewhere", "pid": 7, "started": 1, "boot": "b"}


def _claim(dataset: Path, attempt: int, owner: dict[str, object], beat: str | None = None) -> None:
    path = dataset / "claims" / MOK / f"attempt-{attempt}.json"
    path.write_text(json.dumps({"execution_id": MOK, "attempt": attempt, "owner": owner, "at": 1.0}))
    if beat == "fifo":
        os.mkfifo(dataset / "claims" / ".owners" / f"{owner['sweep']}.json")
    elif beat is not None:
        (dataset / "claims" / ".owners" / f"{owner['sweep']}.json").write_text(beat)


def _replace(path: Path, by: str, outside: Path) -> None:
    """``path`` (a folder of the layout) replaced by a link out (``by="link"``) or a file."""
    subprocess.run(["rm", "-rf", str(path)], check=True)
    if by == "link":
        path.symlink_to(outside, target_is_directory=True)
    else:
        path.write_text("in the way\n")


def _blocked(dataset: Path, outside: Path) -> None:
    """The sweep that claimed attempt 1 still lives (this process) while its job ended without a
    result: status calls the execution failed, and resubmit finds it claimed."""
    me = claims.Owner.this_process()
    _claim(dataset, 1, me.__dict__, json.dumps({"at": time.time()}))
    for path in (dataset / "ledger").iterdir():
        record = json.loads(path.read_text())
        if (record["event"], record.get("execution_id")) == ("finished", MOK):
            path.unlink()


CRAFTED: dict[str, tuple[Callable[[Path, Path], None], bool]] = {
    # name: (the attack, whether resubmit is then to run the execution again)
    "owner's heartbeat dated 1e300": (lambda d, o: _claim(d, 2, ELSEWHERE, '{"at": 1e300}'), True),
    "owner's heartbeat Infinity": (lambda d, o: _claim(d, 2, ELSEWHERE, '{"at": Infinity}'), True),
    "owner's heartbeat a FIFO": (lambda d, o: _claim(d, 2, ELSEWHERE, "fifo"), True),
    "owner's host with escapes, sweep ../": (
        lambda d, o: (
            _claim(d, 2, {**ELSEWHERE, "host": "\x1b]0;owned\x07x"}),
            _claim(d, 3, {**ELSEWHERE, "sweep": "../../../outside"}),
        ),
        True,
    ),
    "claims/<id>/attempt-99999999999999999999.json": (
        lambda d, o: (d / "claims" / MOK / "attempt-99999999999999999999.json").write_text(""),
        True,
    ),
    "claims/<id> a file": (lambda d, o: _replace(d / "claims" / MOK, "file", o), False),
    "logs/<id> a file": (lambda d, o: _replace(d / "logs" / MOK, "file", o), False),
    "shards/execution=<id> a link out": (
        lambda d, o: _replace(d / "shards" / f"execution={MOK}", "link", o),
        False,
    ),
    "claims/<id> a link out": (lambda d, o: _replace(d / "claims" / MOK, "link", o), False),
    "logs/<id> a link out": (lambda d, o: _replace(d / "logs" / MOK, "link", o), False),
    "claims/.owners a file": (lambda d, o: _replace(d / "claims" / ".owners", "file", o), False),
    "a live claim on what status calls failed": (_blocked, False),
}


def _tree(root: Path, leave_out: Path | None = None) -> dict[str, object]:
    """Every path under ``root`` (not under ``leave_out``) with what it is: a link's target, a file's
    size and modification time."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        if leave_out is not None and (path == leave_out or leave_out in path.parents):
            continue
        info = path.lstat()
        found[str(path)] = (
            os.readlink(path) if path.is_symlink() else (info.st_mode, info.st_size, info.st_mtime_ns)
        )
    return found


def _untouched(dataset: Path) -> dict[str, object]:
    """What the done execution has: its shard's bytes, its claims, its log link, its ledger records."""
    seen: dict[str, object] = {}
    for folder in (dataset / "shards" / f"execution={DIST}", dataset / "claims" / DIST):
        seen |= {str(p): p.read_bytes() for p in sorted(folder.iterdir())}
    seen["logs"] = os.readlink(dataset / "logs" / DIST / "attempt-1")
    seen["ledger"] = sorted(
        r.to_json().__repr__()
        for r in ledger.read(Dataset(dataset))
        if getattr(r, "execution_id", "") == DIST
    )
    return seen


def _command(arguments: list[str], capsys) -> tuple[int, float, list[str], str]:
    """One command in this process (as ``moe-bench`` runs it), stopped by an alarm after 20 s: its
    exit status, its seconds, its stderr lines other than the files it names as skipped, and its
    output."""

    def late(*_: object) -> None:
        raise TimeoutError(f"{' '.join(arguments[:2])} still running after 20 s")

    previous = signal.signal(signal.SIGALRM, late)
    began = time.monotonic()
    signal.alarm(20)
    try:
        status = cli_main(arguments)
    except SystemExit as end:
        status = end.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.monotonic() - began
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    errors = [line for line in err.splitlines() if not line.startswith("skipped ")]
    return int(status or 0), seconds, errors, out


@pytest.mark.slow
@pytest.mark.parametrize("attack", CRAFTED)
def test_every_command_on_a_crafted_dataset_ends_at_once_in_one_line_and_writes_only_inside(
    swept: Path, tmp_path: Path, capsys, attack: str
):
    """status, resubmit --dry-run, resubmit, run --resume, aggregate, compare and history on each
    crafted dataset: each ends within 20 s with exit status 0, 1 or 2 and at most one line of error,
    writes nothing outside the dataset and leaves the done execution as it was; where the attack
    blocked the execution for good before, resubmit runs it now, and where it would write outside the
    dataset, it is refused naming the path."""
    dataset, outside = tmp_path / "dataset", tmp_path / "outside"
    subprocess.run(["cp", "-a", str(swept), str(dataset)], check=True)
    outside.mkdir()
    (dataset / "shards" / f"execution={MOK}" / "attempt-1.parquet").unlink()
    craft, runs = CRAFTED[attack]
    craft(dataset, outside)
    before, around, base = _untouched(dataset), _tree(tmp_path, dataset), _tree(swept)
    commands = {
        "status": ["status", str(dataset)],
        "resubmit --dry-run": ["resubmit", str(dataset), "--dry-run"],
        "resubmit": ["resubmit", str(dataset)],
        "run --resume": ["run", "--multirun", "--resume", *SWEEP, f"dataset_dir={dataset}"],
        "aggregate": ["aggregate", str(dataset), "--no-figures"],
        "compare": ["compare", str(swept), str(dataset)],
        "history": ["history", str(swept), str(dataset), "--out", str(dataset / "history")],
    }
    ends, said = {}, {}
    for name, arguments in commands.items():
        status, seconds, errors, said[name] = _command(arguments, capsys)
        ends[name] = status
        assert status in (0, 1, 2) and seconds < 20 and len(errors) <= 1, (name, status, seconds, errors)
        assert _untouched(dataset) == before, name
        assert _tree(tmp_path, dataset) == around and _tree(swept) == base, name
    shard = sorted(p.name for p in (dataset / "shards" / f"execution={MOK}").glob("*.parquet"))
    if runs:
        assert ends["resubmit"] == 0 and len(shard) == 1, (ends, shard)
    elif attack == "claims/.owners a file":
        assert ends["resubmit"] == ends["run --resume"] == 2  # a folder every writer shares: refused whole
    elif attack == "a live claim on what status calls failed":
        assert ends["resubmit"] == 0 and not shard  # another writer's: left to it
        lines = said["resubmit"].splitlines()
        assert "nothing to run" in lines  # and the count says what went out: nothing
        assert lines[-1] == "0 execution(s) resubmitted (1 another writer's, of the 1 failed or missing)"
        dry = said["resubmit --dry-run"].splitlines()  # the dry run says the same
        assert (
            dry[-1] == "0 execution(s) would be resubmitted (1 another writer's, of the 1 failed or missing)"
        )
    else:
        assert ends["resubmit"] == ends["run --resume"] == 1 and not shard  # refused, named
        assert (
            said["resubmit"].splitlines()[-1]
            == "0 execution(s) resubmitted (1 refused, of the 1 failed or missing)"
        )
