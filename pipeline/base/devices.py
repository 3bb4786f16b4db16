"""Which device a config's ``device`` names on a host: ``auto`` is a GPU where one is visible.

A job asks torch (:func:`pipeline.bench.distributed.resolve_device`); the process that plans and
launches asks the driver (:func:`gpus_here`, NVML), so that submitting a sweep never imports torch
(about 2.5 CPU-seconds a command). The two agree wherever the driver and CUDA do; where they do not
(a driver without a usable CUDA), the job's own answer refuses it in one line.
"""

from __future__ import annotations

import os
from functools import cache

from pipeline.base.vocabulary import DEVICES

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def resolve_device_on(preference: str, gpus: bool) -> str:
    """``preference`` on a host that has a visible GPU or not (``gpus``): ``auto`` -> ``cuda`` when
    one is visible, else ``cpu``; ``cuda`` where none is, a one-line ValueError."""
    if preference not in DEVICES:
        raise ValueError(f"device {preference!r}; allowed: {', '.join(DEVICES)}")
    if preference == "cuda" and not gpus:
        raise ValueError("device 'cuda' requested but no CUDA device is visible; allowed here: cpu, auto")
    if preference == "auto":
        return "cuda" if gpus else "cpu"
    return preference


def gpus_here() -> bool:
    """Whether this process would see a GPU: the driver reports one and ``CUDA_VISIBLE_DEVICES``
    (where set) does not hide them all (CUDA reads the list up to its first invalid entry: an empty
    list, or one starting ``-1``, hides every GPU)."""
    listed = os.environ.get(VISIBLE_ENV)
    if listed is not None:
        first = listed.split(",")[0].strip()
        if not first or first.startswith("-"):
            return False
    return _driver_gpus() > 0


@cache
def _driver_gpus() -> int:
    """The GPUs the driver reports (0 without one), asked once a process."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver (NVMLError_LibraryNotFound), or none that answers
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError:
        return 0
    finally:
        pynvml.nvmlShutdown()
