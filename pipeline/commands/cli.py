"""``moe-bench COMMAND [ARGS]``: every stage's command line behind one console script, with shell
completion for the commands, their options and the Hydra overrides of ``run`` and ``list``
(``python -m pipeline.<stage>`` works the same). Every command ends with a status of one table
(:mod:`pipeline.base.exits`), which ``moe-bench --help`` prints.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from pipeline.base.exits import BAD_INPUT, OK, TABLE, run_command
from pipeline.commands import completion
from pipeline.commands.completion import COMPLETE, COMPLETION

COMMANDS = {
    "run": "run executions of the matrix (Hydra overrides; --multirun sweeps)",
    "list": "list the executions a selection would launch",
    "status": "what is done, running, pending, failed or missing in a dataset",
    "resubmit": "run again what has no valid shard",
    "aggregate": "publish a dataset as CSV, JSON, figures and report.html",
    "compare": "what got faster or slower between two datasets (exit 1 if anything is slower)",
    "history": "each execution's times across datasets and the steps in them (exit 1 if one ends slower)",
    "model": "the reduced-order layer model",
    "estimate": "every execution's GPU path at full scale on fake tensors: memory, ops, host syncs",
}


# Each command's main as "module:attribute", imported only when it is called (each pulls in its own stack).
MAINS = {
    "run": "pipeline.commands.run:cli",
    "list": "pipeline.compose.matrix_cli:main",
    "status": "pipeline.commands.status:main",
    "resubmit": "pipeline.commands.resubmit:main",
    "aggregate": "pipeline.commands.aggregate:main",
    "compare": "pipeline.tools.compare.cli:main",
    "history": "pipeline.tools.history.cli:main",
    "model": "pipeline.tools.model.cli:main",
    "estimate": "pipeline.tools.estimate.cli:main",
}
# The commands whose output is a listing: ``... | head`` ends it quietly (no BrokenPipeError).
LISTINGS = ("list", "compare", "history")


def entry(name: str) -> Callable[[list[str]], int | None]:
    """The main of command ``name`` (one of :data:`COMMANDS`)."""
    module, attribute = MAINS[name].split(":")
    main: Callable[[list[str]], int | None] = getattr(importlib.import_module(module), attribute)
    return main


def as_module(name: str) -> NoReturn:
    """``python -m pipeline.<name>``: the command ``name`` under that name (its messages and ``--help``
    say ``pipeline.<name>``), with the arguments after it."""
    if name in LISTINGS:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    command = entry(name)
    sys.exit(run_command(f"pipeline.{name}", lambda: command(sys.argv[1:])))


def usage() -> str:
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name.ljust(width)}  {what}" for name, what in COMMANDS.items())
    statuses = "\n".join(f"  {code:>3}  {meaning}" for code, meaning in TABLE)
    return (
        f"usage: moe-bench COMMAND [ARGS] (moe-bench COMMAND --help for each)\n\ncommands:\n{listing}\n\n"
        f"exit status, every command:\n{statuses}\n\n"
        f'tab completion in bash: eval "$(moe-bench {COMPLETION} bash)"'
    )


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if not arguments or arguments[0] in ("-h", "--help"):
        print(usage())
        return OK if arguments else BAD_INPUT
    if arguments[0] in (COMPLETION, COMPLETE):
        return completion.main(arguments, COMMANDS, entry)
    name, rest = arguments[0], arguments[1:]
    if name not in COMMANDS:
        print(f"moe-bench: unknown command {name!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return BAD_INPUT
    called = sys.argv
    sys.argv = [f"moe-bench {name}", *rest]  # how each command names itself (its --help, Hydra's)
    try:
        command = entry(name)
        return run_command(f"moe-bench {name}", lambda: command(rest))
    finally:
        sys.argv = called


if __name__ == "__main__":
    sys.exit(main())
