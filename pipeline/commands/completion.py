"""Shell completion of ``moe-bench``: the commands (``pipeline.cli.COMMANDS``), each command's options
(read from its own ``--help``, so a new command needs nothing here) and, for ``run`` and ``list``,
the Hydra overrides (Hydra's own completion of this project's config, and the names of the chosen
suite's workloads and variants: ``workload=inf<TAB>``).

``moe-bench --completion bash`` prints the function to ``eval``; on every TAB it calls
``moe-bench --complete LINE WORD`` (the line up to the cursor and the word bash completes, which
stops at ``=`` and ``:``) and offers what that prints, one candidate a line; nothing printed leaves
bash to complete file names.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Callable, Mapping

from pipeline.base.exits import BAD_INPUT, OK

COMPLETION = "--completion"  # moe-bench --completion bash: the shell function to eval
COMPLETE = "--complete"  # what that function asks: moe-bench --complete LINE WORD
OPTIONS = ("--help", COMPLETION)
Entry = Callable[[str], Callable[[list[str]], int | None]]  # a command's name -> its main
HYDRA_COMMANDS = ("run", "list")  # their arguments are Hydra overrides of conf/config.yaml
BASH = f"""_moe_bench_complete() {{
    local IFS=$'\\n'
    local line="${{COMP_LINE:0:COMP_POINT}}" word="${{COMP_WORDS[COMP_CWORD]}}"
    COMPREPLY=($(moe-bench {COMPLETE} "$line" "$word" 2>/dev/null))
}}
complete -o default -o nospace -F _moe_bench_complete moe-bench
"""


def main(arguments: list[str], commands: Mapping[str, str], entry: Entry) -> int:
    """``arguments`` (``--completion bash`` or ``--complete LINE WORD``) for the console script's
    ``commands``, each of whose main ``entry`` imports."""
    if arguments[0] == COMPLETION:
        if arguments[1:] != ["bash"]:
            print(f"moe-bench: {COMPLETION} takes one shell; allowed: bash", file=sys.stderr)
            return BAD_INPUT
        print(BASH, end="")
        return OK
    if len(arguments) != 3:
        print(f"moe-bench: {COMPLETE} takes LINE WORD (what the completion function passes)", file=sys.stderr)
        return BAD_INPUT
    line, word = arguments[1], arguments[2]
    for candidate in candidates(line, commands, entry):
        print(_as_word(candidate, line, word))
    return OK


def candidates(line: str, commands: Mapping[str, str], entry: Entry) -> list[str]:
    """Completions of the last token of ``line`` (``moe-bench status --st``), whole tokens; a
    command or an option ends with a space (the function completes with ``nospace``, which Hydra's
    ``scale.`` and ``scale=`` need)."""
    tokens = line.split()
    if line.endswith((" ", "\t")) or not tokens:
        tokens.append("")
    token, before = tokens[-1], tokens[1:-1]
    if not before:
        return sorted(f"{c} " for c in [*commands, *OPTIONS] if c.startswith(token))
    command = before[0]
    if command not in commands:
        return []
    if token.startswith("-"):
        return sorted(f"{o} " for o in options(command, entry) if o.startswith(token))
    if command in HYDRA_COMMANDS:
        return overrides(" ".join([*before[1:], token]))
    return []


def options(command: str, entry: Entry) -> set[str]:
    """The options a command's ``--help`` names."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        entry(command)(["--help"])
    found = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", out.getvalue()))
    return found - {"-"} | ({"--multirun", "--resume"} if command == "run" else set())


def overrides(line: str) -> list[str]:
    """Hydra's completions of the last override of ``line`` in this project's config; a workload's or a
    variant's name from the suite the line chooses (``suite=NAME`` of ``conf/suite``, else the report's)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.plugins.completion_plugin import DefaultCompletionPlugin

    from pipeline.compose import CONFIG_DIR, CONFIG_NAME, register
    from pipeline.compose.store import CHOICES
    from pipeline.matrix import REPORT
    from pipeline.matrix.suite import load

    words = line.split()
    key, _, start = (words[-1] if words and not line.endswith((" ", "\t")) else "").partition("=")
    if key in CHOICES:
        chosen = [w.partition("=")[2] for w in words[:-1] if w.startswith("suite=")]
        try:
            suite = load(chosen[-1]) if chosen else REPORT
        except ValueError:  # a suite of one's own folder, or none: nothing to offer
            return []
        names = suite.workload_names() if key == "workload" else suite.variant_names()
        return sorted(f"{key}={n}" for n in names if n.startswith(start))
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        plugin = DefaultCompletionPlugin(GlobalHydra.instance().config_loader())
        return list(plugin._query(config_name=CONFIG_NAME, line=line))


def _as_word(candidate: str, line: str, word: str) -> str:
    """``candidate`` (a whole token) as a replacement of bash's current ``word``, which is only the
    token's tail when the token holds ``=`` or ``:`` (bash's word breaks)."""
    token = "" if not line.split() or line.endswith((" ", "\t")) else line.split()[-1]
    return candidate[len(token) - len(word) :] if token.endswith(word) else candidate
