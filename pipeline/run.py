"""``python -m pipeline.run``: the command ``moe-bench run`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("run")
