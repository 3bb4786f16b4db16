"""How every command ends: one table of exit statuses, interrupts as one line, argument errors as one.

The table holds for every command of ``moe-bench`` (``python -m pipeline.<command>`` alike): ``0``
all is well; ``1`` something failed or is not published (an execution failed, status found failed or
missing executions, aggregate left an intended execution without a published row, compare found
something slower); ``2`` bad input, refused in one line before anything is launched or written;
``130`` / ``143`` interrupted by SIGINT (Ctrl-C) / SIGTERM, after one line that says what was stopped.
The first of these signals decides: the line and the status name it, whatever arrives after it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from pipeline.base.folders import SHOWN, check_path, cut
from pipeline.base.printable import printable

OK, FAILED, BAD_INPUT = 0, 1, 2
SIGNALS = (signal.SIGINT, signal.SIGTERM)
TABLE = (
    (OK, "all is well"),
    (FAILED, "something failed or is not published (an execution failed, executions are failed or missing, "
     "an intended execution has no published row, something got slower)"),
    (BAD_INPUT, "bad input, refused in one line before anything is launched or written"),
    (128 + signal.SIGINT, "interrupted by SIGINT (Ctrl-C), after one line saying what was stopped"),
    (128 + signal.SIGTERM, "interrupted by SIGTERM, likewise (of several signals, the first counts)"),
)  # fmt: skip


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: raised in the main thread (like KeyboardInterrupt, which it replaces
    for both signals) so that what runs can stop its jobs and record them before the command ends."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.detail = ""  # what stopping did, said by whatever stopped (``stopped X; 2 not started``)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def status(self) -> int:
        return 128 + self.signum


# the read end of a pipe into which the C-level signal handler writes each signal's number as it
# arrives (``signal.set_wakeup_fd``): Python runs the handlers of signals that arrived together in the
# order of their numbers (SIGINT before SIGTERM), so only this pipe knows which came first
_arrivals: int | None = None


def _first_arrived(signum: int) -> int:
    """The first of :data:`SIGNALS` that reached the process, read from the arrivals pipe (``signum``,
    the signal whose handler runs, where the pipe holds none)."""
    if _arrivals is None:
        return signum
    try:
        arrived = os.read(_arrivals, 4096)
    except BlockingIOError:
        return signum
    return next((s for s in arrived if s in SIGNALS), signum)


def _raise(signum: int, _frame: object) -> None:
    # the first signal decides how the command ends: later ones (a second Ctrl-C, a kill) neither
    # cut short the stopping of its jobs nor change the status or the line that say which signal it was
    for s in SIGNALS:
        signal.signal(s, _after_first)
    raise Interrupted(_first_arrived(signum))


def _after_first(_signum: int, _frame: object) -> None:
    """A signal after the first of an interrupted command: it is stopping already."""


@contextmanager
def interruptible() -> Iterator[None]:
    """Inside, the first SIGINT or SIGTERM raises :class:`Interrupted` in the main thread; later ones
    are dropped while the command stops its jobs (by a Python handler, which a process started then
    does not inherit) and ignored once the block is left, so that the command ends as that first
    signal says (the first to arrive, also when several arrive before Python runs a handler)."""
    global _arrivals
    read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _arrivals = read
    previous = {s: signal.signal(s, _raise) for s in SIGNALS}
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is _after_first:
            # blocking runs the handler of a signal caught already (ignoring a caught one would print a
            # warning); setting SIG_IGN then drops those pending, and stays through the interpreter's
            # exit, which would put back the default handler of a Python one and so die of a late signal
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
            for s in SIGNALS:
                signal.signal(s, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        else:
            for s, handler in previous.items():
                signal.signal(s, handler)
        signal.set_wakeup_fd(wakeup)
        _arrivals = None
        os.close(read)
        os.close(write)


@contextmanager
def held(*, drop: bool = False) -> Iterator[None]:
    """Inside, SIGINT and SIGTERM wait (blocked) and arrive on the way out, so that a step (submit a
    job, record it) is done whole or not at all; with ``drop`` they are dropped instead (a second
    Ctrl-C while an interrupted sweep stops its job). A process started inside inherits the block: it
    never sees these signals, and the process that started it decides what becomes of it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        while drop and (pending := signal.sigpending() & set(SIGNALS)):
            signal.sigwait(pending)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def run_command(name: str, main: Callable[[], int | None]) -> int:
    """Run a command's ``main`` with the table's ends: its status, or 130 / 143 after one line on
    stderr when interrupted, with what was stopped."""
    try:
        with interruptible():
            return main() or OK
    except Interrupted as stop:
        detail = f": {stop.detail}" if stop.detail else ""
        print(f"{name}: interrupted by {stop.name}{detail}", file=sys.stderr, flush=True)
        return stop.status
    except KeyboardInterrupt:  # a SIGINT handler of the command's own raised it
        print(f"{name}: interrupted by SIGINT", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT


def prog(module: str) -> str:
    """The command's name as it was called: ``moe-bench status`` (the console script sets it as
    ``argv[0]``) or ``python -m pipeline.status``."""
    return sys.argv[0] if sys.argv[0].startswith("moe-bench ") else f"python -m {module}"


def help_text(doc: str) -> str:
    """A docstring as ``--help`` prints it: without the double backticks of code spans."""
    return doc.replace("``", "")


def shorten(message: object) -> str:
    """``message`` as one line of a refusal: its lines joined, every word longer than
    :data:`pipeline.base.folders.SHOWN` characters (a path of thousands) cut to its start and end."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    return re.sub(rf"\S{{{SHOWN + 1},}}", lambda word: cut(word.group(0)), text)


def refuse(command: str, message: object) -> int:
    """Say why ``command`` refuses its input, in one line on stderr; the status it then ends with."""
    print(printable(f"{command}: {shorten(message)}"), file=sys.stderr, flush=True)
    return BAD_INPUT


def path_text(text: str) -> str:
    """A path argument as given, once :func:`pipeline.base.folders.check_path` allows it (an argparse
    type)."""
    try:
        return check_path(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def path_argument(text: str) -> Path:
    """A path argument as a Path, once :func:`pipeline.base.folders.check_path` allows it."""
    return Path(path_text(text))


class ArgumentParser(argparse.ArgumentParser):
    """Argument errors in one line (no usage block, long values cut) with exit status 2, like every
    other bad input; every path argument (``type=Path``) is checked as it is parsed
    (:func:`path_argument`), so an empty or over-long one is an argument error too."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        if kwargs.get("type") is Path:
            kwargs["type"] = path_argument
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, f"{self.prog}: error: {shorten(message)} (see --help)\n")


def dataset_parser(module: str, doc: str | None) -> ArgumentParser:
    """The parser of a command that reads a dataset: named as it was called, its module's docstring as
    ``--help`` text, one-line errors, and the dataset folder as its first argument."""
    parser = ArgumentParser(
        prog=prog(module),
        description=help_text(doc or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dataset_dir", type=path_text, help="dataset folder holding ledger/ and shards/")
    return parser
