"""``python -m pipeline.model``: the command ``moe-bench model`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("model")
