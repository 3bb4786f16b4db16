"""``python -m pipeline.history``: the command ``moe-bench history`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("history")
