"""Expert-parallel MoE benchmark pipeline: matrix, layers, execution, launch, data, report, and its tools.

The folders are its stages, bottom to top (docs/ARCHITECTURE.md); each module at this level is the
``python -m pipeline.<command>`` of one command."""

from pathlib import Path

# The checkout the pipeline runs from (the default outputs/, the git sha in provenance).
REPO_ROOT = Path(__file__).resolve().parents[1]
# Hydra's configs and the cluster presets: in the package (a link to conf/ in a checkout), so an
# installed wheel reads the same files.
CONFIG_DIR = Path(__file__).resolve().parent / "conf"


def outputs_base() -> Path:
    """Where the default ``outputs/`` goes: the checkout when running from one, else (an installed
    package) the current directory."""
    return REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else Path.cwd()
