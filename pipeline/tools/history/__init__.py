"""Every execution's times across many datasets (nights, reruns), the steps in them, and a page.

Stage beside ``pipeline.compare``, whose side reader and noise model it reuses; it never writes into a
dataset.
"""

from pipeline.tools.history.series import history, ordered

__all__ = ["history", "ordered"]
