import json
import os
import stat

import pytest

from textkit._io import (
    atomic_dir,
    atomic_path,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)


def test_writers_create_parents_and_leave_no_temporary_files(tmp_path):
    write_json_atomic(tmp_path / "a" / "s.json", {"b": 1, "a": [2]})
    write_bytes_atomic(tmp_path / "a" / "x.bin", b"\x00\x01")
    assert json.loads((tmp_path / "a" / "s.json").read_text()) == {"a": [2], "b": 1}
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["s.json", "x.bin"]


def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("boom")
    assert path.read_text() == "old" and sorted(tmp_path.iterdir()) == [path]


def test_atomic_dir_replaces_a_folder_and_keeps_it_on_failure(tmp_path):
    path = tmp_path / "cache"
    for text in ("one", "two"):
        with atomic_dir(path) as staging:
            (staging / "f").write_text(text)
    assert (path / "f").read_text() == "two"
    with pytest.raises(RuntimeError), atomic_dir(path) as staging:
        (staging / "f").write_text("three")
        raise RuntimeError("boom")
    assert (path / "f").read_text() == "two" and sorted(tmp_path.iterdir()) == [path]



@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_written_files_and_folders_get_the_modes_the_umask_allows(tmp_path, mask):
    """As ``open`` and ``mkdir`` would (not tempfile's 0600 / 0700): a group member can read
    an export or a run's config.json where the umask lets them."""
    old = os.umask(mask)
    try:
        write_json_atomic(tmp_path / "config.json", {"a": 1})
        with atomic_dir(tmp_path / "export") as staging:
            write_text_atomic(staging / "vocab.txt", "a\n")
        (tmp_path / "plain").write_text("x")
        (tmp_path / "plain_dir").mkdir()
    finally:
        os.umask(old)

    def mode(name: str) -> int:
        return stat.S_IMODE((tmp_path / name).stat().st_mode)

    assert mode("config.json") == mode("export/vocab.txt") == mode("plain") == 0o666 & ~mask
    assert mode("export") == mode("plain_dir") == 0o777 & ~mask
