"""Fake CUDA tensors on a machine without a GPU, in a CPU-only build of torch.

``FakeTensorMode`` creates tensors on ``cuda`` in any build, but a CPU-only torch (2.13) lacks the CUDA
device guard that Python indexing and autograd ask for ("PyTorch is not linked with support for cuda
devices"), and autograd over CUDA tensors needs CUDA to be torch's accelerator ("Cannot access
accelerator device when none is available"). ``fake_cuda.cpp`` registers both as no-ops. torch reads
its CUDA hooks once, when it is imported, so :func:`install` must run before ``import torch``: the
estimate runs in worker processes that call it first (:mod:`pipeline.tools.estimate.worker`).

The library is compiled once per torch version and source (g++, ~10 s) into the cache folder
(``MOE_BENCH_CACHE``, else ``$XDG_CACHE_HOME/moe-bench``, else ``~/.cache/moe-bench``). A build of
torch with CUDA needs none of this and loads nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline.data.estimates import cache_dir

SOURCE = Path(__file__).with_name("fake_cuda.cpp")


class FakeCudaError(RuntimeError):
    """Fake CUDA tensors cannot be set up in this process (the message says why)."""


def _torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise FakeCudaError("torch is not installed")
    return Path(spec.origin).parent


def torch_has_cuda() -> bool:
    """Whether the installed torch was built with CUDA (its CUDA library ships beside it)."""
    return any((_torch_dir() / "lib").glob("libtorch_cuda*"))


def _library(torch_dir: Path) -> Path:
    """The compiled shim for this torch and source, built if missing (atomic: a temporary name, then
    a rename, so concurrent workers never load a half-written file)."""
    version = (torch_dir / "version.py").read_text()
    key = hashlib.sha256(SOURCE.read_bytes() + version.encode() + sys.version.encode()).hexdigest()[:16]
    target = cache_dir() / f"fake_cuda-{key}.so"
    if target.exists():
        return target
    compiler = shutil.which(os.environ.get("CXX", "g++"))
    if compiler is None:
        raise FakeCudaError("fake CUDA tensors need a C++ compiler (g++ or $CXX) to build their shim once")
    target.parent.mkdir(parents=True, exist_ok=True)
    lib = torch_dir / "lib"
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        command = [
            compiler, "-O1", "-std=c++17", "-w", "-shared", "-fPIC", f"-I{torch_dir / 'include'}",
            str(SOURCE), f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}", "-o", str(built),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode:
            tail = result.stderr.strip().splitlines()[-1:] or ["no output"]
            raise FakeCudaError(f"building the fake CUDA shim failed: {tail[0]}")
        os.replace(built, target)
    return target


def prepare() -> None:
    """Build the shim if this torch needs one and it is missing (without loading it or torch), so
    that worker processes started next all find it."""
    if not torch_has_cuda():
        _library(_torch_dir())


def install() -> None:
    """Make fake CUDA tensors work in this process; call before torch is imported (a no-op for a
    build of torch with CUDA)."""
    if torch_has_cuda():
        return
    if "torch" in sys.modules:
        raise FakeCudaError("fake CUDA must be installed before torch is imported in this process")
    ctypes.CDLL(str(_library(_torch_dir())), mode=ctypes.RTLD_GLOBAL)
