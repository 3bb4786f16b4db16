"""``python -m tests.fake_device_checks``: small programs run under the estimate's fake device, each
with what it measured, as JSON on stdout (fake CUDA must be installed before torch is imported, so
these run in a process of their own: tests/test_estimate.py)."""

from __future__ import annotations

import json

from pipeline.tools.estimate import fake_cuda

fake_cuda.install()

import torch  # noqa: E402  (after the fake CUDA device exists)

from pipeline.tools.estimate.device import FakeDevice  # noqa: E402
from pipeline.tools.estimate.memory import Tracker  # noqa: E402

MIB = 2**20


def _run(program) -> dict:
    tracker = Tracker()
    with FakeDevice(tracker, world_size=4) as device:
        device.phase = "run"
        value = program()
    peak, held = tracker.held()
    return {
        "value": value,
        "ops": dict(device.ops.get("run", {})),
        "syncs": [s.op for s in device.syncs],
        "peak": peak,
        "held": {k: v for k, v in held.items() if v},
    }


def views_launch_nothing() -> dict:
    def program() -> None:
        x = torch.empty(64, 32, device="cuda")  # an allocation: no kernel
        views = (x[2:10].T, x.view(torch.int32), x.unsqueeze(0), x.chunk(2, dim=1), x.detach())
        x.add_(1).mul(2)  # two kernels
        x[2:10].T.reshape(-1)  # a copy: the view cannot be flattened in place
        torch.zeros(4, device="cuda")  # one fill
        del views

    return _run(program)


def every_read_of_the_device_is_a_sync() -> dict:
    def program() -> list:
        routed = torch.tensor([3, 1, 4, 1, 5]).to("cuda")  # host data on the device: shadowed
        big = torch.ones(4096, 2048, device="cuda")  # too large to carry host values
        seen = [routed.tolist(), int(routed.sum()), bool((routed > 4).any())]
        seen.append(routed.nonzero().shape[0])
        seen.append(float(big.sum()))  # no host copy: read as zero, counted all the same
        seen.append(1 if big[0, 0] > 0 else 0)
        big.cpu()
        return seen

    return _run(program)


def memory_is_what_lives() -> dict:
    def program() -> None:
        a = torch.empty(MIB, device="cuda", dtype=torch.uint8)
        b = torch.empty(2 * MIB, device="cuda", dtype=torch.uint8)
        tracker = torch.utils._python_dispatch._get_current_dispatch_mode().tracker  # type: ignore[union-attr]
        tracker.name([a], "weights")
        del b
        torch.empty(2 * MIB + 1, device="cuda", dtype=torch.uint8)  # rounded up to 512-byte blocks

    return _run(program)


if __name__ == "__main__":
    checks = (views_launch_nothing, every_read_of_the_device_is_a_sync, memory_is_what_lives)
    print(json.dumps({check.__name__: check() for check in checks}))
