"""A dataset as ``pipeline.run`` leaves it after recording a sweep's intent and before it submits
anything: the helpers the intent, bad-input and resubmission tests share."""

from __future__ import annotations

from pathlib import Path

from pipeline.compose import composed
from pipeline.compose.select import select
from pipeline.data import ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset
from pipeline.launch.settings import LaunchSettings

ONE = ["workload=inference-ep8-f1536", "variant=mok-bf16"]


def intended_dataset(folder: Path) -> Dataset:
    """A dataset whose ledger holds the intent of a scale=ci sweep of one execution (seed 0); nothing ran."""
    dataset = Dataset(folder)
    (overrides, config), *_ = select([*ONE, "scale=ci", f"dataset_dir={dataset.root}"])
    settings = LaunchSettings(backend="local", cluster="local", gpus=None, timeout_min=60)
    intent = ledger.Intended(
        (ledger.Intention("inference-ep8-f1536-bf16-mok-native", tuple(overrides)),),
        settings=settings.to_json(),
        comparable=Comparable.of_config(composed(overrides, config).config),
    )
    ledger.append(dataset, intent)
    return dataset
