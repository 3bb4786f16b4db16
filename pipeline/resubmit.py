"""``python -m pipeline.resubmit``: the command ``moe-bench resubmit`` (:mod:`pipeline.commands.cli`)."""

from pipeline.commands.cli import as_module

if __name__ == "__main__":
    as_module("resubmit")
