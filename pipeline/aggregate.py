"""``python -m pipeline.aggregate``: the command ``moe-bench aggregate`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("aggregate")
