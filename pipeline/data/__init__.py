"""The data contracts between stages: the dataset folder, the shard schema (atomic writer, validated
reader, the scan that picks each execution's attempt) and the launch ledger."""

from pipeline.data.dataset import Dataset
from pipeline.data.schema import SCHEMA, SCHEMA_VERSION

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Dataset"]
