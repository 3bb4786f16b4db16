"""Bad command lines through the real commands (``python -m ...`` in a fresh process): a path of
thousands of characters, an empty path, a ``+key`` the config does not have each end in exactly one
line on stderr that names the value (cut to its start and end) and what is allowed, exit status 2,
and nothing written, in the dataset or the current folder. And an interrupt's several signals: the
first decides the line and the status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import REPO_ROOT
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from tests.sweeps import left_running

LONG = "a" * 5000  # one name of 5,000 characters: ENAMETOOLONG in any system call
ONE = ["workload=inference-ep8-f1536", "variant=mok-bf16", "scale=ci"]
RUN = ["pipeline.run", *ONE, "dataset_dir={d}"]  # {d}: a dataset the refused run must never make
MULTIRUN = ["pipeline.run", "--multirun", *ONE, "dataset_dir={d}"]


def command(cwd: Path, *arguments: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m ARGUMENTS`` run from ``cwd`` (an empty folder the command must leave empty)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", *arguments], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    """{c}: the empty folder the command runs in; {d}: the dataset a run is pointed at (never made);
    {e}: an empty existing folder; {long}: a path whose last name is 5,000 characters long, {head} its
    start as a refusal shows it."""
    for name in ("cwd", "empty"):
        (tmp_path / name).mkdir()
    long = str(tmp_path / LONG)
    return {
        "c": str(tmp_path / "cwd"),
        "d": str(tmp_path / "dataset"),
        "e": str(tmp_path / "empty"),
        "long": long,
        "head": repr(long[:60])[:-1],
    }


def refused_in_one_line(places: dict[str, str], arguments: list[str], says: str) -> str:
    """Run the command, check the refusal and that nothing was written; its line."""
    given = [a.format(**places) for a in arguments]
    done = command(Path(places["c"]), *given)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert says.format(**places) in lines[0], lines[0][:2000]
    assert not list(Path(places["c"]).iterdir()) and not list(Path(places["e"]).iterdir())
    assert not Path(places["d"]).exists()  # no dataset folder, so no ledger
    return lines[0]


def case(arguments: list[str], says: str, **marks: object) -> object:
    """A parameter named by its command line, less what every run of its kind is given."""
    given = [a for a in arguments if a not in ONE and a != "dataset_dir={d}"]
    words = [a.replace(LONG, "LONG").replace("{long}", "LONG").replace("{e}", "DIR") or "''" for a in given]
    return pytest.param(arguments, says, id=" ".join(words), **marks)  # type: ignore[arg-type]


LONG_VALUES = [
    case(["pipeline.run", *ONE, "dataset_dir={long}"], "pipeline.run: dataset_dir {head}"),
    case(["pipeline.run", "--multirun", *ONE, "dataset_dir={long}"], "pipeline.run: dataset_dir {head}"),
    case([*RUN, f"variant={LONG}"], "variant 'aaaa"),
    case(
        [
            "pipeline.run",
            "--multirun",
            "variant=mok-bf16",
            "scale=ci",
            "dataset_dir={d}",
            f"workload=inference-ep8-f1536,{LONG}",
        ],
        "pipeline.run: workload 'aaaa",
    ),
    case([*RUN, "hydra.run.dir={long}"], "pipeline.run: hydra.run.dir {head}"),
    case([*MULTIRUN, "hydra.sweep.dir={long}"], "pipeline.run: hydra.sweep.dir {head}"),
    case(
        [*MULTIRUN, "hydra.sweep.dir={e}", f"hydra.sweep.subdir={LONG}"],
        "pipeline.run: hydra.sweep.subdir 'aaaa",
    ),
    case([*RUN, f"hydra.job.name={LONG}"], "pipeline.run: hydra.job.name 'aaaa"),
    case([*RUN, "--config-name", LONG], "pipeline.run: --config-name 'aaaa"),
    case(["pipeline.list", f"variant={LONG}"], "error: variant 'aaaa"),
    case(["pipeline.list", *ONE, "dataset_dir={long}"], "error: dataset_dir {head}"),
    case(["pipeline.status", "{long}"], "python -m pipeline.status: error: argument dataset_dir: {head}"),
    case(["pipeline.resubmit", "{long}"], "python -m pipeline.resubmit: error: argument dataset_dir: {head}"),
    case(["pipeline.aggregate", "{long}"], "python -m pipeline.aggregate: error: argument dataset: {head}"),
    case(["pipeline.aggregate", "{e}", "--out", "{long}"], "error: argument --out: {head}"),
    case(["pipeline.model", "--plot", "{long}"], "python -m pipeline.model: error: argument --plot: {head}"),
    case(
        ["pipeline.commands.cli", "status", "{long}"], "moe-bench status: error: argument dataset_dir: {head}"
    ),
]


@pytest.mark.parametrize(("arguments", "says"), LONG_VALUES)
def test_a_value_of_thousands_of_characters_is_refused_in_one_short_line(places, arguments, says):
    line = refused_in_one_line(places, arguments, says)
    assert "...aaaa" in line and " characters)" in line  # named by its start and end, and its length
    assert len(line) < 1200, len(line)


EMPTY_PATHS = [
    case(["pipeline.run", *ONE, "dataset_dir="], "pipeline.run: dataset_dir '' is an empty path; allowed:"),
    case(
        ["pipeline.run", "--multirun", *ONE, "dataset_dir="], "pipeline.run: dataset_dir '' is an empty path"
    ),
    case(["pipeline.list", *ONE, "dataset_dir="], "error: dataset_dir '' is an empty path; allowed:"),
    case(
        ["pipeline.status", ""], "python -m pipeline.status: error: argument dataset_dir: '' is an empty path"
    ),
    case(
        ["pipeline.resubmit", ""],
        "python -m pipeline.resubmit: error: argument dataset_dir: '' is an empty path",
    ),
    case(
        ["pipeline.aggregate", ""],
        "python -m pipeline.aggregate: error: argument dataset: '' is an empty path",
    ),
    case(["pipeline.aggregate", "{e}", "--out", ""], "error: argument --out: '' is an empty path"),
    case(
        ["pipeline.commands.cli", "status", ""],
        "moe-bench status: error: argument dataset_dir: '' is an empty path",
    ),
    case(["pipeline.compare", "", "{e}"], "'' is an empty path"),
]


@pytest.mark.parametrize(("arguments", "says"), EMPTY_PATHS)
def test_an_empty_path_is_refused_not_taken_as_the_current_folder(places, arguments, says):
    line = refused_in_one_line(places, arguments, says)
    assert line.endswith("allowed: a path ('.' names the current folder)") or line.endswith(
        "allowed: a path ('.' names the current folder) (see --help)"
    )


UNKNOWN_KEYS = [
    case([*RUN, "+nosuchkey=1"], "pipeline.run: +nosuchkey=1: the config has no key"),
    case([*MULTIRUN, "++nosuchkey=1"], "pipeline.run: ++nosuchkey=1:"),
    case([*RUN, "++hydra.nosuchkey=1"], "pipeline.run: ++hydra.nosuchkey=1:"),
    case(
        ["pipeline.list", *ONE, "+workload.foo=1"],
        "error: +workload.foo=1: the config has no key workload.foo",
    ),
]


@pytest.mark.parametrize(("arguments", "says"), UNKNOWN_KEYS)
def test_a_key_the_config_does_not_have_is_refused_naming_it_and_what_may_be_added(places, arguments, says):
    line = refused_in_one_line(places, arguments, says)
    assert "+ adds only hydra.launcher.KEY" in line and "hydra.callbacks.NAME" in line and "scale.KEY" in line


def test_the_documented_extension_points_still_take_a_plus(places):
    """The README's ``+hydra.launcher.additional_parameters.comment=C``, a Hydra callback, a scale key
    its file leaves out and ``++`` of a key the config has: composed as before."""
    cwd = Path(places["c"])
    listed = command(
        cwd,
        "pipeline.list",
        *ONE,
        f"dataset_dir={places['d']}",
        "+hydra.launcher.additional_parameters.comment=C",
        "+hydra.callbacks.record._target_=tests.hydra_callbacks.RecordJobs",
        "++scale.min_timed_ms=6000",
        "++seed=3",
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stdout.splitlines()[-1] == "1 executions, 1 workloads, 0 pairs"
    shown = command(
        cwd,
        "pipeline.run",
        *ONE,
        f"dataset_dir={places['d']}",
        "hydra/launcher=slurm",
        "cluster=h200",
        "+hydra.launcher.additional_parameters.comment=C",
        "--cfg",
        "hydra",
        "-p",
        "hydra.launcher.additional_parameters",
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "comment: C" in shown.stdout.splitlines()
    assert not list(cwd.iterdir()) and not Path(places["d"]).exists()


def arrived(pid: int, signum: int, patience_s: float = 30.0) -> None:
    """Wait until ``signum``, sent to process ``pid``, is no longer pending there (it was handed to
    the process), from ``/proc/PID/status``."""
    deadline = time.monotonic() + patience_s
    bit = 1 << (signum - 1)
    while time.monotonic() < deadline:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        if not (int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)) & bit:
            return
        time.sleep(0.001)
    raise AssertionError(f"signal {signum} still pending in process {pid} after {patience_s} s")


def test_of_signals_that_arrive_before_python_runs_a_handler_the_first_decides(tmp_path):
    """SIGTERM, then SIGINT 50 ms later, taken by a thread sleeping in C while the main thread (which
    blocks both) waits for their sender: Python runs both handlers once that wait returns, SIGINT's
    first (by number); the command still ends as the first to arrive says."""
    script = tmp_path / "busy.py"
    script.write_text(
        "import os, signal, subprocess, sys, threading, time\n"
        "from pipeline.base.exits import SIGNALS, run_command\n"
        "def main():\n"
        "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # takes the signals\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # this thread's mask alone\n"
        "    me = os.getpid()\n"
        "    subprocess.run(['sh', '-c', f'sleep 0.2; kill -TERM {me}; sleep 0.05; kill -INT {me}'])\n"
        "    return 0\n"
        "sys.exit(run_command('busy', main))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert (done.returncode, done.stderr) == (128 + signal.SIGTERM, "busy: interrupted by SIGTERM\n")


@pytest.mark.slow
@pytest.mark.parametrize(
    "signals",
    [
        (signal.SIGINT, signal.SIGINT, signal.SIGTERM),  # Ctrl-C, Ctrl-C, kill
        (signal.SIGTERM, signal.SIGINT, signal.SIGINT),
    ],
    ids=["int-int-term", "term-int-int"],
)
def test_the_first_of_several_signals_decides_the_line_and_the_status(tmp_path, signals):
    """Three signals within 0.2 s of a running sweep: it stops its job and records it whole, then ends
    with one line and the status of the first signal (a later one neither cuts the stopping short nor
    kills the process with its own default action). Both executions are planted to hang, so the
    signals come while one of them runs whatever the host's speed."""
    dataset = tmp_path / "d"
    hang = ",".join(f"hang:inference-ep8-f1536-bf16-{v}:0" for v in ("mok-native", "dist-moe-bf16"))
    sweep = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.run",
            "--multirun",
            "workload=inference-ep8-f1536",
            "variant=mok-bf16,dist-moe-bf16",
            "scale=ci",
            f"dataset_dir={dataset}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "MOE_BENCH_PLANT": hang},
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    assert sweep.stdout is not None
    for line in sweep.stdout:
        if line.startswith("start "):  # the first execution runs, and hangs
            break
    for signum, delay in zip(signals, (0.0, 0.05, 0.1), strict=True):
        time.sleep(delay)
        sweep.send_signal(signum)
        if signum == signals[0]:
            # sent is not yet arrived: on a busy host two signals can both wait for the process to
            # run, and the kernel then hands over the lower-numbered first (SIGINT before SIGTERM)
            arrived(sweep.pid, signum)
    _, err = sweep.communicate(timeout=120)
    first = signal.Signals(signals[0]).name
    assert sweep.returncode == 128 + signals[0], (sweep.returncode, err)
    assert err.splitlines() == [err.strip()], err  # one line
    assert err.startswith(f"pipeline.run: interrupted by {first}: stopped inference-ep8-f1536-"), err
    assert "(recorded as interrupted); 0 done, 0 failed, 1 not started; " in err, err
    interrupted = [r for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Interrupted)]
    assert [r.signal for r in interrupted] == [first]
    assert left_running(dataset) == []
