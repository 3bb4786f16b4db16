"""Fixtures shared by test modules: every CuTe kernel of an arch compiled once per session, and one
real ten-execution scale=ci sweep that the tests read (and never write)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.sweeps import CI_SWEEP, run_sweep


@pytest.fixture(scope="session")
def compiled_kernels(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``compiled_kernels(arch)``: the folder where ``python -m cutlass_kernels compile`` (a fresh
    process: the DSL reads its target arch when first imported) wrote every kernel of ``arch``, its
    PTX and cubin; compiled on first use, then shared by every test of the session."""
    folders: dict[str, Path] = {}

    def compile_arch(arch: str) -> Path:
        if arch not in folders:
            out = tmp_path_factory.mktemp(f"kernels-{arch}")
            done = subprocess.run(
                [sys.executable, "-m", "cutlass_kernels", "compile", "--arch", arch, "--out", str(out)],
                capture_output=True,
                text=True,
                timeout=1200,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            folders[arch] = out
        return folders[arch]

    return compile_arch


@pytest.fixture(scope="session")
def ci_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """The dataset of the :data:`CI_SWEEP` (two workloads x five variants) and the command's result;
    run once per session, on first use: tests copy it before changing anything."""
    dataset = tmp_path_factory.mktemp("ci-sweep")
    done = run_sweep(dataset, *CI_SWEEP)
    assert done.returncode == 0, done.stderr[-3000:]
    return dataset, done
