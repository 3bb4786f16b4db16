"""``python -m jobs.gpu_run OUT_DIR [...]``: the device run (what ``jobs/gpu-run.sh`` runs)."""

import sys

from jobs.gpu_run.main import main

sys.exit(main())
