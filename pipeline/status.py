"""``python -m pipeline.status``: the command ``moe-bench status`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("status")
