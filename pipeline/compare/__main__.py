import signal
import sys

from pipeline.compare.cli import main
from pipeline.exits import run_command

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends the listing quietly
sys.exit(run_command("pipeline.compare", main))
