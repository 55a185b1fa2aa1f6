"""Run files are written atomically and with ordinary permissions."""

from __future__ import annotations

import json
import os
import stat

import pytest

from fedleak.files import write_atomic, write_json_atomic


def test_json_is_written_whole_and_readable_like_a_plain_file(tmp_path):
    path = tmp_path / "results.json"
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    write_json_atomic(path, {"old": True})

    def broken(tmp):
        tmp.write_text("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomic(path, broken)
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
