"""Issue 41 item 2: the study's driver ends a full disk (here the state store's SQLite error, as a full state folder
gives it) in one line naming the folder, the space left and the rerun; on main before this change: a traceback."""

from __future__ import annotations

import contextlib

import invoke

from orchestrate.ops import study
from rcea.state import OperationalError


def test_the_driver_ends_a_full_disk_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.setattr(study, "data_lock", lambda c, scale: contextlib.nullcontext())
    monkeypatch.setattr(study, "bind_source", lambda *a, **k: None)

    def full(c, stage, log_dir):
        raise OperationalError("database or disk is full")

    stages = [study.Stage("train", "train", ())]
    try:
        study.run_study(invoke.Context(), stages, execute=full, log_dir=tmp_path / "logs")
    except invoke.exceptions.Exit as exc:
        msg = exc.message
    else:
        raise AssertionError("no Exit")
    assert "\n" not in msg and f"error: the disk holding {tmp_path}" in msg and "rerun the same command" in msg
