"""The local cluster itself: tasks spread over nodes, and accounting records a failed job as FAILED."""

import subprocess

from tests.slurm_support import needs_cluster, sacct_state, wait_for

pytestmark = needs_cluster


def test_srun_spreads_tasks_over_two_nodes():
    done = subprocess.run(
        ["srun", "-N", "2", "-n", "4", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_NODEID"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert sorted(set(done.stdout.split("\n")) - {""}) == ["n1 0", "n2 1"]


def test_a_failing_batch_job_is_failed_in_sacct(tmp_path):
    job_id = subprocess.run(
        ["sbatch", "--parsable", "-N", "2", "-n", "2", f"--output={tmp_path}/%j.out"]
        + ["--wrap", "srun true; exit 3"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The accounting record settles in steps (state first, then the node list).
    expected = "FAILED|3:0|n[1-2]"
    wait_for(f"sacct to say {expected} for job {job_id}", lambda: sacct_state(job_id) == expected, 60)
