"""A folder's write probe: what it refuses, what it leaves behind, and probes that race each other."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from pipeline.base.folders import check_writable


def test_a_probe_leaves_no_folder_it_made(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    assert check_writable(target) == target
    assert list(tmp_path.iterdir()) == []


def test_a_file_in_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match=r"is not a directory: .*/f is a file"):
        check_writable(tmp_path / "f" / "sub")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        check_writable(tmp_path / "f")


def _probe_many(parent: str, n: int) -> list[str]:
    errors = []
    for i in range(150):
        try:
            check_writable(Path(parent) / f"multirun-{n}-{i}")
        except ValueError as err:
            errors.append(str(err))
    return errors


def test_probes_of_sibling_folders_under_one_new_parent_all_pass(tmp_path: Path) -> None:
    # two sweeps started together into one new dataset: each probe makes the shared parent and removes
    # it again, so a sibling's mkdir may find the parent it saw gone
    parent = tmp_path / "dataset"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        errors = pool.starmap(_probe_many, [(str(parent), n) for n in range(4)])
    assert errors == [[]] * 4
    # the parent may stay where a sibling's folder was in it when its maker left; nothing else does
    assert not parent.exists() or list(parent.iterdir()) == []
