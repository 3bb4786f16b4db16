"""Compare two datasets: per-execution time ratios with intervals, speedups and selections.

Stage above ``pipeline.report``: it reads datasets with the report's scan and reduction and never
writes into a dataset.
"""

from pipeline.tools.compare.classify import DEFAULT_THRESHOLD
from pipeline.tools.compare.comparison import any_inconclusive, any_slower, compare
from pipeline.tools.compare.side import Side, load

__all__ = ["DEFAULT_THRESHOLD", "Side", "any_inconclusive", "any_slower", "compare", "load"]
