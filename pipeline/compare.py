"""``python -m pipeline.compare``: the command ``moe-bench compare`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("compare")
