"""Bad input to each of the seven commands: one line on stderr, the exit status of the README's table,
no traceback, nothing launched. The commands are called in process through the console script's
``main`` (the same code ``moe-bench`` and ``python -m`` run), so the table costs no interpreter starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.base.exits import BAD_INPUT
from pipeline.commands import cli
from tests.intents import ONE, intended_dataset

# (command, arguments, what the line says); {d} is a dataset with a sweep's intent, {e} an empty
# folder, {f} a file, {x} a folder that does not exist
CASES = [
    ("run", [*ONE, "scale=ci", "scale.iterations=abc"], "scale.iterations must be an integer, got 'abc'"),
    ("run", [*ONE, "scale=ci", "scale.tokens=abc"], "scale.tokens must be an integer, got 'abc'"),
    ("run", [*ONE, "scale=ci", "seed=abc"], "seed must be an integer, got 'abc'"),
    ("run", [*ONE, "scale=ci", "scale.iterations=2.5"], "scale.iterations must be an integer, got 2.5"),
    ("run", [*ONE, "scale=ci", "scale.iterations=1000000000000"], "scale.iterations must be <= 10,000"),
    ("run", [*ONE, "scale=ci", "scale.min_window_ms=1e12"], "scale.min_window_ms must be <= 60,000"),
    ("run", [*ONE, "scale=ci", "scale.min_window_ms=nan"], "scale.min_window_ms must be a finite number"),
    ("run", [*ONE, "scale=ci", "scale.tokens=0"], "tokens"),
    ("run", [*ONE, "scale=ci", "seed=-1"], "seed must be >= 0"),
    ("run", [*ONE, "scale=ci", "keep_traces=yes"], "keep_traces must be true or false, got 'yes'"),
    ("run", [*ONE, "scale=ci", "max_ranks=abc"], "max_ranks must be an integer"),
    ("run", [*ONE, "scale=ci", "device=tpu"], "device 'tpu'; allowed"),
    ("run", [*ONE, "scale=ci", "dataset_dir={f}"], "is a file, not a directory"),
    ("run", [*ONE, "scale=ci", "dataset_dir=/proc/x"], "cannot be written here"),
    ("run", [*ONE], "scale=full but this host has no GPU"),
    ("run", [*ONE, "scale=ci", "hydra.launcher.timeout_min=-5"], "timeout_min must be >= 1"),
    ("run", [*ONE, "scale=ci", "hydra.launcher.timeout_min=1e-9"], "timeout_min must be >= 1"),
    (
        "run",
        [*ONE, "scale=ci", "hydra.launcher.deadline_s=0.001"],
        "deadline_s=0.001 is shorter than the 3 s",
    ),
    (
        "run",
        [*ONE, "scale=ci", "hydra/launcher=slurm", "cluster=local-slurm", "hydra.launcher.comment='a\nb'"],
        "launcher setting comment holds a control character (a\\x0ab)",
    ),
    ("run", [*ONE, "scale=ci", "workload=nope"], "workload 'nope' is not in suite report; allowed workload:"),
    ("run", [*ONE, "scale=nope"], "Could not find 'scale/nope'"),
    ("run", [*ONE, "scale=ci", "--foo"], "unrecognized arguments: --foo"),
    ("run", [*ONE, "scale=ci", "scale.tokens=32", "seed=1", "dataset_dir={d}"], "scale.tokens=32"),
    ("list", ["--foo"], "unknown option --foo"),
    ("list", [*ONE, "scale=cpu", "scale.min_window_ms=nan"], "scale.min_window_ms must be a finite number"),
    ("list", ["workload=nope"], "workload 'nope' is not in suite report; allowed workload: "),
    ("list", [*ONE, "scale=ci", "scale.windows=100000"], "scale.windows must be <= 1,000"),
    ("list", [*ONE, "scale=ci", "scale.top_k=abc"], "scale.top_k must be an integer"),
    ("list", [*ONE, "scale=ci", "seed=1.5"], "seed must be an integer, got 1.5"),
    ("status", ["{x}"], "does not exist"),
    ("status", ["{f}"], "is a file, not a dataset directory"),
    ("status", ["{e}"], "nothing was launched there"),
    ("status", ["{d}", "--state", "bogus"], "invalid choice: 'bogus'"),
    ("status", ["{d}", "--bogus"], "unrecognized arguments: --bogus"),
    ("resubmit", ["{x}"], "does not exist"),
    ("resubmit", ["{d}", "--only", "bogus"], "invalid choice: 'bogus'"),
    ("resubmit", ["{d}", "--set", "timeout_min=abc"], "timeout_min must be a finite number, got 'abc'"),
    ("resubmit", ["{d}", "--set", "timeout_min=-5"], "timeout_min must be >= 1"),
    ("resubmit", ["{d}", "--set", "deadline_s=0.001"], "deadline_s=0.001 is shorter than the 3 s"),
    ("resubmit", ["{d}", "--reuse-recorded", "bogus"], "invalid choice: 'bogus'"),
    ("resubmit", ["{d}", "--set", "scale.tokens=32"], "scale.tokens: comparable settings of the dataset"),
    ("resubmit", ["{d}", "--set", "seed=1"], "seed: comparable settings of the dataset"),
    ("resubmit", ["{d}", "--set", "nokey=1"], "nokey"),
    ("resubmit", ["{d}", "--set", "noequals"], "noequals"),
    ("aggregate", ["{x}"], "does not exist"),
    ("aggregate", ["{f}"], "is a file, not a dataset directory"),
    ("aggregate", ["{d}", "--out", "/proc/x"], "--out '/proc/x' cannot be written here"),
    ("aggregate", ["{d}", "--out", "{f}"], "is a file, not a directory"),
    ("aggregate", ["{d}", "--workers", "0"], "--workers 0: must be at least 1"),
    ("aggregate", ["{d}", "--out", "{d}/ledger"], "lies in the ledger folder of the dataset"),
    ("aggregate", ["{d}", "--out", "{d}/shards/x"], "lies in the shards folder of the dataset"),
    ("aggregate", ["{d}", "--bogus"], "unrecognized arguments: --bogus"),
    ("compare", ["{x}", "{d}"], "does not exist"),
    ("compare", ["{d}", "{d}", "--threshold", "-1"], "threshold"),
    ("compare", ["{d}", "{d}", "--threshold", "abc"], "invalid float value: 'abc'"),
    ("compare", ["{d}", "{d}", "--out", "{f}"], "is a file, not a directory"),
    ("compare", ["{d}", "{d}", "--out", "/proc/x"], "cannot be written here"),
    ("compare", ["{d}", "{d}", "--out", "{d}/claims"], "lies in the claims folder of the dataset"),
    ("compare", ["{d}"], "the following arguments are required: new"),
    ("history", ["{d}", "--out", "{e}"], "a history needs at least two datasets, got 1"),
    ("history", ["{x}", "{d}", "--out", "{e}"], "does not exist"),
    ("history", ["{d}", "{d}", "--out", "{e}"], "named twice"),
    ("history", ["{d}", "{e}", "--out", "{f}"], "is a file, not a directory"),
    ("history", ["{d}", "{e}", "--out", "{d}/logs"], "lies in the logs folder of the dataset"),
    ("history", ["{d}", "{e}"], "the following arguments are required: --out"),
    ("history", ["{d}", "{e}", "--out", "{e}", "--threshold", "-1"], "threshold"),
    ("model", ["--plot", "{f}"], "--plot"),
    ("model", ["--inputs", "{x}"], "cannot read inputs file"),
    ("model", ["--inputs", "{f}"], "is not JSON"),
    ("model", ["top_k=abc"], "top_k='abc' is not a number"),
    ("model", ["--bogus"], "unrecognized arguments: --bogus"),
    ("bogus", [], "unknown command 'bogus'"),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    """A dataset whose ledger holds a sweep's intent (scale=ci, seed 0; nothing ran), an empty
    folder, a file and a path that does not exist."""
    root = tmp_path_factory.mktemp("bad-inputs")
    dataset = intended_dataset(root / "dataset")
    (root / "empty").mkdir()
    (root / "file").write_text(json.dumps(["not", "inputs"]) + "\n{")
    return {"d": str(dataset.root), "e": str(root / "empty"), "f": str(root / "file"), "x": str(root / "no")}


@pytest.mark.parametrize(
    ("command", "arguments", "says"), CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)]
)
def test_bad_input_is_one_line_with_exit_2(places, capsys, command, arguments, says):
    given = [a.format(**places) for a in arguments]
    fresh = Path(places["e"]) / "dataset"  # where a refused run is pointed: it must stay absent
    if command == "run" and not any(a.startswith("dataset_dir=") for a in given):
        given.append(f"dataset_dir={fresh}")
    before = sorted(p.name for p in Path(places["d"]).rglob("*"))
    try:
        status = cli.main([command, *given])
    except SystemExit as end:  # argparse and the refusals end so; the console script exits with it
        status = end.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == BAD_INPUT, (status, err)
    assert len(lines) == 1, err
    assert says.format(**places) in lines[0], lines[0]
    assert "Traceback" not in out + err
    assert sorted(p.name for p in Path(places["d"]).rglob("*")) == before  # nothing written there
    assert not fresh.exists()


def test_the_table_covers_the_seven_commands_forty_times():
    assert len(CASES) >= 40
    assert {c for c, _, _ in CASES} >= set(cli.COMMANDS) - {"estimate"}
