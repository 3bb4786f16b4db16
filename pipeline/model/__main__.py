"""``python -m pipeline.model``: the reduced-order MoE layer model."""

import sys

from pipeline.model.cli import main

sys.exit(main())
