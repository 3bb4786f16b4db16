"""Claims and heartbeats are untrusted input, as the rest of a dataset: names checked, special files
skipped unopened, a heartbeat from the future beyond the skew allowance stale, attempt numbers
bounded, a wrong-typed entry named and skipped, never looped on; and writers write only inside the
dataset. Crafted claims folders, read and written the way status, resubmit and sweeps do."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from pipeline.data import claims, ledger
from pipeline.data.dataset import MAX_ATTEMPT, Dataset
from tests.intents import intended_dataset

MOK = "inference-ep8-f1536-bf16-mok-native"
ELSEWHERE = claims.Owner("1-elsewhere-7", "elsewhere", 7, 1, "boot")


def forged(
    dataset: Dataset, owner: claims.Owner = ELSEWHERE, attempt: int = 2, beat: str | None = None
) -> None:
    """A claim of ``attempt`` of MOK by ``owner`` (written as a file, not through ``take``), and the
    owner's heartbeat file holding ``beat`` (raw JSON text), if given."""
    record = {"execution_id": MOK, "attempt": attempt, "owner": owner.__dict__, "at": time.time()}
    path = dataset.claim_path(MOK, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    if beat is not None:
        dataset.owners_dir.mkdir(parents=True, exist_ok=True)
        (dataset.owners_dir / f"{owner.sweep}.json").write_text(beat)


@pytest.mark.parametrize(
    ("beat", "alive"),
    [
        ("{}", False),
        ('{"at": 1e300}', False),  # forged into the future: every claim of it blocked for good, before
        ('{"at": Infinity}', False),
        ('{"at": NaN}', False),
        ('{"at": true}', False),
        ('{"at": "now"}', False),
        ("[1, 2", False),
        ("{now}", True),  # fresh
        ("{now+20}", True),  # a clock a little ahead: within the skew allowance
        ("{now+31}", False),  # beyond it
        ("{now-31}", False),  # stale
    ],
)
def test_a_heartbeat_from_the_future_or_no_time_is_stale(tmp_path, beat, alive):
    dataset = Dataset(tmp_path)
    now = time.time()
    text = beat.replace("{now+20}", f'{{"at": {now + 20}}}').replace("{now+31}", f'{{"at": {now + 31}}}')
    text = text.replace("{now-31}", f'{{"at": {now - 31}}}').replace("{now}", f'{{"at": {now}}}')
    forged(dataset, beat=text)
    assert claims.alive(dataset, ELSEWHERE, now=now) is alive


def test_a_special_file_as_a_heartbeat_is_never_opened_for_reading(tmp_path):
    """A FIFO (or a folder, or a link out) in a heartbeat's place is no heartbeat, and reading it does
    not block; status names it."""
    dataset = Dataset(tmp_path)
    forged(dataset)
    dataset.owners_dir.mkdir(parents=True)
    os.mkfifo(dataset.owners_dir / f"{ELSEWHERE.sweep}.json")
    (dataset.owners_dir / "other.json").mkdir()
    (dataset.owners_dir / "link.json").symlink_to("/etc/hostname")
    answers: list[bool] = []
    reader = threading.Thread(target=lambda: answers.append(claims.alive(dataset, ELSEWHERE)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert answers == [False]
    assert claims.beat_time(dataset, "link") is None and claims.beat_time(dataset, "other") is None
    named = dict(claims.unreadable(dataset))
    assert named[f"claims/.owners/{ELSEWHERE.sweep}.json"] == "not a regular file: no heartbeat"
    assert named["claims/.owners/link.json"] == "not a regular file: no heartbeat"


@pytest.mark.parametrize(
    ("owner", "why"),
    [
        ({**ELSEWHERE.__dict__, "sweep": "../../../outside"}, "sweep '../../../outside' is not a plain name"),
        ({**ELSEWHERE.__dict__, "host": "\x1b[31mred"}, "host '\\x1b[31mred' is not a plain line"),
        ({**ELSEWHERE.__dict__, "pid": -1}, "is no process's"),
        ({**ELSEWHERE.__dict__, "pid": "7"}, "owner.pid must be an integer"),
    ],
)
def test_a_claim_whose_owner_names_a_path_or_escapes_is_no_claim(tmp_path, owner, why):
    """Before, ``alive`` opened ``claims/.owners/../../../outside.json`` and resubmit printed the
    host's escapes raw: now such a claim is unreadable, named with why, and nothing is opened."""
    dataset = Dataset(tmp_path)
    path = dataset.claim_path(MOK, 2)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"execution_id": MOK, "attempt": 2, "owner": owner, "at": 1.0}))
    outside = tmp_path.parent / "outside.json"
    assert claims.newest(dataset, MOK) is None and not outside.exists()
    (where, reason), *_ = claims.unreadable(dataset)
    assert where == f"claims/{MOK}/attempt-2.json" and reason.startswith("not a claim (") and why in reason
    assert "\x1b" not in reason


def test_attempt_numbers_are_bounded(tmp_path):
    """An empty ``attempt-99999999999999999999.json`` numbered every later attempt past 1e20, and each
    job died of it: a name beyond the bound is no attempt (named), and the next attempt is 1 + the
    highest within it; a dataset whose numbers are used up refuses in one line."""
    dataset = intended_dataset(tmp_path)
    folder = dataset.claim_dir(MOK)
    folder.mkdir(parents=True)
    (folder / "attempt-99999999999999999999.json").write_text("")
    (folder / f"attempt-{MAX_ATTEMPT + 1}.json").write_text("")
    assert ledger.next_attempt(dataset, MOK) == 1
    assert set(dict(claims.unreadable(dataset))) == {
        f"claims/{MOK}/attempt-99999999999999999999.json",
        f"claims/{MOK}/attempt-{MAX_ATTEMPT + 1}.json",
    }
    (folder / f"attempt-{MAX_ATTEMPT}.json").write_text("")
    with pytest.raises(ValueError, match=f"{MOK} has used every attempt number"):
        ledger.next_attempt(dataset, MOK)
    with pytest.raises(ValueError, match="attempt must be >= 1 and <= 1,000,000"):
        dataset.shard_path(MOK, MAX_ATTEMPT + 1)


def test_a_claims_entry_of_the_wrong_type_is_refused_in_one_line_never_looped_on(tmp_path):
    """``claims/<id>`` a regular file made ``take`` fail as if raced, and the sweep loop on it at full
    CPU for ever: now taking an attempt there is a ValueError naming the entry, at once."""
    dataset = intended_dataset(tmp_path)
    dataset.claims_dir.mkdir()
    (dataset.claims_dir / MOK).write_text("in the way")
    me = claims.Owner.this_process()
    with pytest.raises(ValueError, match=f"claims/{MOK} in .* is a file, where the layout keeps a folder"):
        claims.take(dataset, MOK, 1, me)
    assert claims.newest(dataset, MOK) is None and claims.highest_attempt(dataset, MOK) == 0
    assert dict(claims.unreadable(dataset)) == {f"claims/{MOK}": "not a folder: no claim is read"}


@pytest.mark.parametrize("folder", ["shards/execution=X", "claims/X", "logs/X", "ledger", "claims/.owners"])
def test_a_folder_that_links_out_or_is_a_file_is_never_written_through(tmp_path, folder):
    """Every writer checks where it writes (``Dataset.check_folder``): a link out of the dataset, or a
    file where the layout keeps a folder, is refused naming it; nothing lands outside."""
    root, outside = tmp_path / "dataset", tmp_path / "outside"
    outside.mkdir()
    dataset = Dataset(root)
    path = root / folder.replace("X", MOK)
    path.parent.mkdir(parents=True)
    path.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="links out of the dataset .*remove the link"):
        dataset.check_folder(path / "attempt-1")
    path.unlink()
    path.write_text("")
    with pytest.raises(ValueError, match="is a file, where the layout keeps a folder"):
        dataset.check_folder(path)
    path.unlink()
    inside = root / "elsewhere-inside"
    inside.mkdir()
    path.symlink_to(inside, target_is_directory=True)  # a link that stays inside is the layout's own
    assert dataset.check_folder(path) == path
    assert list(outside.iterdir()) == []


def test_writers_refuse_a_link_out(tmp_path):
    """The writers themselves: a claim, a ledger record and a heartbeat through a link out are
    refused, and nothing is written outside."""
    root, outside = tmp_path / "dataset", tmp_path / "outside"
    outside.mkdir()
    dataset = Dataset(root)
    (root / "claims").mkdir(parents=True)
    (root / "claims" / MOK).symlink_to(outside, target_is_directory=True)
    (root / "ledger").symlink_to(outside, target_is_directory=True)
    (root / "claims" / ".owners").symlink_to(outside, target_is_directory=True)
    me = claims.Owner.this_process()
    with pytest.raises(ValueError, match="links out"):
        claims.take(dataset, MOK, 1, me)
    with pytest.raises(ValueError, match="links out"):
        ledger.append(dataset, ledger.Started(MOK, 1, "7"))
    with pytest.raises(ValueError, match="links out"):
        claims.Heartbeat(dataset, me.sweep).__enter__()
    assert list(outside.iterdir()) == []


def test_an_owner_on_another_host_lives_by_its_own_or_its_jobs_heartbeat(tmp_path):
    """A sweep gone silent whose local job still beats still lives, and says since when it is silent;
    when the job's heartbeat is stale too, the owner is gone."""
    dataset = Dataset(tmp_path)
    now = time.time()
    forged(dataset, beat=json.dumps({"at": now - 100}))
    assert not claims.alive(dataset, ELSEWHERE, now=now)
    job = dataset.owners_dir / f"{claims.job_beat_name(ELSEWHERE.sweep, '4242')}.json"
    job.write_text(json.dumps({"at": now - 2}))
    life = claims.life(dataset, ELSEWHERE, now=now)
    assert life.alive and life.job == "4242" and life.silent_since == now - 100
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 100))
    assert life.describe() == f"silent since {since}, its job 4242 still alive"
    assert claims.job_alive(dataset, ELSEWHERE.sweep, "4242", now=now)
    assert not claims.job_alive(dataset, ELSEWHERE.sweep, "4242", now=now + claims.STALE_S)
    assert not claims.alive(dataset, ELSEWHERE, now=now + claims.STALE_S)
    forged(dataset, beat='{"at": 1e300}')  # its own heartbeat forged: no time to say, still no traceback
    assert claims.life(dataset, ELSEWHERE, now=now).describe().startswith("silent since 1e+300 (no time)")
    # on its own host the process decides, whatever its heartbeat says: a stopped sweep lives
    me = claims.Owner.this_process()
    assert me.host == socket.gethostname()
    with claims.Heartbeat(dataset, me.sweep):
        (dataset.owners_dir / f"{me.sweep}.json").write_text(json.dumps({"at": now - 1000}))
        assert claims.alive(dataset, me)
