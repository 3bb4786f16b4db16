"""A server that imports torch once and forks each ``python -m MODULE ARGS`` child from itself: the
device run starts dozens of short kernel checks, and each would otherwise spend seconds importing
torch before its first kernel (on the GPU machine, of a 15-minute window; on a CPU host, most of a dry
run's CPU). Torch-free here, for the runner; the server imports what it preloads.

A forked child is a fresh process as far as its module can tell: it leads a new session, its output
goes to the file it was handed, its standard input is ``/dev/null``, and its working folder,
environment and ``sys.argv`` are the request's; it runs its module as ``__main__`` and exits as the
interpreter would. Nothing in the server touches CUDA, whose state must not be forked: torch
initializes it lazily, in the child. A request the preload would serve wrongly (another interpreter
or interpreter option, or a different value of a variable the interpreter or torch read as they
start, such as ``PYTHONPATH`` or ``OMP_NUM_THREADS``) is not forked: :meth:`ForkServer.spawn` answers
None and the caller runs the command as it would have (:func:`cutlass_kernels.isolation.run_isolated`).
Not multiprocessing's forkserver (:mod:`pipeline.tools.ranks` uses that for functions): there is one
of those per process, started under the parent's environment and ``sys.path``, and what it forks runs
a function, not a module with an output file and a session of its own.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

# variables read as the interpreter, torch or its thread pools start: a child whose value differs from
# the server's is run as a fresh process instead
STARTUP_PREFIXES = ("PYTHON", "OMP_", "MKL_", "OPENBLAS_", "GOMP_", "KMP_", "LD_", "TORCH", "PYTORCH")
_MESSAGE = 1 << 20  # the largest request: an environment of up to a mebibyte


class ForkServer:
    """A running server (``python -m cutlass_kernels.forkserver``) that has imported ``preload`` under
    ``env`` in ``cwd``, and the children it forked for this process."""

    def __init__(
        self,
        preload: Sequence[str],
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        log: IO[str] | None = None,
    ) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = dict(env)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "cutlass_kernels.forkserver", str(theirs.fileno()), *preload],
            env=self.env,
            cwd=cwd,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=None if log is None else subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches the runner, which ends the server
        )
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()  # one request at a time on the socket
        self._ended = threading.Condition()
        self._pids: dict[int, int] = {}  # request id -> pid
        self._exits: dict[int, int] = {}  # pid -> exit status
        self._next = 0
        self.ready: dict[str, Any] = {}  # what the server said once its imports were done
        self.forked = 0
        self._closed = False
        threading.Thread(target=self._listen, name="forkserver", daemon=True).start()

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike[str] | None, out: IO[Any]
    ) -> Forked | None:
        """``argv`` forked from the server, its output into ``out``; None where ``argv`` is not
        ``[sys.executable, (-u), -m, MODULE, ...]``, its environment differs from the server's in what
        starts the interpreter or torch, or the server is gone."""
        command = _module_command(argv)
        if command is None or self._closed or _startup(env) != _startup(self.env):
            return None
        module, args = command
        with self._lock:
            self._next += 1
            ident = self._next
            request = {"id": ident, "module": module, "args": args, "env": dict(env)}
            request["cwd"] = os.fspath(cwd or os.getcwd())
            try:
                socket.send_fds(self._sock, [json.dumps(request).encode()], [out.fileno()])
            except OSError:
                return None
        with self._ended:
            self._ended.wait_for(lambda: ident in self._pids or self._closed)
            pid = self._pids.pop(ident, None)
        if pid is None:
            return None
        self.forked += 1
        return Forked(self, pid)

    def _listen(self) -> None:
        """The server's messages: ready, each request's pid, each child's exit status."""
        while True:
            try:
                data = self._sock.recv(_MESSAGE)
            except OSError:
                data = b""
            with self._ended:
                if not data:  # the server is gone: so are the exits it would have sent
                    self._closed = True
                    self._ended.notify_all()
                    return
                message = json.loads(data)
                if "ready" in message:
                    self.ready = message
                elif "rc" in message:
                    self._exits[message["pid"]] = message["rc"]
                else:
                    self._pids[message["id"]] = message["pid"]
                self._ended.notify_all()

    def wait(self, pid: int, timeout: float | None) -> int:
        """``pid``'s exit status; raises :class:`subprocess.TimeoutExpired` after ``timeout`` seconds,
        and :class:`ChildProcessError` where the server ended first (killed from outside: the status
        is lost with it)."""
        with self._ended:
            if not self._ended.wait_for(lambda: pid in self._exits or self._closed, timeout):
                raise subprocess.TimeoutExpired(str(pid), timeout or 0.0)
            if pid not in self._exits:
                raise ChildProcessError(f"the fork server ended before child {pid} did")
            return self._exits[pid]

    def close(self) -> None:
        """End the server: it kills whatever it forked that still runs, then exits."""
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._sock.close()


class Forked:
    """A forked child as :func:`cutlass_kernels.isolation.run_isolated` waits on one (a Popen's
    ``pid`` and ``wait``)."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid

    def wait(self, timeout: float | None = None) -> int:
        return self.server.wait(self.pid, timeout)


def _module_command(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    argv = list(argv)
    if argv[:1] != [sys.executable]:
        return None
    options = argv[1 : argv.index("-m")] if "-m" in argv else None
    if options is None or set(options) - {"-u"} or len(argv) < len(options) + 3:
        return None
    return argv[len(options) + 2], argv[len(options) + 3 :]


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


def serve(sock: socket.socket, preload: Sequence[str]) -> int:
    """Import ``preload``, say so, then fork a child per request until the runner closes the socket;
    each child's exit status goes back as it is reaped. Whatever still runs then is killed."""
    import importlib
    import select
    import signal
    import time
    import warnings

    from cutlass_kernels.isolation import kill_tree

    began = time.monotonic()
    for name in preload:
        importlib.import_module(name)
    threads = len(os.listdir("/proc/self/task"))
    seconds = round(time.monotonic() - began, 2)
    ready = {"ready": True, "preloaded": list(preload), "seconds": seconds, "threads": threads}
    sock.send(json.dumps(ready).encode())
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    children: set[int] = set()
    try:
        while True:
            readable, _, _ = select.select([sock.fileno(), wake_r], [], [])
            if wake_r in readable:
                os.read(wake_r, 4096)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                children.discard(pid)
                sock.send(json.dumps({"pid": pid, "rc": os.waitstatus_to_exitcode(status)}).encode())
            if sock.fileno() in readable:
                data, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 1)
                if not data:
                    return 0
                request = json.loads(data)
                led_r, led_w = os.pipe()  # the child says when it leads its session
                with warnings.catch_warnings():
                    # Python 3.12 warns of a fork with threads: the preloaded numpy's OpenBLAS pool,
                    # which stops itself at a fork and starts again where it is next used
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
                if pid == 0:
                    for fd in (wake_r, wake_w, led_r):
                        os.close(fd)
                    _child(request, fds[0], sock, led_w)
                for fd in (fds[0], led_w):
                    os.close(fd)
                # its pid goes back once it leads its session, which is how a kill finds it (as
                # subprocess returns once its child has started a session and run the command)
                os.read(led_r, 1)
                os.close(led_r)
                children.add(pid)
                sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())
    finally:
        for pid in children:
            kill_tree(pid)
        for pid in children:
            os.waitpid(pid, 0)


def _child(request: dict[str, Any], out: int, sock: socket.socket, led: int) -> None:
    """Become the requested process: run its module as ``__main__``, then exit with its status."""
    import atexit
    import runpy
    import signal
    import traceback

    code: int = 1
    try:
        sock.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        os.write(led, b"\0")
        os.close(led)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        sys.path[0] = os.getcwd()  # as ``python -m`` puts it
        os.environ.clear()
        os.environ.update(request["env"])
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own, open until it exits
        # unbuffered, as under ``python -u`` (output written before a kill is in the file), encoded as
        # the server's own streams were, which its start chose as a fresh process's would
        sys.stdout, sys.stderr = (
            _unbuffered(fd, stream) for fd, stream in ((1, sys.__stdout__), (2, sys.__stderr__))
        )
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as end:
        if end.code is None or isinstance(end.code, int):
            code = end.code or 0
        else:
            print(end.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, exit status 1
        traceback.print_exc()
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _unbuffered(fd: int, like: IO[str] | None) -> IO[str]:
    encoding, errors = (like.encoding, like.errors) if isinstance(like, io.TextIOWrapper) else (None, None)
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding, errors, write_through=True)


def main(argv: list[str]) -> int:
    return serve(socket.socket(fileno=int(argv[0])), argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
