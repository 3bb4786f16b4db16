"""Aggregation of shards into the published comparison files (CSV, pairs CSV, JSON, figures)."""

from pipeline.report.build import CSV_NAME, JSON_NAME, PAIRS_NAME, Aggregate, aggregate

__all__ = ["CSV_NAME", "JSON_NAME", "PAIRS_NAME", "Aggregate", "aggregate"]
