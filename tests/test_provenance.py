"""The record of the code a device run was prepared from (``jobs.gpu_run.pack``): the commit, whether
the tree differs from it, and a digest of the files that travel; its check against a tree (a changed
or a missing file is named, and marks the commit the shards name); and the shards' ``git_sha``, which
takes the commit the environment names before the checkout's HEAD."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jobs.gpu_run import pack
from pipeline.bench.diagnostics import git_sha
from pipeline.data.meta import GIT_SHA_ENV


def git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A checkout of one commit: two files and a .gitignore that ignores ``ignored/``."""
    root = tmp_path / "repo"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (root / "sub" / "b.py").write_text("b = 1\n")
    (root / ".gitignore").write_text("ignored/\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    return root


def test_the_record_names_the_commit_and_digests_what_travels(repo: Path):
    record = pack.provenance(repo)
    assert record["commit"] == git(repo, "rev-parse", "HEAD") and not record["differs"]
    assert record["paths"] == [".gitignore", "a.txt", "sub/b.py"] and record["files"] == 3
    assert pack.checked(record, repo) == (record["commit"], [])
    (repo / "ignored").mkdir()
    (repo / "ignored" / "x.bin").write_bytes(b"\0")  # ignored: it does not travel
    assert pack.provenance(repo) == record
    (repo / "new.txt").write_text("new\n")  # untracked, not ignored: it travels, and the tree differs
    grown = pack.provenance(repo)
    assert grown["differs"] and grown["paths"] == [".gitignore", "a.txt", "new.txt", "sub/b.py"]
    assert grown["tree"] != record["tree"] and grown["commit"] == record["commit"]
    # a tree that differs from its commit is named so, even where it is the packed one
    assert pack.checked(grown, repo) == (f"{grown['commit']}+{grown['tree'][:12]}", [])


def test_a_tree_not_the_packed_one_is_named_and_marks_the_commit(repo: Path):
    record = pack.provenance(repo)
    (repo / "a.txt").write_text("changed\n")
    sha, problems = pack.checked(record, repo)
    here = pack.tree_digest(repo, record["paths"])
    assert here != record["tree"] and sha == f"{record['commit']}+{here[:12]}"
    assert problems == [f"the tree's digest {here[:12]} is not the packed {record['tree'][:12]}"]
    (repo / "sub" / "b.py").unlink()
    sha, problems = pack.checked(record, repo)
    assert problems[0] == "1 packed file(s) missing here, e.g. sub/b.py" and len(problems) == 2


def test_the_shards_take_the_commit_the_environment_names(repo: Path, tmp_path: Path, monkeypatch):
    monkeypatch.delenv(GIT_SHA_ENV, raising=False)
    assert git_sha(repo) == git(repo, "rev-parse", "HEAD")
    assert git_sha(tmp_path / "not-a-checkout") is None
    monkeypatch.setenv(GIT_SHA_ENV, "1ebdcd0+0123456789ab")  # a copied tree whose .git is stale
    assert git_sha(repo) == "1ebdcd0+0123456789ab"
