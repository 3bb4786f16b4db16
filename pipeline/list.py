"""``python -m pipeline.list``: the command ``moe-bench list`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("list")
