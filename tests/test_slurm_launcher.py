"""Launcher settings on the local Slurm cluster: what the command line asks lands in the sbatch
script and in Slurm's own records; an unknown key submits nothing."""

import json
from dataclasses import asdict
from pathlib import Path

import yaml

from pipeline.compose import composed
from pipeline.compose.select import select
from pipeline.data import ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset
from pipeline.launch.settings import SlurmLauncherConf, effective
from tests.slurm_support import (
    REPO,
    WORKLOAD,
    needs_cluster,
    output,
    python_module,
    records,
    sacct_ended,
    sacct_state,
    submit,
    wait_for,
    wait_for_state,
)

pytestmark = needs_cluster

MOK = "inference-ep8-f1536-bf16-mok-native"
DIST = "inference-ep8-f1536-bf16-dist-moe-bf16"


def test_exclude_comment_and_array_parallelism_land_as_asked(tmp_path):
    submit(
        tmp_path,
        "mok-bf16,dist-moe-bf16",
        "hydra.launcher.exclude=n1",
        "+hydra.launcher.additional_parameters.comment=moe-launcher-test",
        "hydra.launcher.array_parallelism=1",
        "hydra.launcher.group=none",  # a job each, so an array of two tasks
    )
    job_ids = [records(tmp_path, "submitted", e)[0]["job_id"] for e in (MOK, DIST)]
    assert len({j.split("_")[0] for j in job_ids}) == 1  # one array
    shown = output("scontrol", "show", "job", job_ids[0])
    assert "Comment=moe-launcher-test" in shown and "ExcNodeList=n1" in shown, shown
    for execution_id in (MOK, DIST):
        wait_for_state(tmp_path, execution_id, "done", timeout=180)
    for job_id in job_ids:
        wait_for(f"sacct to record the end of job {job_id}", lambda j=job_id: sacct_ended(j), 60)
        state, _, nodes = sacct_state(job_id).split("|")
        assert state == "COMPLETED"
        assert "n1" not in output("scontrol", "show", "hostnames", nodes).split(), nodes
    (script,) = Path(tmp_path, "logs", "arrays").glob("*/*_submission.sh")
    lines = script.read_text().splitlines()
    assert {"#SBATCH --exclude=n1", "#SBATCH --comment=moe-launcher-test", "#SBATCH --no-requeue"} <= set(
        lines
    )
    assert any(line.startswith("#SBATCH --array=0-1%1") for line in lines), lines


def test_unknown_launcher_key_submits_nothing(tmp_path):
    done = python_module(
        "pipeline.run",
        "--multirun",
        "workload=inference-ep8-f1536",
        "variant=mok-bf16",
        "scale=ci",
        f"dataset_dir={tmp_path}",
        "hydra/launcher=slurm",
        "cluster=local-slurm",
        "+hydra.launcher.acount=x",
    )
    assert done.returncode == 2
    assert "unknown launcher key(s) acount" in done.stderr and "allowed: backend, timeout_min" in done.stderr
    # a submission creates its array's log folder before sbatch runs: none was made
    assert not (tmp_path / "logs").exists() and not (tmp_path / "ledger").exists()


def test_cuda_is_resolved_on_the_job_node_not_on_the_submitting_host(tmp_path):
    submit(tmp_path, "mok-bf16", "device=cuda")  # this host has no GPU: not refused here
    line = " ".join(wait_for_state(tmp_path, MOK, "failed", timeout=120))
    assert "device 'cuda' requested but no CUDA device is visible" in line, line
    assert "(node n" in line, line


def timelimit(job_id: str) -> str:
    """The job's time limit in accounting, once the job has reached it."""
    command = ("sacct", "-X", "-n", "-P", "-o", "Timelimit", "-j", job_id)
    wait_for(f"job {job_id} in accounting", lambda: bool(output(*command)), timeout=60)
    return output(*command).splitlines()[-1]


def test_resubmit_replays_the_sweeps_time_limit_and_dry_run_submits_nothing(tmp_path):
    submit(tmp_path, "mok-bf16", "hydra.launcher.timeout_min=7")
    wait_for_state(tmp_path, MOK, "done", timeout=180)
    (first,) = records(tmp_path, "submitted", MOK)
    assert first["settings"]["timeout_min"] == 7 and timelimit(first["job_id"]) == "00:07:00"
    Dataset(tmp_path).shard_path(MOK, 1).unlink()

    dry = python_module("pipeline.resubmit", str(tmp_path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == f"would resubmit {MOK} as attempt 2 (was missing)"
    assert (
        "timeout_min=7.0 " in dry.stdout
        and dry.stdout.splitlines()[-1] == "1 execution(s) would be resubmitted"
    )
    assert len(records(tmp_path, "submitted", MOK)) == 1 and not Dataset(tmp_path).log_dir(MOK, 2).exists()

    again = python_module("pipeline.resubmit", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"resubmitting {MOK} as attempt 2 (was missing)"
    second = records(tmp_path, "submitted", MOK)[1]
    assert second["attempt"] == 2 and timelimit(second["job_id"]) == "00:07:00"
    wait_for_state(tmp_path, MOK, "done", timeout=180)


def nodes_of(job_id: str) -> list[str]:
    """The nodes accounting says the job ran on, once it holds the job's end."""
    wait_for(f"the end of job {job_id} in accounting", lambda: sacct_ended(job_id), timeout=60)
    return output("scontrol", "show", "hostnames", sacct_state(job_id).split("|")[-1]).split()


def test_status_names_a_failed_attempts_nodes_and_resubmit_keeps_off_them(tmp_path):
    submit(tmp_path, "mok-bf16", "device=cuda")  # fails on every node of this CPU-only cluster
    line = wait_for_state(tmp_path, MOK, "failed", timeout=120)
    nodes = line[line.index("nodes:") + 1].split(",")
    first = records(tmp_path, "submitted", MOK)[0]["job_id"]
    ran_on = nodes_of(first)
    assert sorted(nodes) == sorted(ran_on) and len(nodes) == 2, (nodes, ran_on)

    again = python_module("pipeline.resubmit", str(tmp_path), "--exclude-failed-nodes")
    assert again.returncode == 0, again.stderr
    assert f"exclude={','.join(sorted(nodes))} " in again.stdout
    second = records(tmp_path, "submitted", MOK)[1]
    assert second["settings"]["exclude"] == ",".join(sorted(nodes))
    line = wait_for_state(tmp_path, MOK, "failed", timeout=120)
    assert line[line.index("attempt") + 1] == "2"
    ran_on = nodes_of(second["job_id"])
    assert len(ran_on) == 2 and not set(ran_on) & set(nodes), (ran_on, nodes)


def test_resubmit_runs_todays_configuration_never_the_shell_lines_a_dataset_records(tmp_path):
    """A dataset whose ledger records a Slurm submission with a setup line (here one that leaves a
    marker), srun arguments and an sbatch parameter of a stranger's: the dry run says each is not
    reused, or, with --reuse-recorded, names it first; the job resubmit sends holds today's
    configuration only, runs, and leaves no marker."""
    dataset, marker = tmp_path / "dataset", tmp_path / "marker"
    (overrides, config), *_ = select(
        [WORKLOAD, "variant=mok-bf16", "scale=ci", "cluster=local-slurm", f"dataset_dir={dataset}"]
    )
    preset = yaml.safe_load((REPO / "conf" / "cluster" / "local-slurm.yaml").read_text())
    today = effective(asdict(SlurmLauncherConf()), preset, [])
    stranger = {
        "setup": [f"touch {marker}"],
        "srun_args": ["--label"],
        "additional_parameters": {"mail-user": "stranger@example.org"},
    }
    settings = {**today.to_json(), **stranger}
    comparable = Comparable.of_config(composed(overrides, config).config)
    ledger.append(
        Dataset(dataset), ledger.Intended((ledger.Intention(MOK, tuple(overrides)),), settings, comparable)
    )
    record = ledger.Submitted(
        MOK, 1, "999999999", list(overrides), "slurm", "local-slurm", f"logs/{MOK}/attempt-1", settings
    )
    ledger.append(Dataset(dataset), record)  # a job Slurm never knew: failed

    dry = python_module("pipeline.resubmit", str(dataset), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0] == f"would resubmit {MOK} as attempt 2 (was failed)" and "touch" not in lines[1]
    for key, value in stranger.items():
        said = f"  recorded {key}={json.dumps(value)} not reused (today's configuration instead; "
        assert f"{said}--reuse-recorded {key} reuses it)" in lines, dry.stdout
    named = python_module("pipeline.resubmit", str(dataset), "--dry-run", "--reuse-recorded", "setup")
    assert named.stdout.splitlines()[0] == (
        f'reusing the dataset\'s recorded setup: ["touch {marker}"] (--reuse-recorded setup)'
    )
    assert f"setup=['touch {marker}']" in named.stdout

    again = python_module("pipeline.resubmit", str(dataset))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"resubmitting {MOK} as attempt 2 (was failed)"
    (script,) = Path(dataset, "logs", "arrays").glob("*/*_submission.sh")
    text = script.read_text()
    assert "#SBATCH --partition=bench" in text and "#SBATCH --no-requeue" in text
    for word in ("touch", "--label", "mail-user", "stranger"):
        assert word not in text, text
    wait_for_state(dataset, MOK, "done", timeout=180)
    assert not marker.exists()
