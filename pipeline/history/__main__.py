import signal
import sys

from pipeline.exits import run_command
from pipeline.history.cli import main

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends the listing quietly
sys.exit(run_command("pipeline.history", main))
