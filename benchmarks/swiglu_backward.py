"""CPU benchmark: the fused SwiGLU backward (Dist-MoE) against the unfused one (MoK), same inputs.

    python benchmarks/swiglu_backward.py [--rows 12288 --d-ff 96 --dtype bfloat16 --repeats 20]
    python benchmarks/swiglu_backward.py --only fused   # one form per process, for whole-process A/B

Prints each form's median milliseconds over ``repeats`` calls (after two warm-ups) and the ratio
unfused / fused. The defaults are a packing layer's hottest rank at scale=cpu widened to a round
row count; ``--d-ff`` is F (the GEMM-1 output is 2F wide).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cutlass_kernels.swiglu_torch import swiglu_backward
from pipeline.moe.swiglu import swiglu_backward_fused

FORMS = {"unfused": swiglu_backward, "fused": swiglu_backward_fused}


def median_ms(form: str, da: torch.Tensor, h: torch.Tensor, repeats: int) -> float:
    backward = FORMS[form]
    for _ in range(2):
        backward(da, h)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        backward(da, h)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=12288)
    parser.add_argument("--d-ff", type=int, default=96)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", choices=tuple(FORMS), default=None)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(args.rows, 2 * args.d_ff, generator=gen).to(dtype)
    da = torch.randn(args.rows, args.d_ff, generator=gen).to(dtype)
    forms = [args.only] if args.only else list(FORMS)
    ms = {form: median_ms(form, da, h, args.repeats) for form in forms}
    shape = f"rows={args.rows} F={args.d_ff} {args.dtype} threads={torch.get_num_threads()}"
    print(shape + "".join(f"  {form} {value:.3f} ms" for form, value in ms.items()))
    if len(ms) == 2:
        print(f"unfused / fused = {ms['unfused'] / ms['fused']:.2f}x")


if __name__ == "__main__":
    main()
