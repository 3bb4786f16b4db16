"""``python -m pipeline.tools.estimate.worker``: estimates, one JSON job a line on stdin, one JSON result a
line on stdout. Fake CUDA is installed before torch is imported, which is why the estimate runs in
processes of its own. A job that fails gives ``{"execution_id": ..., "error": "..."}``."""

from __future__ import annotations

import json
import sys

from pipeline.tools.estimate import fake_cuda


def main() -> int:
    fake_cuda.install()
    import torch

    from pipeline.tools.estimate.jobs import Job
    from pipeline.tools.estimate.run import estimate  # after the fake CUDA device exists

    torch.set_num_threads(1)  # one worker per core; the host work is small and threads only contend

    results, sys.stdout = sys.stdout, sys.stderr  # whatever the code prints stays off the results
    for line in sys.stdin:
        job = Job.of(json.loads(line))
        try:
            result = estimate(job)
        except Exception as err:  # noqa: BLE001 - reported per job; the other jobs go on
            result = {"execution_id": job.execution, "error": f"{type(err).__name__}: {err}"}
        print(json.dumps(result), file=results, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
