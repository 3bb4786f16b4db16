"""Device ops per timed iteration with each form of Dist-MoE's fused SwiGLU backward on a GPU.

    python benchmarks/estimate_swiglu.py [EXECUTION ...] [--full-run]

For each execution (default: training-ep32-f3072-imb2.0-bf16-dist-moe-bf16 and
packing-ep64-f3072-profile-a-bf16-dist-moe-bf16) the estimate runs its iteration with the GPU's form
(whole-tensor); each form's ops are counted at the same shapes (each layer's [routed rows, 2F] on
the hot rank) and put in place of the whole-tensor form's. ``--full-run`` also runs
the whole estimate with the blocked form forced (minutes: a fake op costs about a millisecond), which
must give the same count.
"""

from __future__ import annotations

import sys

from pipeline.tools.estimate import fake_cuda

fake_cuda.install()

import torch  # noqa: E402  (after the fake CUDA device exists)
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from pipeline.matrix import EXECUTION_BY_ID  # noqa: E402
from pipeline.moe.swiglu import FUSED_FORMS  # noqa: E402
from pipeline.tools.estimate.device import launches_kernel  # noqa: E402
from pipeline.tools.estimate.jobs import Job  # noqa: E402
from pipeline.tools.estimate.presets import Preset  # noqa: E402
from pipeline.tools.estimate.run import estimate  # noqa: E402

DEFAULT = ("training-ep32-f3072-imb2.0-bf16-dist-moe-bf16", "packing-ep64-f3072-profile-a-bf16-dist-moe-bf16")


class _Count(TorchDispatchMode):
    """Kernel-launching ops, as the estimate counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += launches_kernel(func)
        return func(*args, **(kwargs or {}))


def swiglu_ops(form: str, rows: int, d_ff: int) -> int:
    """Kernel-launching ops of one fused SwiGLU backward of ``rows`` x F in ``form`` (on meta tensors:
    the forms' code does not depend on the device, and a meta op costs a few microseconds)."""
    h = torch.empty(rows, 2 * d_ff, device="meta", dtype=torch.bfloat16)
    da = torch.empty(rows, d_ff, device="meta", dtype=torch.bfloat16)
    with _Count() as count:
        FUSED_FORMS[form](da, h)
    return count.ops


def main(arguments: list[str]) -> None:
    torch.set_num_threads(1)
    full_run = "--full-run" in arguments
    executions = [a for a in arguments if not a.startswith("--")] or list(DEFAULT)
    for execution_id in executions:
        d_ff = EXECUTION_BY_ID[execution_id].workload.d_ff
        got = estimate(Job(execution_id, Preset.named("gb300")))
        rows = got["routed_rows"]
        counts = {form: sum(swiglu_ops(form, r, d_ff) for r in rows) for form in FUSED_FORMS}
        rest = got["device_ops"] - counts[got["swiglu_backward"]]
        print(f"{execution_id}: routed rows per layer {rows}")
        for form, ops in counts.items():
            print(f"  {form:13s} {rest + ops:8d} device ops per iteration ({ops} in the SwiGLU backward)")
        if full_run:
            forced = estimate(Job(execution_id, Preset.named("gb300"), swiglu="blocked"))
            print(f"  blocked, whole run: {forced['device_ops']} device ops ({forced['seconds']:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
