"""The local cluster itself: tasks spread over nodes, accounting records a failed job as FAILED, and the
bench partition never grants more CPUs at once than the host has cores."""

import os
import subprocess
import time

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


def _running_bench_cpus() -> int:
    listing = output("squeue", "-h", "-p", "bench", "-t", "RUNNING", "-o", "%C")
    return sum(int(c) for c in listing.split())


def test_bench_partition_never_grants_more_cpus_than_the_host_has_cores(tmp_path):
    cores = len(os.sched_getaffinity(0))  # the host's cores, as nproc counts them without OMP_NUM_THREADS
    ranks = min(2, cores)
    jobs = [
        output("sbatch", "--parsable", "-p", "bench", "-N", str(ranks), "-n", str(ranks),
               f"--output={tmp_path}/%j.out", "--wrap", "sleep 4")
        for _ in range(3)
    ]  # fmt: skip
    seen = []
    deadline = time.monotonic() + 120
    while output("squeue", "-h", "-j", ",".join(jobs), "-o", "%i") and time.monotonic() < deadline:
        seen.append(_running_bench_cpus())
        time.sleep(0.5)
    assert max(seen) <= cores, seen
    wait_for(
        lambda: f"the bench jobs to complete, sacct says {[sacct_state(j) for j in jobs]}",
        lambda: all(sacct_state(j).startswith("COMPLETED") for j in jobs),
        60,
    )

    refused = subprocess.run(
        ["sbatch", "-p", "bench", "-n", str(cores + 1), "--wrap", "true"], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "QOS" in refused.stderr, refused.stderr
