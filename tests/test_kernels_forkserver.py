"""The fork server (:mod:`cutlass_kernels.forkserver`) under ``run_isolated``, on real processes: a
forked child sees what a fresh ``python -m`` process would (checked against one), ends with the same
exit status and output, is killed at its limit with everything it started, and a request the preload
would serve wrongly runs as a fresh process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cutlass_kernels.forkserver import ForkServer
from cutlass_kernels.isolation import kill_tree, run_isolated
from tests.test_kernels_isolation import _SPAWN, _alive, _wait_dead

ROOT = Path(__file__).resolve().parents[1]

# what a process sees of itself; the preloaded module is looked for before anything imports it
_PROBE = """
import json, os, sys
preloaded = "colorsys" in sys.modules
print(json.dumps({
    "name": __name__, "argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0],
    "asked": os.environ.get("PROBE_ASKED"), "leader": os.getsid(0) == os.getpid(),
    "stdin": sys.stdin.read(), "preloaded": preloaded,
}))
print("to stderr \u00e9", file=sys.stderr)
sys.exit(int(sys.argv[-1]))
"""

_ENDS = {
    "raise": "raise ValueError('boom')",
    "exit-text": "raise SystemExit('bye')",
    "exit-none": "raise SystemExit",
    "killed": "import os, signal; print('x', flush=True); os.kill(os.getpid(), signal.SIGKILL)",
    "atexit": "import atexit; atexit.register(print, 'at exit')",
}


@pytest.fixture
def modules(tmp_path: Path) -> Path:
    """A folder of the modules the tests run, and the working folder of their runs."""
    (tmp_path / "probe.py").write_text(_PROBE)
    (tmp_path / "spawn.py").write_text(_SPAWN)
    for name, body in _ENDS.items():
        (tmp_path / f"end_{name.replace('-', '_')}.py").write_text(body + "\n")
    return tmp_path


def _env(**more: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **more}


@pytest.fixture
def server(modules: Path):
    started = ForkServer(["colorsys"], _env(), ROOT)  # children run elsewhere: their path is their own
    yield started
    started.close()


def _module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-u", "-m", name, *args]


def test_a_forked_child_sees_what_a_fresh_process_would(server: ForkServer, modules: Path):
    argv = _module("probe", "a b", "3")
    forked = run_isolated(argv, 30, env=_env(PROBE_ASKED="yes"), cwd=modules, server=server)
    fresh = run_isolated(argv, 30, env=_env(PROBE_ASKED="yes"), cwd=modules)
    assert server.forked == 1 and server.ready["preloaded"] == ["colorsys"]
    assert (forked.rc, fresh.rc) == (3, 3)
    seen, expected = (json.loads(done.output.splitlines()[0]) for done in (forked, fresh))
    assert seen["preloaded"] and not expected["preloaded"]
    assert (
        {**seen, "preloaded": False}
        == expected
        == {
            "name": "__main__",
            "argv": ["a b", "3"],
            "cwd": str(modules),
            "path0": str(modules),
            "asked": "yes",
            "leader": True,
            "stdin": "",
            "preloaded": False,
        }
    )
    assert forked.output.splitlines()[1:] == fresh.output.splitlines()[1:] == ["to stderr \u00e9"]


@pytest.mark.parametrize("end", sorted(_ENDS))
def test_a_forked_child_ends_as_a_fresh_one_would(server: ForkServer, modules: Path, end: str):
    argv = _module(f"end_{end.replace('-', '_')}")
    forked = run_isolated(argv, 30, env=_env(), cwd=modules, server=server)
    fresh = run_isolated(argv, 30, env=_env(), cwd=modules)
    assert server.forked == 1
    assert forked.rc == fresh.rc and forked.rc == {"raise": 1, "exit-text": 1, "killed": -9}.get(end, 0)
    # a traceback names the frames that ran it, which differ; its last line does not
    assert forked.output.strip().splitlines()[-1:] == fresh.output.strip().splitlines()[-1:]


@pytest.mark.parametrize("mode", [pytest.param("hang", marks=pytest.mark.slow), "exit"])
def test_the_limit_or_the_exit_kills_every_process_a_forked_child_started(
    server: ForkServer, modules: Path, mode: str
):
    done = run_isolated(_module("spawn", mode), 3.0, env=_env(), cwd=modules, server=server)
    grandchildren = json.loads(done.output.strip().splitlines()[0])
    assert server.forked == 1
    assert (done.rc, done.seconds >= 3.0) == ((None, True) if mode == "hang" else (0, False))
    assert _wait_dead(grandchildren) == []


def test_what_the_preload_would_serve_wrongly_runs_as_a_fresh_process(server: ForkServer, modules: Path):
    asked = [
        [sys.executable, "-c", "import runpy; runpy.run_module('probe', run_name='__main__')", "0"],
        [sys.executable, "-u", "-B", "-m", "probe", "0"],  # an option the server did not start with
    ]
    runs = [run_isolated(argv, 30, env=_env(), cwd=modules, server=server) for argv in asked]
    other = _env(PYTHONPATH=f"{ROOT}{os.pathsep}{modules}")  # the interpreter's path differs
    runs.append(run_isolated(_module("probe", "0"), 30, env=other, cwd=modules, server=server))
    threads = _env(OMP_NUM_THREADS="7")  # torch's pool as it starts
    runs.append(run_isolated(_module("probe", "0"), 30, env=threads, cwd=modules, server=server))
    server.close()
    runs.append(run_isolated(_module("probe", "0"), 30, env=_env(), cwd=modules, server=server))
    assert server.forked == 0
    assert [done.rc for done in runs] == [0] * 5
    assert not any(json.loads(done.output.splitlines()[0])["preloaded"] for done in runs)


def test_closing_the_server_kills_what_it_forked_and_a_lost_server_is_said(modules: Path):
    server = ForkServer(["colorsys"], _env(), modules)
    with tempfile.TemporaryFile("w+") as out:
        hung = server.spawn(_module("spawn", "hang"), _env(), modules, out)
        assert hung is not None
        server.close()
        assert _wait_dead([hung.pid]) == []
    lost = ForkServer(["colorsys"], _env(), modules)
    with tempfile.TemporaryFile("w+") as out:
        left = lost.spawn(_module("spawn", "hang"), _env(), modules, out)
        assert left is not None
        os.kill(lost._proc.pid, signal.SIGKILL)  # from outside: its children's exits are lost with it
        with pytest.raises(ChildProcessError, match=f"the fork server ended before child {left.pid} did"):
            left.wait(30)
        assert _alive(left.pid)
        kill_tree(left.pid)
        assert _wait_dead([left.pid]) == []
    lost.close()


def test_the_preload_is_imported_once_before_any_child(modules: Path):
    server = ForkServer(["torch"], _env(), modules)
    try:
        code = "import sys; print('torch' in sys.modules)"
        (modules / "has_torch.py").write_text(code + "\n")
        done = run_isolated(_module("has_torch"), 60, env=_env(), cwd=modules, server=server)
        assert (done.rc, done.output, server.forked) == (0, "True\n", 1)
        assert server.ready["preloaded"] == ["torch"] and server.ready["seconds"] > 0
    finally:
        server.close()
    fresh = subprocess.run(_module("has_torch"), capture_output=True, text=True, cwd=modules, env=_env())
    assert fresh.stdout == "False\n"
