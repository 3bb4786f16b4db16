"""A CPU rank's threads: its share of the node's cores, never more than the CPUs Slurm gave its task
or the thread count the process is given."""

import os

import pytest

from pipeline.bench.distributed import cpu_threads


@pytest.mark.parametrize(
    ("given", "ranks_per_node", "expected"),
    [
        (None, 1, os.cpu_count() or 1),  # the local launcher's one rank: every core
        (None, 2 * (os.cpu_count() or 1), 1),  # more ranks than cores: one thread each, never zero
        ("1", 1, 1),  # a one-host Slurm node advertising more CPUs than its task was given
        (str(10 * (os.cpu_count() or 1)), 1, os.cpu_count() or 1),  # a grant beyond the cores: the cores
        ("", 1, os.cpu_count() or 1),  # set but empty: as unset
    ],
)
def test_cpu_threads(monkeypatch, given, ranks_per_node, expected):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if given is None:
        monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    else:
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", given)
    assert cpu_threads(ranks_per_node) == expected


@pytest.mark.parametrize(
    ("slurm", "omp", "expected"),
    [
        (None, "1", 1),  # one thread named (the device run's dry run on a shared host): one
        (None, "0", os.cpu_count() or 1),  # not a thread count: as unset
        (None, "x", os.cpu_count() or 1),
        (str(10 * (os.cpu_count() or 1)), str(10 * (os.cpu_count() or 1)), os.cpu_count() or 1),  # the cores
        ("1", str(os.cpu_count() or 1), 1),  # the smaller of the two
    ],
)
def test_cpu_threads_take_no_more_than_the_process_is_given(monkeypatch, slurm, omp, expected):
    if slurm is None:
        monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    else:
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", slurm)
    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert cpu_threads(1) == expected
