"""Fixtures shared by test modules: a test's random generators, seeded from its node id (the seed is
printed with a failure); every CuTe kernel of an arch compiled once per session; and one real
ten-execution scale=ci sweep that the tests read (and never write)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Generator
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.sweeps import CI_SWEEP, run_sweep

# One intra-op thread in this process, as in every rank it spawns (pipeline/tools/ranks.py): on a host
# whose cores are busy elsewhere, torch's pool of threads waits for its own threads many times longer
# than the work takes (a layer test: 0.4 s on one thread, 17 s on two), and no reference or tolerance
# here depends on the thread count (a test of what more threads change sets its own: test_moe_swiglu).
torch.set_num_threads(1)

_SEED = pytest.StashKey[int]()


def seed_of(nodeid: str) -> int:
    """The seed of the test ``nodeid`` (``tests/test_x.py::test_y[param]``): the first eight bytes of
    its SHA-256, so a test draws the same values on every run, host and Python (no ``hash()``
    randomization), and each parametrized case its own."""
    return int.from_bytes(hashlib.sha256(nodeid.encode()).digest()[:8], "big")


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """This test's fixed seed (:func:`seed_of` its node id); a failure's report names it."""
    value = seed_of(request.node.nodeid)
    request.node.stash[_SEED] = value
    return value


@pytest.fixture
def rng(seed: int) -> np.random.Generator:
    """A numpy generator of this test's seed: the test's every numpy draw comes from it."""
    return np.random.default_rng(seed)


@pytest.fixture
def torch_rng(seed: int) -> torch.Generator:
    """A CPU torch generator of this test's seed, for ``torch.randn(..., generator=torch_rng)``."""
    return torch.Generator().manual_seed(seed)


# files whose tests share a session fixture: under xdist each worker builds its own session fixtures,
# so they run on one worker, and the fixture is built once
_SHARING = {
    "tests/test_compare_real.py": "ci_sweep",
    "tests/test_run_sweep.py": "ci_sweep",
    "tests/test_implementations.py": "ci_sweep",
    "tests/test_kernels_cache.py": "compiled_kernels",
    "tests/test_kernels_compile.py": "compiled_kernels",
    "tests/test_kernels_variants.py": "compiled_kernels",
    "tests/test_kernels_variants_sm90.py": "compiled_kernels",
    "tests/test_swiglu_kernel.py": "compiled_kernels",
}


# the groups that take longest (wall seconds on a two-core host: Slurm's waits, the GPU run's dry runs,
# the CI sweep, the DSL's compiles), in this order: started first, so that no worker is left with one
# of them at the end while the others idle
_LONGEST = ("slurm", "tests/test_gpu_run.py", "ci_sweep", "compiled_kernels")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (pytest-xdist, as CI runs), each file's tests run on one
    worker (its module fixtures built once), the files that share a session fixture on one worker, and
    every test of the Slurm cluster on the same worker, one at a time: they share its four nodes, and
    some take a node down. xdist hands the groups out in the order they come: the longest first, then
    those with more slow tests."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        group = "slurm" if item.get_closest_marker("slurm") else _SHARING.get(path, path)
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)

    def weight(group: str) -> tuple[int, int]:
        slow = sum(bool(i.get_closest_marker("slow")) for i in groups[group])
        return (_LONGEST.index(group) if group in _LONGEST else len(_LONGEST), -slow)

    items[:] = [item for group in sorted(groups, key=weight) for item in groups[group]]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, object, object]:
    """A failed test that drew from its seed gets a report section naming it."""
    report = yield
    if isinstance(report, pytest.TestReport) and report.failed and _SEED in item.stash:
        report.sections.append(
            ("random seed", f"{item.nodeid} drew from seed {item.stash[_SEED]} (tests/conftest.py seed_of)")
        )
    return report


@pytest.fixture(scope="session")
def compiled_kernels(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``compiled_kernels(arch)``: the folder where ``python -m cutlass_kernels compile`` (a fresh
    process: the DSL reads its target arch when first imported) wrote every kernel of ``arch``, its
    PTX and cubin; beside it, ``cache``: the same compiles exported into a kernel cache
    (:mod:`cutlass_kernels.kernel_cache`). Compiled on first use, then shared by every test of the
    session."""
    folders: dict[str, Path] = {}

    def compile_arch(arch: str) -> Path:
        if arch not in folders:
            root = tmp_path_factory.mktemp(f"kernels-{arch}")
            out, cache = root / "compiled", root / "cache"
            command = ["compile", "--arch", arch, "--out", str(out), "--cache", str(cache)]
            done = subprocess.run(
                [sys.executable, "-m", "cutlass_kernels", *command],
                capture_output=True,
                text=True,
                timeout=1200,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            folders[arch] = out
        return folders[arch]

    return compile_arch


PTXAS = shutil.which("ptxas") or "/usr/local/bin/ptxas"


@pytest.fixture(scope="session")
def ptxas_report() -> Callable[[str, Path], subprocess.CompletedProcess]:
    """``ptxas_report(arch, ptx)``: what ``ptxas -arch=<arch> -v`` reports of the PTX file ``ptx`` (a
    compiled kernel's), run once per file and session: the variant tests of both kernel files ask it
    of the same kernels. Skips the test where ptxas is not installed."""
    reports: dict[tuple[str, Path], subprocess.CompletedProcess] = {}

    def report(arch: str, ptx: Path) -> subprocess.CompletedProcess:
        if not Path(PTXAS).exists():
            pytest.skip("ptxas is not installed")
        key = (arch, ptx.resolve())
        if key not in reports:
            command = [PTXAS, f"-arch={arch}", "-v", str(ptx), "-o", os.devnull]
            reports[key] = subprocess.run(command, capture_output=True, text=True, timeout=300)
        return reports[key]

    return report


@pytest.fixture(scope="session")
def ci_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """The dataset of the :data:`CI_SWEEP` (two workloads x five variants) and the command's result;
    run once per session, on first use: tests copy it before changing anything."""
    dataset = tmp_path_factory.mktemp("ci-sweep")
    done = run_sweep(dataset, *CI_SWEEP)
    assert done.returncode == 0, done.stderr[-3000:]
    return dataset, done
