"""Command line of the reduced-order model: inputs from a JSON file and/or key=value arguments.

The file holds the inputs object or a whole published document (its ``inputs`` are taken). Without
``--inputs`` the published run's inputs are the starting point. Bad input is one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.base.exits import ArgumentParser, prog
from pipeline.base.folders import check_writable
from pipeline.tools.model.reduced_order import document_inputs, run

PUBLISHED_INPUTS = Path(__file__).with_name("published-inputs.json")

# Units for the readable summary; outputs without one are counts or labels.
_UNITS = {
    "mean_load_per_expert": "tokens",
    "capacity_per_expert": "tokens",
    "dropped_tokens": "tokens",
    "drop_percent": "%",
    "padding_waste_percent": "%",
    "slot_utilization_percent": "%",
    "total_expert_params_b": "B params",
    "active_params_b": "B params",
    "sparsity_percent": "%",
    "expert_weights_gb": "GB",
    "moe_tflop": "TFLOP",
    "dense_equiv_tflop": "TFLOP",
    "compute_savings_x": "x",
    "all2all_gb": "GB",
    "compute_time_ms": "ms",
    "all2all_time_ms": "ms",
    "step_time_ms": "ms",
    "comm_fraction_percent": "%",
    "achieved_tflops": "TFLOP/s per GPU",
    "mfu_percent": "%",
}


def parse_assignments(items: Sequence[str]) -> dict[str, object]:
    """``key=value`` arguments with numeric values."""
    values: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"argument {item!r} is not key=value")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key}={text!r} is not a number")
        values[key] = value
    return values


def load_inputs(path: Path) -> dict[str, object]:
    """A JSON object of inputs from a file."""
    try:
        values = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"cannot read inputs file {str(path)!r}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"inputs file {str(path)!r} is not JSON: {err}") from None
    if not isinstance(values, dict):
        raise ValueError(f"inputs file {str(path)!r} must hold a JSON object, got {type(values).__name__}")
    return values


def summary(result: dict) -> str:
    """A readable report: inputs, outputs with units, and the verdict last."""
    lines = ["Reduced-order MoE layer model", result["model"], "", "inputs:"]
    lines += [f"  {k:<22} {v}" for k, v in result["inputs"].items()]
    lines += ["", "outputs:"]
    for key, value in result["outputs"].items():
        if key == "verdict":
            continue
        shown = f"{value:,.4f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value}"
        lines.append(f"  {key:<26} {shown} {_UNITS.get(key, '')}".rstrip())
    lines += ["", f"verdict: {result['outputs']['verdict']}"]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog("pipeline.model"),
        description="Reduced-order model of one MoE layer: capacity, drops, padding, sparsity, all-to-all.",
    )
    p.add_argument("assignments", nargs="*", metavar="key=value", help="input overrides, e.g. top_k=4")
    p.add_argument(
        "--inputs",
        type=Path,
        metavar="FILE",
        help="JSON object of inputs, or a published document {inputs, outputs, profile} "
        "(default: the published run's inputs)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object {inputs, outputs, profile}")
    p.add_argument("--plot", type=Path, metavar="DIR", help="write the profile curves as PNG files to DIR")
    return p


def _check_plot(folder: Path) -> None:
    try:
        check_writable(folder)
    except ValueError as err:
        raise ValueError(f"--plot {err}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.plot is not None:
            _check_plot(args.plot)
        given = document_inputs(load_inputs(args.inputs or PUBLISHED_INPUTS))
        values = dict(given) | parse_assignments(args.assignments)
        result = run(values)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        print(summary(result))
    if args.plot is not None:
        from pipeline.tools.model.plot import plot_profile  # matplotlib only when plotting

        paths = plot_profile(result, args.plot)
        print("plots: " + ", ".join(str(p) for p in paths), file=sys.stderr if args.json else sys.stdout)
    return 0
