"""Kernels compiled once: every CuTe kernel of an arch exported ahead of time, on a machine without a
GPU, and loaded by the processes that run them instead of compiled again (about 1.2 s a kernel, paid
in every process otherwise).

A cache is a folder of object files, one per kernel, as the DSL's ``export_to_c`` writes them (the
host launch code with the kernel's cubin inside, about 40 KB), and ``manifest.json``. A kernel's entry
is found by its key: the DSL's version, the arch, the kernel's name (its
:class:`~cutlass_kernels.cute_base.KernelSpec`, or the SwiGLU and quantization kernels' names) and a
digest of the sources the kernels are traced from, so an edit of a kernel, a new DSL or another arch
is a miss, never a stale kernel. :func:`load` returns the loaded function, which takes the compiled
one's arguments, or None with the reason; :func:`build` exports every kernel of an arch; :func:`verify`
checks a folder's files against its manifest and loads each. The folder in use is named by the
environment (:data:`CACHE_ENV`); unset, nothing is loaded and kernels compile as before.

The host code is built for the baseline x86-64 (:data:`HOST_TARGET`): by default LLVM targets the
building machine's own CPU, whose AVX-512 instructions the GPU machine's host CPU need not have.
Free of torch and, until a cache is used, of the DSL.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

CACHE_ENV = "CUTLASS_KERNELS_CACHE"  # the cache folder the kernels are loaded from
MANIFEST = "manifest.json"
HOST_TARGET = "--host-target 'llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=x86-64'"
DSL = "nvidia-cutlass-dsl"
# the modules whose code a kernel is traced from: an edit of any of them changes every key
KERNEL_SOURCES = (
    "cute_base.py",
    "mx_quant_kernel.py",
    "mxfp8_bits.py",
    "registry.py",
    "sm100_gemm.py",
    "sm90_gemm.py",
    "swiglu_forward_kernel.py",
    "swiglu_kernel.py",
    "tile_schedule.py",
)


def dsl_version() -> str:
    return metadata.version(DSL)


def sources_digest() -> str:
    """SHA-256 of the kernels' source files, in :data:`KERNEL_SOURCES` order."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in KERNEL_SOURCES:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Key:
    """What made an exported kernel: the DSL's version, the arch, the kernel and its sources."""

    dsl: str
    arch: str
    kernel: str
    sources: str

    @classmethod
    def current(cls, kernel: str, arch: str) -> Key:
        return cls(dsl_version(), arch, kernel, sources_digest())

    @property
    def stem(self) -> str:
        """The object file's name (without ``.o``): the kernel's, and 12 hex digits of the key."""
        tag = hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.kernel}-{tag}"

    @property
    def symbol(self) -> str:
        """The exported function's symbol prefix (a C identifier)."""
        return "k_" + re.sub(r"\W", "_", self.stem)


def folder() -> Path | None:
    """The cache folder this process loads kernels from (:data:`CACHE_ENV`), if any."""
    value = os.environ.get(CACHE_ENV)
    return Path(value) if value else None


def read_manifest(cache: Path) -> dict[str, dict[str, Any]]:
    """The manifest's entries by object file stem; empty where there is none."""
    path = cache / MANIFEST
    if not path.is_file():
        return {}
    entries = json.loads(path.read_text())["kernels"]
    return {e["stem"]: e for e in entries}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_object(path: Path, symbol: str) -> Any:
    """The function ``symbol`` of the exported object file at ``path``, loaded with the DSL's runtime."""
    import cutlass.cute.export  # noqa: F401  (sets up the loader of exported object files)
    from cutlass.runtime import load_module

    return load_module(str(path))[symbol]


_LOADED: dict[tuple[Path, str], Any] = {}


def load(kernel: str, arch: str, cache: Path | None = None) -> tuple[Any, str]:
    """(the cached function of ``kernel`` for ``arch``, "") from ``cache`` (default: :func:`folder`),
    or (None, why not): no cache named, no entry of this key, a file missing or changed, or a load
    that failed. The function takes the compiled kernel's arguments."""
    cache = cache if cache is not None else folder()
    if cache is None:
        return None, f"no kernel cache ({CACHE_ENV} is unset)"
    key = Key.current(kernel, arch)
    entry = read_manifest(cache).get(key.stem)
    if entry is None:
        return None, f"not in the cache {cache} (DSL {key.dsl}, {arch}, these sources)"
    path = cache / f"{key.stem}.o"
    if (cache, key.stem) in _LOADED:
        return _LOADED[(cache, key.stem)], ""
    if not path.is_file() or _sha256(path) != entry["sha256"]:
        return None, f"{path} is missing or differs from the manifest"
    began = time.perf_counter()
    try:
        function = _load_object(path, key.symbol)
    except Exception as e:  # the DSL's loader raises its own errors; the caller compiles instead
        return None, f"loading {path} failed: {type(e).__name__}: {str(e)[:200]}"
    from cutlass_kernels import compiles

    compiles.loaded(time.perf_counter() - began)
    _LOADED[(cache, key.stem)] = function
    return function, ""


def cached_or_compiled(kernel: str, arch: str | None, compile_fn: Callable[[], Any]) -> Any:
    """The kernel from the cache where it holds it, else ``compile_fn()``; a miss with a cache named
    says so on stderr (the process then pays the compile, which :mod:`compiles` counts)."""
    if arch is not None:
        function, why = load(kernel, arch)
        if function is not None:
            return function
        if folder() is not None:
            print(f"cutlass_kernels: compiling {kernel}: {why}", file=sys.stderr, flush=True)
    return compile_fn()


def export(compiled: Any, key: Key, cache: Path) -> dict[str, Any]:
    """Write ``compiled`` (a ``cute.compile`` result built with :data:`HOST_TARGET`) as
    ``<key.stem>.o`` into ``cache``; its manifest entry."""
    compiled.export_to_c(str(cache), key.stem, function_prefix=key.symbol)
    (cache / f"{key.stem}.h").unlink()  # the C header: no caller here includes it
    path = cache / f"{key.stem}.o"
    return {"stem": key.stem, **key.__dict__, "sha256": _sha256(path), "bytes": path.stat().st_size}


def write_manifest(cache: Path, entries: Iterable[dict[str, Any]]) -> Path:
    """The manifest of ``entries``, replacing the previous one whole (written aside, then renamed)."""
    path = cache / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"kernels": sorted(entries, key=lambda e: e["stem"])}, indent=1) + "\n")
    tmp.replace(path)
    return path


def build(arch: str, cache: Path, compiled: dict[str, Any]) -> list[dict[str, Any]]:
    """Export ``compiled`` (every kernel of ``arch`` by name, built with :data:`HOST_TARGET`:
    :func:`cutlass_kernels.registry.compile_arch`) into ``cache``, emptied of other object files
    first; the manifest's entries."""
    cache.mkdir(parents=True, exist_ok=True)
    for stale in [*cache.glob("*.o"), cache / MANIFEST]:
        stale.unlink(missing_ok=True)
    entries = [export(function, Key.current(name, arch), cache) for name, function in compiled.items()]
    write_manifest(cache, entries)
    return entries


def verify(cache: Path) -> list[str]:
    """What is wrong with ``cache`` (empty: nothing): a manifest entry whose file is missing, differs
    from its digest, is not of this DSL version or sources, or does not load; an object file the
    manifest does not name."""
    problems = []
    entries = read_manifest(cache)
    if not entries:
        return [f"{cache / MANIFEST} is missing or names no kernel"]
    current = (dsl_version(), sources_digest())
    for stem, entry in entries.items():
        path = cache / f"{stem}.o"
        if not path.is_file() or _sha256(path) != entry["sha256"]:
            problems.append(f"{path.name}: missing or differs from the manifest")
            continue
        if (entry["dsl"], entry["sources"]) != current:
            problems.append(f"{path.name}: built by DSL {entry['dsl']} from other sources than these")
            continue
        key = Key(entry["dsl"], entry["arch"], entry["kernel"], entry["sources"])
        try:
            _load_object(path, key.symbol)
        except Exception as e:  # what the DSL's loader raises: the entry is unusable
            problems.append(f"{path.name}: does not load: {type(e).__name__}: {str(e)[:200]}")
    problems += [f"{p.name}: not in the manifest" for p in sorted(cache.glob("*.o")) if p.stem not in entries]
    return problems
