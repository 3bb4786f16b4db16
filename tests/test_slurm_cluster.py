"""The local cluster itself: tasks spread over nodes, and accounting records a failed job as FAILED."""

import subprocess

from tests.slurm_support import needs_cluster, output, sacct_state, wait_for

pytestmark = needs_cluster


def test_srun_spreads_tasks_over_two_nodes():
    done = subprocess.run(
        ["srun", "-N", "2", "-n", "4", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_NODEID"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    placements = {tuple(line.split()) for line in done.stdout.splitlines()}  # (node name, node id)
    assert len(placements) == 2
    assert {node_id for _, node_id in placements} == {"0", "1"}


def test_a_failing_batch_job_is_failed_in_sacct(tmp_path):
    job_id = output(
        "sbatch", "--parsable", "-N", "2", "-n", "2", f"--output={tmp_path}/%j.out", "--wrap", "exit 3"
    )

    def recorded_on_two_nodes() -> bool:
        # The accounting record settles in steps: the state first, then the node list.
        state, code, nodes = (sacct_state(job_id) or "||").split("|")
        hosts = output("scontrol", "show", "hostnames", nodes).split() if nodes and nodes != "None" else []
        return (state, code, len(hosts)) == ("FAILED", "3:0", 2)

    wait_for(
        lambda: f"FAILED 3:0 on two nodes, sacct says {sacct_state(job_id)!r}", recorded_on_two_nodes, 60
    )
