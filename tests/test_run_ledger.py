"""The launch ledger: complete one-line records, safe concurrent appends, attempt numbering."""

import json
import multiprocessing

import pytest

from pipeline.data.schema import shard_path
from pipeline.launch import ledger

ID = "inference-ep8-f1536-bf16-mok-native"


def submitted(attempt: int, execution_id: str = ID, job_id: str = "1") -> dict:
    return {
        "event": "submitted",
        "execution_id": execution_id,
        "attempt": attempt,
        "overrides": [f"workload={execution_id}"],
        "job_id": job_id,
        "launcher": "local",
        "cluster": "local",
        "log_dir": "/x",
        "submitted_at": ledger.now(),
    }


def test_records_read_back_in_order(tmp_path):
    records = [
        submitted(1),
        {
            "event": "failed",
            "execution_id": ID,
            "attempt": 1,
            "job_id": "1",
            "at": ledger.now(),
            "reason": "boom",
        },
        submitted(2, job_id="2"),
    ]
    for r in records:
        ledger.append(tmp_path, r)
    assert ledger.read(tmp_path) == records
    lines = ledger.ledger_path(tmp_path).read_text().splitlines()
    assert [json.loads(line) for line in lines] == records


def test_a_torn_last_line_is_skipped_but_inner_garbage_is_an_error(tmp_path):
    record = submitted(1)
    ledger.append(tmp_path, record)
    path = ledger.ledger_path(tmp_path)
    with open(path, "a") as f:
        f.write('{"event": "subm')  # an append that never completed
    assert ledger.read(tmp_path) == [record]
    with open(path, "a") as f:
        f.write("\n")
    with pytest.raises(ValueError, match=r"ledger.jsonl:2"):
        ledger.read(tmp_path)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"event": "queued"}, "unknown ledger event 'queued'; allowed: submitted, started"),
        ({"event": "started", "execution_id": ID, "attempt": 1}, r"lacks field\(s\) \['job_id', 'at'\]"),
        ({**submitted(1), "attempt": 0}, "attempt must be an integer >= 1, got 0"),
    ],
)
def test_bad_records_are_refused(tmp_path, record, message):
    with pytest.raises(ValueError, match=message):
        ledger.append(tmp_path, record)
    assert ledger.read(tmp_path) == []


def _append_many(dataset, worker: int, n: int) -> None:
    for i in range(n):
        ledger.append(dataset, {**submitted(i + 1, execution_id=f"e{worker}", job_id="j" * 300)})


def test_concurrent_appenders_never_interleave(tmp_path):
    workers, n = 4, 150
    procs = [multiprocessing.Process(target=_append_many, args=(tmp_path, w, n)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    records = ledger.read(tmp_path)
    assert len(records) == workers * n
    for w in range(workers):
        assert [r["attempt"] for r in records if r["execution_id"] == f"e{w}"] == list(range(1, n + 1))


def test_next_attempt_counts_the_ledger_and_the_shard_files(tmp_path):
    assert ledger.next_attempt(tmp_path, ID) == 1
    ledger.append(tmp_path, submitted(1))
    ledger.append(tmp_path, submitted(4, execution_id="other"))
    assert ledger.next_attempt(tmp_path, ID) == 2
    shard = shard_path(tmp_path, ID, 3)
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"")
    (shard.parent / ".attempt-9.parquet.77.tmp").write_bytes(b"")  # a crashed write is no attempt
    assert ledger.next_attempt(tmp_path, ID) == 4
    assert ledger.next_attempt(tmp_path, "other") == 5
