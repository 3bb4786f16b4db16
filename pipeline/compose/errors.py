"""Hydra's and OmegaConf's errors about a command line, in one line.

Their messages run over several lines (the options available, the config search path, the node's
type); an operator needs what was wrong and what is allowed.
"""

from __future__ import annotations

import re

from hydra.errors import MissingConfigException


def one_line(err: BaseException) -> str:
    """``err``'s message as one line: its lines joined, the config search path left out, the
    options of a missing config listed after ``Available options``."""
    if isinstance(err, MissingConfigException) and err.options:
        first = str(err).strip().splitlines()[0]
        group = re.search(r"Available options in '[^']*'", str(err))
        return (
            f"{first}; {group.group(0) if group else 'Available options'}: {', '.join(sorted(err.options))}"
        )
    parts = []
    for line in str(err).strip().splitlines():
        line = line.strip()
        if line.startswith("Config search path"):
            break
        if line.startswith(("full_key:", "object_type=", "reference_type=")) or not line:
            continue
        parts.append(line.rstrip(":") + ":" if line.endswith(":") else line)
    text = " ".join(parts).replace(": ", ": ", 1)
    cause = err.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip().splitlines()[0] not in text:
        text += f" ({str(cause).strip().splitlines()[0]})"
    return text
