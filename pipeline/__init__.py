"""Expert-parallel MoE benchmark pipeline: matrix, layers, execution, launch, data, model, report."""

from pathlib import Path

# The checkout the pipeline runs from (its conf/, the default outputs/, the git sha in provenance).
REPO_ROOT = Path(__file__).resolve().parents[1]
