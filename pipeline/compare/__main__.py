import signal
import sys

from pipeline.compare.cli import main

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends the listing quietly
sys.exit(main())
