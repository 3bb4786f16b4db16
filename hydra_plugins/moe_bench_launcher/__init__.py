"""Hydra launcher plugin of the MoE benchmark (``hydra/launcher=local``)."""
