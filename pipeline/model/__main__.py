"""``python -m pipeline.model``: the reduced-order MoE layer model."""

import sys

from pipeline.exits import run_command
from pipeline.model.cli import main

sys.exit(run_command("pipeline.model", main))
