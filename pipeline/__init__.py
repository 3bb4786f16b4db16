"""Expert-parallel MoE benchmark pipeline: matrix, layers, execution, launch, data, model, report."""

from pathlib import Path

# The checkout the pipeline runs from (the default outputs/, the git sha in provenance).
REPO_ROOT = Path(__file__).resolve().parents[1]


def outputs_base() -> Path:
    """Where the default ``outputs/`` goes: the checkout when running from one, else (an installed
    package) the current directory."""
    return REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else Path.cwd()
