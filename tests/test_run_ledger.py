"""The launch ledger: typed records a file each, safe concurrent appends, attempt numbering, paths that
move with the dataset."""

import json
import multiprocessing

import pytest

from pipeline.data import ledger
from pipeline.data.dataset import Dataset

ID = "inference-ep8-f1536-bf16-mok-native"


def submitted(attempt: int, execution_id: str = ID, job_id: str = "1") -> ledger.Submitted:
    return ledger.Submitted(
        execution_id=execution_id,
        attempt=attempt,
        job_id=job_id,
        overrides=[f"workload={execution_id}"],
        backend="local",
        cluster="local",
        log_dir=f"logs/{execution_id}/attempt-{attempt}",
        settings={"backend": "local", "cluster": "local", "gpus": None, "timeout_min": 60},
    )


def test_records_read_back_in_order_each_a_file_of_its_own(tmp_path):
    dataset = Dataset(tmp_path)
    records = [submitted(1), ledger.Failed(ID, 1, "1", reason="boom"), submitted(2, job_id="2")]
    for r in records:
        ledger.append(dataset, r)
    assert ledger.read(dataset) == records
    files = dataset.ledger_record_files()
    assert len(files) == 3
    assert [json.loads(p.read_text())["event"] for p in files] == ["submitted", "failed", "submitted"]
    assert json.loads(files[1].read_text()) == {
        "event": "failed",
        "execution_id": ID,
        "attempt": 1,
        "job_id": "1",
        "reason": "boom",
        "at": records[1].at,
    }


def test_an_unfinished_write_is_ignored(tmp_path):
    dataset = Dataset(tmp_path)
    records = [submitted(1), submitted(2)]
    ledger.append(dataset, records[0])
    (dataset.ledger_dir / ".00000000000000000001-h-1-000000.json.7.tmp").write_text('{"event": "subm')
    ledger.append(dataset, records[1])
    assert ledger.read(dataset) == records


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"event": "queued"}, "unknown ledger event 'queued'; allowed: submitted, started"),
        ({"event": "started", "execution_id": ID, "attempt": 1}, "ledger event 'started': job_id is missing"),
        ({**submitted(1).to_json(), "attempt": 0}, "attempt must be >= 1 and <= 1,000,000, got 0"),
        ({**submitted(1).to_json(), "attempt": 10**20}, "attempt must be >= 1 and <= 1,000,000, got 1"),
        ({**submitted(1).to_json(), "attempt": True}, "attempt must be an integer, got True"),
        (
            {"event": "intended", "executions": [], "settings": {}, "comparable": {"values": {}}},
            "at least one",
        ),
        (
            {"event": "intended", "executions": [], "settings": {}, "comparable": {"values": {"sede": 1}}},
            "unknown comparable setting",
        ),
    ],
)
def test_bad_records_are_refused(tmp_path, record, message):
    with pytest.raises(ValueError, match=message):
        ledger.from_json(record)
    dataset = Dataset(tmp_path)
    path = dataset.ledger_record_path(1, "host-1", 0)
    path.parent.mkdir()
    path.write_text(json.dumps(record) + "\n")
    # one bad file costs its own record, never the ledger: it is named with why
    records, unreadable = ledger.survey(dataset)
    assert records == [] and [where for where, _ in unreadable] == [f"ledger/{path.name}"]
    assert unreadable[0][1].startswith("not a ledger record") and message[:20] in unreadable[0][1]


def test_recorded_paths_are_relative_to_the_dataset(tmp_path):
    """A dataset moved elsewhere still finds its own files; an absolute recorded path is refused."""
    dataset = Dataset(tmp_path)
    ledger.append(dataset, submitted(1))
    moved = Dataset(tmp_path.rename(tmp_path.with_name("moved")))
    (record,) = ledger.read(moved)
    assert isinstance(record, ledger.Submitted) and record.requeued_from is None
    assert moved.locate(record.log_dir) == moved.root / "logs" / ID / "attempt-1"
    with pytest.raises(ValueError, match="leaves the dataset; records hold paths inside it"):
        moved.locate(f"/gone/site/logs/{ID}/attempt-1")


def _append_many(root, worker: int, n: int) -> None:
    for i in range(n):
        ledger.append(Dataset(root), submitted(i + 1, execution_id=f"e{worker}", job_id="9" * 20))


def test_concurrent_writers_lose_nothing(tmp_path):
    workers, n = 8, 150
    procs = [multiprocessing.Process(target=_append_many, args=(tmp_path, w, n)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    records = ledger.read(Dataset(tmp_path))
    assert len(records) == workers * n
    for w in range(workers):
        assert [r.attempt for r in records if r.execution_id == f"e{w}"] == list(range(1, n + 1))


def test_next_attempt_counts_the_ledger_and_the_shard_files(tmp_path):
    dataset = Dataset(tmp_path)
    assert ledger.next_attempt(dataset, ID) == 1
    ledger.append(dataset, submitted(1))
    ledger.append(dataset, submitted(4, execution_id="other"))
    assert ledger.next_attempt(dataset, ID) == 2
    shard = dataset.shard_path(ID, 3)
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"")
    (shard.parent / ".attempt-9.parquet.77.tmp").write_bytes(b"")  # a crashed write is no attempt
    assert ledger.next_attempt(dataset, ID) == 4
    assert ledger.next_attempt(dataset, "other") == 5


def test_submissions_keep_the_launch_settings(tmp_path):
    dataset = Dataset(tmp_path)
    settings = {"backend": "slurm", "timeout_min": 7, "setup": ["export A=1"], "additional_parameters": {}}
    record = ledger.Submitted(ID, 2, "9", ["scale=ci"], "slurm", "h200", f"logs/{ID}/attempt-2", settings)
    ledger.append(dataset, record)
    (back,) = ledger.read(dataset)
    assert back.settings == settings and back == record
    with pytest.raises(ValueError, match="ledger event 'submitted': settings is missing"):
        ledger.from_json({k: v for k, v in record.to_json().items() if k != "settings"})
