"""Issue 41 item 2: a full disk ends in one line naming the folder, the space left and the space needed; no
partial file is published, and the rerun resumes. ENOSPC is simulated (the write raises OSError 28, or a
library's own error while the disk reports no space left), as a real full disk gives it. On main before this
change each of these was a traceback (the aggregation's matplotlib error, the queue's SQLite error, the driver's)."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from rcea import diskfull
from rcea.store import atomic_write, atomic_write_text, is_temp


def _no_space(*_a, **_k):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_write_that_runs_out_of_space_publishes_nothing_and_names_the_folder(tmp_path):
    target = tmp_path / "results" / "summary.json"
    atomic_write_text(target, "old\n")

    def half(tmp):
        tmp.write_bytes(b"x" * 5000)
        _no_space()

    with pytest.raises(diskfull.DiskFull) as err:
        atomic_write(target, half)
    msg = err.value.args[1]
    assert "\n" not in msg and f"the disk holding {target.parent} is full (" in msg and " left; " in msg
    assert "summary.json needs more than the 4.9 KiB written" in msg and "rerun the same command" in msg
    assert target.read_text() == "old\n" and not [p for p in target.parent.iterdir() if is_temp(p)]


def test_a_library_error_after_a_failed_write_is_a_full_disk_when_no_space_is_left(tmp_path, monkeypatch):
    """matplotlib's `AttributeError: 'Stream' object has no attribute 'pos'` when its PDF write failed."""
    def broken(tmp):
        tmp.write_bytes(b"%PDF-1.4 partial")
        raise AttributeError("'Stream' object has no attribute 'pos'")

    with pytest.raises(AttributeError):   # space left: an ordinary error, as it was
        atomic_write(tmp_path / "fig.pdf", broken)
    monkeypatch.setattr(diskfull, "free", lambda folder: 0)
    with pytest.raises(diskfull.DiskFull, match="0 bytes left"):
        atomic_write(tmp_path / "fig.pdf", broken)
    assert list(tmp_path.iterdir()) == []


def test_the_queue_ends_a_full_disk_in_one_line(tmp_path, monkeypatch, capsys):
    from infer import __main__ as infer_cli
    from infer import queue

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))

    def full(*_a, **_k):
        raise sqlite3.OperationalError("database or disk is full")

    from rcea.layout import state_path

    state_path("tiny", tmp_path).parent.mkdir(parents=True)
    state_path("tiny", tmp_path).touch()
    monkeypatch.setattr(queue.Queue, "__init__", full)
    assert infer_cli.main(["status", "--scale", "tiny"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the disk holding {tmp_path} is full" in err
