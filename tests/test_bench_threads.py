"""A CPU rank's threads: its share of the node's cores, never more than the CPUs Slurm gave its task."""

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
    if given is None:
        monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    else:
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", given)
    assert cpu_threads(ranks_per_node) == expected
