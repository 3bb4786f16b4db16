"""The side tools, a wing beside the core stages: comparing datasets (``compare``), series over many
(``history``), the full-scale GPU path on fake tensors (``estimate``) and the reduced-order layer model
(``model``). A tool may import any core stage; no core stage imports a tool (publishing reads the
estimate's kept table through :mod:`pipeline.data.estimates`).
"""
