"""A dataset is untrusted input: the shard reader and the scan refuse, each with a one-line reason, a
shard that contradicts its execution id, a shard of an execution the dataset does not mean, impossible
window times (never hiding an older valid attempt), anything in shards/ but a regular file (never
opened) and links out of the dataset; a signal ends a command while the scan is blocked in a read."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pipeline import REPO_ROOT
from pipeline.base.bounds import ITERATION_MS_MIN, WINDOW_MS_MAX
from pipeline.base.vocabulary import kind_phases
from pipeline.data import ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset
from pipeline.data.meta import ExecutionMeta
from pipeline.data.reader import ShardError, read_shard
from pipeline.data.scan import ShardScan, scan_shards
from pipeline.data.schema import Identity, RankWindows
from pipeline.data.writer import write_shard
from pipeline.launch.settings import MAX_TIMEOUT_MIN, LaunchSettings
from pipeline.matrix import EXECUTION_BY_ID, Execution
from pipeline.matrix.scale import shape_for
from pipeline.tools.synthetic_shards import scale_preset, shard_metadata

MOK = EXECUTION_BY_ID["training-ep32-f3072-imb2.0-bf16-mok-native"]
DIST = EXECUTION_BY_ID["training-ep32-f3072-imb2.0-bf16-dist-moe-bf16"]
MOK_MX = EXECUTION_BY_ID["training-ep32-f3072-imb2.0-mxfp8-mok-native"]
BALANCED = EXECUTION_BY_ID["training-ep32-f3072-bf16-mok-native"]
PACKING_A = EXECUTION_BY_ID["packing-ep32-f3072-profile-a-bf16-mok-native"]
PACKING_B = EXECUTION_BY_ID["packing-ep32-f3072-profile-b-bf16-mok-native"]
INFERENCE = EXECUTION_BY_ID["inference-ep8-f1536-bf16-mok-native"]
OTHER = EXECUTION_BY_ID["inference-ep16-f1536-bf16-mok-native"]  # in the matrix, not meant below
INVENTED = Execution(replace(MOK.workload, ep=16), MOK.variant)  # training runs at EP 32 and 64 only
SETTINGS = LaunchSettings(backend="local", cluster="local", gpus=None, timeout_min=60).to_json()
SCAN_BOUND_S = 60  # far beyond any scan of a few shards, however loaded the host


def write(
    dataset: Path,
    named: Execution,
    attempt: int = 1,
    *,
    fields_of: Execution | None = None,
    loads_of: Execution | None = None,
    times: dict[str, list[float]] | None = None,
) -> Path:
    """A two-rank scale=ci attempt of ``named`` through the project's writer, its identity and metadata
    those of ``fields_of`` (default: ``named``) under ``named``'s id, its shape of ``loads_of``'s loads;
    seeded times of 1 to 2 ms per iteration, or ``times`` on rank 0."""
    fields_of = fields_of or named
    preset = scale_preset("ci", 2)
    shape, plan = shape_for((loads_of or fields_of).workload, preset), preset.timing
    rng = np.random.default_rng(attempt)
    identity = Identity.of(fields_of, shape.ranks, plan.iterations, attempt)
    meta = _metadata(fields_of, attempt, rng, loads_of)
    identity = replace(identity, execution_id=named.execution_id)
    meta = replace(meta, execution_id=named.execution_id)
    phases = kind_phases(fields_of.workload.kind)
    ranks = [
        RankWindows(
            r,
            meta.job_id,
            "cpu",
            {p: list(rng.uniform(1.0, 2.0, plan.windows) * plan.iterations) for p in phases},
        )
        for r in range(shape.ranks)
    ]
    if times is not None:
        ranks[0] = replace(ranks[0], times={**ranks[0].times, **times})
    return write_shard(Dataset(dataset), identity, ranks, meta)


def _metadata(
    execution: Execution, attempt: int, rng: np.random.Generator, loads_of: Execution | None = None
) -> ExecutionMeta:
    """Two-rank scale=ci metadata of ``execution`` (with the shape of ``loads_of``'s loads)."""
    preset = scale_preset("ci", 2)
    shape = shape_for((loads_of or execution).workload, preset)
    return shard_metadata(
        execution, attempt, f"{100 + attempt}", shape, preset.timing, "cpu", rng, scale="ci"
    )


def intend(dataset: Path, *executions: Execution) -> None:
    """Record a sweep's intent for ``executions`` with the settings the shards of :func:`write` hold."""
    intent = ledger.Intended(
        tuple(ledger.Intention(e.execution_id, ()) for e in executions),
        settings=SETTINGS,
        comparable=Comparable.of_config(_metadata(INFERENCE, 1, np.random.default_rng(0)).config),
    )
    ledger.append(Dataset(dataset), intent)


def scan(dataset: Path) -> ShardScan:
    """:func:`scan_shards` on a thread of its own, failing (not hanging) if it does not end."""
    done: list[ShardScan] = []
    worker = threading.Thread(target=lambda: done.append(scan_shards(Dataset(dataset))), daemon=True)
    worker.start()
    worker.join(SCAN_BOUND_S)
    assert done, f"the scan did not end within {SCAN_BOUND_S} s"
    return done[0]


def reasons(result: ShardScan) -> dict[str, str]:
    return {s.path: s.reason for s in result.skipped}


def rel(execution: Execution, attempt: int) -> str:
    return f"shards/execution={execution.execution_id}/attempt-{attempt}.parquet"


# 1. a shard's identity is what its execution id says, and its execution is one the dataset means


TRAINING = {f: EXECUTION_BY_ID[f"training-ep32-f{f}-bf16-mok-native"] for f in (1536, 6144)}
IMPLEMENTATION = "implementation='dist-moe' (the id says 'mok'), pipeline='bf16' (the id says 'native')"
WORKLOAD_ID = "workload_id='training-ep32-f3072-imb2.0-mxfp8' (the id says 'training-ep32-f3072-imb2.0-bf16')"
# case: (the execution its id names, whose fields it holds, whose layer loads it holds, what is named)
CONTRADICTIONS = {
    "mok-id-dist-moe-fields": (MOK, DIST, None, IMPLEMENTATION),
    "precision": (MOK, MOK_MX, None, "precision='mxfp8' (the id says 'bf16')"),
    "workload": (MOK, MOK_MX, None, WORKLOAD_ID),
    "profile": (PACKING_A, PACKING_B, None, "profile='b' (the id says 'a')"),
    "ep": (INFERENCE, OTHER, None, "ep=16 (the id says 8)"),
    "d_ff": (BALANCED, TRAINING[6144], None, "d_ff=6144 (the id says 3072)"),
    "kind": (INFERENCE, TRAINING[1536], None, "kind='training' (the id says 'inference')"),
    "imbalance": (MOK, None, BALANCED, "metadata shape.layer_loads=[1.0] (the id says [2.0])"),
}


@pytest.mark.parametrize("named,fields_of,loads_of,wrong", CONTRADICTIONS.values(), ids=CONTRADICTIONS)
def test_a_shard_that_contradicts_its_execution_id_is_refused(
    tmp_path: Path, named: Execution, fields_of: Execution | None, loads_of: Execution | None, wrong: str
) -> None:
    path = write(tmp_path, named, fields_of=fields_of, loads_of=loads_of)
    with pytest.raises(ShardError) as caught:
        read_shard(path)
    reason = caught.value.reason
    assert reason.startswith(f"the shard contradicts its execution id {named.execution_id!r}: ")
    assert wrong in reason and "\n" not in reason


def test_a_shard_of_an_id_outside_the_matrix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ShardError, match=f"execution id '{INVENTED.execution_id}' is not an execution"):
        read_shard(write(tmp_path, INVENTED))


def test_only_the_executions_the_dataset_means_are_published(tmp_path: Path) -> None:
    """A forged MoK shard with Dist-MoE fields, a shard of a matrix execution no intent names and one
    under an invented id: each skipped with its reason, so the dataset keeps its one pair."""
    intend(tmp_path, MOK, DIST)
    write(tmp_path, MOK)
    write(tmp_path, DIST)
    write(tmp_path, MOK, 2, fields_of=DIST)
    write(tmp_path, OTHER)
    write(tmp_path, INVENTED)
    result = scan(tmp_path)
    assert {e: s.attempt for e, s in result.newest.items()} == {MOK.execution_id: 1, DIST.execution_id: 1}
    assert result.newest[MOK.execution_id].identity.implementation == "mok"
    skipped = reasons(result)
    assert set(skipped) == {rel(MOK, 2), rel(OTHER, 1), rel(INVENTED, 1)}
    assert skipped[rel(MOK, 2)].startswith("the shard contradicts its execution id")
    for execution in (OTHER, INVENTED):
        assert skipped[rel(execution, 1)] == (
            f"execution '{execution.execution_id}' is not one of the dataset's: "
            "no intent in its ledger names it"
        )


def test_a_dataset_without_intents_means_the_matrix(tmp_path: Path) -> None:
    write(tmp_path, OTHER)
    write(tmp_path, INVENTED)
    result = scan(tmp_path)
    assert set(result.newest) == {OTHER.execution_id}
    assert reasons(result) == {
        rel(
            INVENTED, 1
        ): f"execution '{INVENTED.execution_id}' is not one of the dataset's: not in the matrix "
        "(the dataset records no intent)"
    }


def test_what_was_launched_before_the_first_intent_stays_the_datasets(tmp_path: Path) -> None:
    """A dataset whose first sweep recorded no intent, resubmitted later (an intent for one execution),
    keeps the shards of the first sweep."""
    dataset = Dataset(tmp_path)
    ledger.append(
        dataset, ledger.Submitted(OTHER.execution_id, 1, "101", [], "local", "local", "logs/x", SETTINGS)
    )
    write(tmp_path, OTHER)
    intend(tmp_path, MOK)
    write(tmp_path, MOK)
    write(tmp_path, INFERENCE)
    result = scan(tmp_path)
    assert set(result.newest) == {OTHER.execution_id, MOK.execution_id}
    assert set(reasons(result)) == {rel(INFERENCE, 1)}


# 2. window times within physical bounds; the newest valid attempt wins


@pytest.mark.parametrize("bad", [5e-324, -1.0, 0.0, float("nan"), float("inf"), -float("inf"), 1e300])
def test_impossible_window_times_never_hide_an_older_valid_attempt(tmp_path: Path, bad: float) -> None:
    write(tmp_path, MOK, 1)
    write(tmp_path, MOK, 2, times={"backward": [1.0, 1.0, bad, 1.0, 1.0]})
    result = scan(tmp_path)
    assert result.newest[MOK.execution_id].attempt == 1
    (skipped,) = result.skipped
    assert skipped.path == rel(MOK, 2)
    assert skipped.reason.startswith("window_ms must be positive and finite in every row, within 0.002 ms")
    assert f"1 row(s) are not, the first {bad!r} (phase backward, rank 0, window 2)" in skipped.reason


def test_the_window_bounds_are_per_iteration_and_the_longest_job(tmp_path: Path) -> None:
    iterations = scale_preset("ci", 2).timing.iterations
    least = ITERATION_MS_MIN * iterations
    fine = write(tmp_path, MOK, 1, times={"forward": [least, least, 1.0, 1.0, WINDOW_MS_MAX]})
    assert read_shard(fine).attempt == 1
    for attempt, ms in ((2, least * 0.999), (3, WINDOW_MS_MAX * 1.001)):
        path = write(tmp_path, MOK, attempt, times={"forward": [ms, 1.0, 1.0, 1.0, 1.0]})
        with pytest.raises(ShardError, match="window_ms must be positive and finite"):
            read_shard(path)
    # a window cannot outlast its job: the bound follows the launcher's longest time limit
    assert WINDOW_MS_MAX == MAX_TIMEOUT_MIN * 60_000


# 3. nothing but a regular file is opened; links stay inside the dataset


def test_special_files_and_links_out_are_skipped_unopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = tmp_path / "dataset"
    write(dataset, MOK, 1)
    folder = Dataset(dataset).shard_dir(MOK.execution_id)
    os.mkfifo(folder / "attempt-2.parquet")
    monkeypatch.chdir(folder)  # a socket's path must be short
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind("attempt-3.parquet")
    (folder / "attempt-4.parquet").mkdir()
    elsewhere = write(tmp_path / "another", MOK, 5)  # a valid shard, but of another dataset
    (folder / "attempt-5.parquet").symlink_to(elsewhere)
    (folder / "attempt-6.parquet").symlink_to(folder / "attempt-2.parquet")  # inside, to the FIFO
    (folder / "attempt-7.parquet").symlink_to(folder / "gone.parquet")
    try:
        result = scan(dataset)
    finally:
        listening.close()
    assert result.newest[MOK.execution_id].attempt == 1
    assert reasons(result) == {
        rel(MOK, 2): "a FIFO, not a regular file: not opened",
        rel(MOK, 3): "a socket, not a regular file: not opened",
        rel(MOK, 4): "a directory, not a regular file: not opened",
        rel(MOK, 5): "a link that leads outside the dataset: what a dataset names stays inside it",
        rel(MOK, 6): "a FIFO, not a regular file: not opened",
        rel(MOK, 7): "a link that leads to no file (No such file or directory)",
    }


def test_a_linked_execution_folder_out_of_the_dataset_is_skipped(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    write(dataset, MOK, 1)
    elsewhere = write(tmp_path / "another", INFERENCE, 1)
    Dataset(dataset).shard_dir(INFERENCE.execution_id).symlink_to(elsewhere.parent)
    result = scan(dataset)
    assert set(result.newest) == {MOK.execution_id}
    assert reasons(result) == {
        rel(INFERENCE, 1): "a link that leads outside the dataset: what a dataset names stays inside it"
    }


def test_a_link_that_stays_inside_the_dataset_is_read(tmp_path: Path) -> None:
    kept = write(tmp_path / "kept", MOK, 1)
    dataset = tmp_path / "dataset"
    folder = Dataset(dataset).shard_dir(MOK.execution_id)
    folder.parent.mkdir(parents=True)
    (dataset / "store").mkdir()
    kept.parent.rename(dataset / "store" / folder.name)
    folder.symlink_to(dataset / "store" / folder.name)
    assert scan(dataset).newest[MOK.execution_id].attempt == 1


def test_the_reader_refuses_a_device_unopened(tmp_path: Path) -> None:
    path = Dataset(tmp_path).shard_path(MOK.execution_id, 1)
    path.parent.mkdir(parents=True)
    path.symlink_to("/dev/zero")  # reading it would never end
    with pytest.raises(ShardError, match="a character device, not a regular file: not opened"):
        read_shard(path)


# 4. SIGINT / SIGTERM end a command while the scan is blocked in a read

# Every shard read blocks, as on a stalled network file system: the reader's open reaches a FIFO that
# no process writes (a FIFO's open waits for a writer). The marker says a read has begun.
STALL = """
import os
from pathlib import Path

import pyarrow

_open = pyarrow.OSFile


def _stalled(path, *args, **kwargs):
    Path(os.environ["STALL_MARKER"]).touch()
    return _open(os.environ["STALL_FIFO"], *args, **kwargs)


pyarrow.OSFile = _stalled
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "module,signum", [("pipeline.status", signal.SIGTERM), ("pipeline.aggregate", signal.SIGINT)]
)
def test_a_signal_ends_a_command_whose_scan_is_blocked(tmp_path: Path, module: str, signum: int) -> None:
    dataset = tmp_path / "dataset"
    write(dataset, MOK)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STALL)
    os.mkfifo(tmp_path / "stalled")
    marker = tmp_path / "reading"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)]),
        "STALL_FIFO": str(tmp_path / "stalled"),
        "STALL_MARKER": str(marker),
    }
    command = subprocess.Popen(
        [sys.executable, "-m", module, str(dataset)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        started = time.monotonic()
        while not marker.exists():
            assert command.poll() is None, command.communicate()[1][-2000:]
            assert time.monotonic() - started < 300, "the command never began to read a shard"
            time.sleep(0.1)
        time.sleep(1.0)  # the read is in its blocked open by now
        command.send_signal(signum)
        try:
            _, err = command.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{module} still running 60 s after {signal.Signals(signum).name}")
        name = signal.Signals(signum).name
        assert command.returncode == 128 + signum, err[-2000:]
        assert err.strip().splitlines()[-1] == f"{module}: interrupted by {name}"
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
