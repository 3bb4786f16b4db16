"""How long this process has spent compiling CuTe kernels, and loading them from the kernel cache
(:mod:`cutlass_kernels.kernel_cache`) instead: a fixed cost of every process that runs them (an
execution's record of where its time went). Free of torch and the DSL, so that a reader pays for
neither."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

_SPENT = {"seconds": 0.0, "kernels": 0}
_LOADED = {"seconds": 0.0, "kernels": 0}


def timed(compile_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``compile_fn(*args, **kwargs)`` (``cute.compile``), its time added to this process's total."""
    began = time.perf_counter()
    try:
        return compile_fn(*args, **kwargs)
    finally:
        _SPENT["seconds"] += time.perf_counter() - began
        _SPENT["kernels"] += 1


def spent() -> tuple[float, int]:
    """Seconds spent compiling so far in this process, and how many compiles."""
    return _SPENT["seconds"], int(_SPENT["kernels"])


def loaded(seconds: float) -> None:
    """Count one kernel loaded from the cache in ``seconds``."""
    _LOADED["seconds"] += seconds
    _LOADED["kernels"] += 1


def loads() -> tuple[float, int]:
    """Seconds spent loading cached kernels so far in this process, and how many were loaded."""
    return _LOADED["seconds"], int(_LOADED["kernels"])
