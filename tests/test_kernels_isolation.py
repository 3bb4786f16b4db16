"""``run_isolated``: a time limit that kills everything the command started (grandchildren in process
groups and sessions of their own included), exit status and output kept, on real processes."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from cutlass_kernels.isolation import kill_tree, run_isolated

# starts a grandchild in a process group of its own and one leading a session of its own, prints
# their pids, then sleeps (or exits, leaving them behind)
_SPAWN = """
import json, subprocess, sys, time
group = subprocess.Popen(["sleep", "60"], process_group=0)
session = subprocess.Popen(["sleep", "60"], start_new_session=True)
print(json.dumps([group.pid, session.pid]), flush=True)
if sys.argv[1] == "hang":
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a killed child of ours stays a zombie until reaped: not running all the same
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _wait_dead(pids: list[int], seconds: float = 5.0) -> list[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


# a hang lasts its 3 s limit: slow
@pytest.mark.parametrize("mode", [pytest.param("hang", marks=pytest.mark.slow), "exit"])
def test_the_limit_or_the_exit_kills_every_process_it_started(mode: str):
    done = run_isolated([sys.executable, "-c", _SPAWN, mode], 3.0)
    grandchildren = json.loads(done.output.strip().splitlines()[0])
    if mode == "hang":
        # killed at the limit: not before it (a wait never ends early), nor by waiting out the child
        # (whose 60 s would end in exit status 0)
        assert done.rc is None and done.timed_out and done.seconds >= 3.0
        assert "timed out after 3 s" in done.why(3.0)
    else:
        assert done.rc == 0 and not done.timed_out
    assert _wait_dead(grandchildren) == []


def test_exit_status_and_output_are_kept(tmp_path):
    done = run_isolated([sys.executable, "-c", "print('a'); print('b'); raise SystemExit(4)"], 30)
    assert (done.rc, done.output) == (4, "a\nb\n")
    assert done.why(30) == "exit status 4: a | b"
    with open(tmp_path / "log", "w") as log:
        logged = run_isolated(
            [sys.executable, "-c", "import sys; print('x'); print('y', file=sys.stderr)"], 30, log=log
        )
    assert logged.rc == 0 and logged.output == ""
    assert sorted((tmp_path / "log").read_text().split()) == ["x", "y"]


def test_kill_tree_of_no_session_kills_nothing():
    assert kill_tree(2**22 + 12345) == []
