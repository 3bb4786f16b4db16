"""``moe-bench COMMAND [ARGS]``: every stage's command line behind one console script, so that shell
completion finds them (``python -m pipeline.<stage>`` works the same)."""

from __future__ import annotations

import sys
from collections.abc import Callable

COMMANDS = {
    "run": "run executions of the matrix (Hydra overrides; --multirun sweeps)",
    "list": "list the executions a selection would launch",
    "status": "what is done, running, pending, failed or missing in a dataset",
    "resubmit": "run again what has no valid shard",
    "aggregate": "publish a dataset as CSV, JSON, figures and report.html",
    "compare": "what got faster or slower between two datasets (exit 1 if anything is slower)",
    "model": "the reduced-order layer model",
    "estimate": "every execution's GPU path at full scale on fake tensors: memory, ops, host syncs",
}


def _command(name: str) -> Callable[[list[str]], int | None]:
    """The command's main, imported only when it is called (each pulls in its own stack)."""
    if name == "run":
        from pipeline import run

        def hydra_main(arguments: list[str]) -> None:
            sys.argv = ["moe-bench run", *arguments]  # Hydra reads its command line from sys.argv
            run.cli()

        return hydra_main
    if name == "list":
        from pipeline.compose.matrix_cli import main as matrix

        return matrix
    if name == "status":
        from pipeline.status.__main__ import main as status

        return status
    if name == "resubmit":
        from pipeline.resubmit import main as resubmit

        return resubmit
    if name == "aggregate":
        from pipeline.aggregate import main as aggregate

        return aggregate
    if name == "compare":
        from pipeline.compare.cli import main as compare

        return compare
    if name == "estimate":
        from pipeline.estimate.__main__ import main as estimate

        return estimate
    from pipeline.model.cli import main as model

    return model


def usage() -> str:
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name.ljust(width)}  {what}" for name, what in COMMANDS.items())
    return f"usage: moe-bench COMMAND [ARGS] (moe-bench COMMAND --help for each)\n\ncommands:\n{listing}"


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if not arguments or arguments[0] in ("-h", "--help"):
        print(usage())
        return 0 if arguments else 2
    name, rest = arguments[0], arguments[1:]
    if name not in COMMANDS:
        print(f"moe-bench: unknown command {name!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return _command(name)(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
