import json

import pytest

from textkit._io import atomic_dir, atomic_path, write_bytes_atomic, write_json_atomic


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

