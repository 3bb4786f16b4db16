"""``python -m pipeline.estimate``: the command ``moe-bench estimate`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("estimate")
