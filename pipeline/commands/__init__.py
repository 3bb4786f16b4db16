"""The commands, the top floor: ``moe-bench COMMAND`` (:mod:`pipeline.commands.cli`) and
``python -m pipeline.<command>`` (the modules at the top of ``pipeline/``, a few lines each) reach
them. The commands of the core (run, status, resubmit, aggregate) live here; those of the side tools
in ``pipeline/tools``.
"""
