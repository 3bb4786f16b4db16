"""The command lines: one ``moe-bench`` console script, ``--help`` everywhere, status as aligned
columns or JSON with a state filter, and one-line errors (exit 2) for bad paths and arguments."""

import json
import os
import subprocess
import sys
import tomllib

import pytest

from pipeline.commands.cli import COMMANDS
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from tests.slurm_support import REPO

MOK = "inference-ep8-f1536-bf16-mok-native"
DIST = "inference-ep16-f1536-bf16-dist-moe-bf16"


def cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_one_console_script_names_every_stage():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"moe-bench": "pipeline.commands.cli:main"}
    done = cli("-m", "pipeline.commands.cli", "--help")
    assert done.returncode == 0 and all(f"  {name} " in done.stdout for name in COMMANDS)
    bad = cli("-m", "pipeline.commands.cli", "bogus")
    assert bad.returncode == 2 and bad.stderr.strip().startswith(
        "moe-bench: unknown command 'bogus'; allowed:"
    )


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_help(command):
    done = cli("-m", "pipeline.commands.cli", command, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower() or "powered by Hydra" in done.stdout


def test_matrix_help_is_not_a_hydra_error():
    done = cli("-m", "pipeline.list", "--help")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("usage: python -m pipeline.list [--config-dir DIR] [OVERRIDE ...]")


def failed_dataset(tmp_path) -> Dataset:
    """Two local submissions whose processes are gone without a result: both failed."""
    dataset = Dataset(tmp_path)
    for execution_id, job_id in ((MOK, "999999998"), (DIST, "12")):
        log_dir = f"logs/{execution_id}/attempt-1"
        settings = {"backend": "local", "cluster": "local", "gpus": None, "timeout_min": 60}
        record = ledger.Submitted(execution_id, 1, job_id, [], "local", "local", log_dir, settings)
        ledger.append(dataset, record)
    return dataset


def test_status_columns_line_up_and_json_filters_by_state(tmp_path):
    failed_dataset(tmp_path)
    done = cli("-m", "pipeline.status", str(tmp_path))
    assert done.returncode == 1
    first, second, counts = done.stdout.splitlines()
    assert first.index("attempt 1") == second.index("attempt 1") and first.index("job ") == second.index(
        "job "
    )
    assert counts == "0 done, 0 running, 0 pending, 2 failed, 0 missing of 2 executions"
    shown = cli("-m", "pipeline.status", str(tmp_path), "--json", "--state", "failed")
    document = json.loads(shown.stdout)
    assert [e["execution_id"] for e in document["executions"]] == sorted([MOK, DIST])
    assert document["executions"][0]["state"] == "failed" and document["counts"]["failed"] == 2
    none = json.loads(cli("-m", "pipeline.status", str(tmp_path), "--json", "--state", "done").stdout)
    assert none["executions"] == [] and none["counts"]["failed"] == 2
    bad = cli("-m", "pipeline.status", str(tmp_path), "--state", "lost")
    assert bad.returncode == 2 and "invalid choice: 'lost'" in bad.stderr


@pytest.mark.parametrize(
    "arguments, code, message",
    [
        (
            ["-m", "pipeline.status", "{file}"],
            2,
            "pipeline.status: '{file}' is a file, not a dataset directory",
        ),
        (
            ["-m", "pipeline.aggregate", "{file}"],
            2,
            "pipeline.aggregate: '{file}' is a file, not a dataset directory",
        ),
        (
            ["-m", "pipeline.aggregate", "{dir}", "--out", "{file}"],
            2,
            "pipeline.aggregate: --out '{file}' is a file, not a directory",
        ),
        (
            ["-m", "pipeline.aggregate", "{dir}"],
            1,
            "pipeline.aggregate: {dir} holds no shards: nothing to publish",
        ),
        (
            ["-m", "cutlass_kernels", "compile", "--arch", "sm_90a", "--out", "{file}"],
            2,
            "python -m cutlass_kernels compile: --out {file} is a file, not a directory",
        ),
    ],
)
def test_bad_paths_end_in_one_line(tmp_path, arguments, code, message):
    file = tmp_path / "a-file"
    file.write_text("not a folder\n")
    (tmp_path / "empty").mkdir()
    names = {"file": str(file), "dir": str(tmp_path / "empty")}
    done = cli(*(a.format(**names) for a in arguments))
    assert done.returncode == code
    assert done.stderr.strip() == message.format(**names) or done.stderr.startswith(message.format(**names))
    assert "\n" not in done.stderr.strip() and not list((tmp_path / "empty").iterdir())


def test_tab_completion_in_a_real_bash(tmp_path):
    """The function ``moe-bench --completion bash`` prints, evaluated by bash and called as bash calls
    it on TAB: commands, a command's options, Hydra's completion of an override's value."""
    script = tmp_path / "moe-bench"  # the console script, as the project's code runs it here
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m pipeline.commands.cli "$@"\n')
    script.chmod(0o755)
    probe = r"""eval "$(moe-bench --completion bash)"
complete -p moe-bench
tab() {  # as bash calls the function: the line to the cursor, its words split at = too
    COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
    read -ra COMP_WORDS <<< "$2"; COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _moe_bench_complete; printf '%s|' "${COMPREPLY[@]}"; echo
}
tab "moe-bench sta" "moe-bench sta"
tab "moe-bench status --st" "moe-bench status --st"
tab "moe-bench run workload=inference-ep8-f15" "moe-bench run workload = inference-ep8-f15"
"""
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", probe], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "complete -o default -o nospace -F _moe_bench_complete moe-bench",
        "status |",
        "--state |",
        "inference-ep8-f1536|",
    ]
