"""``python -m pipeline.list [overrides]``: the executions a multirun with these overrides would
launch, listed without launching anything (the command line lives with the Hydra adapter,
:mod:`pipeline.compose.matrix_cli`, which expands overrides as a multirun does)."""

import signal
import sys

from pipeline.compose.matrix_cli import main
from pipeline.exits import run_command

if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends the listing quietly
    sys.exit(run_command("pipeline.list", lambda: main(sys.argv[1:])))
