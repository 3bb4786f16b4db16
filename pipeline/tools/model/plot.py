"""PNG curves of the model's profile: drop and padding waste against capacity, and expert loads."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _capacity_curve(points: list[list[float]], label: str, capacity: float, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([x for x, _ in points], [y for _, y in points], marker=".")
    ax.axvline(capacity, color="grey", linestyle="--", label=f"capacity_factor = {capacity:g}")
    ax.set_xlabel("capacity factor (x mean load)")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_profile(result: dict, directory: str | Path) -> list[Path]:
    """Write drop_vs_capacity.png, waste_vs_capacity.png and expert_loads.png; return their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    prof, capacity = result["profile"], result["inputs"]["capacity_factor"]
    paths = [
        _capacity_curve(
            prof["drop_vs_capacity"],
            "dropped tokens (%)",
            capacity,
            out / "drop_vs_capacity.png",
        ),
        _capacity_curve(
            prof["waste_vs_capacity"],
            "padding waste (%)",
            capacity,
            out / "waste_vs_capacity.png",
        ),
    ]
    loads = prof["expert_loads"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(range(len(loads)), loads, color="tab:blue")
    ax.axhline(capacity, color="tab:red", linestyle="--", label=f"capacity ({capacity:g} x mean)")
    ax.axhline(1.0, color="grey", linestyle=":", label="mean load")
    ax.set_xlabel(f"expert, most loaded first (load quantile midpoint, {len(loads)} equally likely)")
    ax.set_ylabel("load / mean load")
    ax.legend()
    paths.append(_save(fig, out / "expert_loads.png"))
    return paths
