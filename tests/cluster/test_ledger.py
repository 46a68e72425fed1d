"""The driver's ledger (SQLite) and the progress line: attempts, durations, time left."""

from __future__ import annotations

import io

from orchestrate.executors.ledger import Ledger, Progress, default_ledger


def test_attempts_states_and_events_survive_a_driver_restart(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    assert led.attempt("u1", "train", {"node": "n1"}) == 1
    assert led.attempt("u1", "train", {"node": "n2"}) == 2
    led.set("u1", "train", "done", seconds=30.0, host="h")
    led.set("u2", "train", "done", seconds=10.0, host="h")
    led.set("u3", "train", "failed", error="exit 2")
    led.close()
    again = Ledger(tmp_path / "l.sqlite")   # a new driver process reads what the last one wrote
    assert again.state("u1")["attempts"] == 2 and again.state("u1")["state"] == "done"
    assert again.state("u3")["error"] == "exit 2" and again.state("nope") is None
    assert [e["node"] for e in again.events("u1")] == ["n1", "n2"]
    assert again.mean_seconds("train") == 20.0 and again.mean_seconds("infer") is None


def test_the_ledger_lives_under_the_project_not_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("RCEA_LEDGER", raising=False)
    path = default_ledger(tmp_path / "shared")
    assert path.parent.name == ".ledger" and tmp_path not in path.parents
    assert default_ledger(tmp_path / "shared") == path != default_ledger(tmp_path / "other")
    monkeypatch.setenv("RCEA_LEDGER", str(tmp_path / "mine.sqlite"))
    assert default_ledger(tmp_path / "shared") == tmp_path / "mine.sqlite"


def test_progress_counts_and_time_left():
    out = io.StringIO()
    p = Progress({"train": 4, "infer": 0}, label="study:ray", stream=out)
    p.start("train", 2)
    assert p.line() == "[study:ray] train 0/4 done, 2 running"
    p.finish("train", True, seconds=60.0)
    # mean 60 s per unit, 3 left, two ran side by side: 90 s
    assert p.line() == "[study:ray] train 1/4 done, 1 running, ~1m 30s left"
    p.finish("train", False)
    p.start("train", 2)
    p.finish("train", True, seconds=120.0, n=2)
    assert p.line() == "[study:ray] train 3/4 done, 0 running, 1 failed"
    assert out.getvalue().splitlines()[-1] == p.line()
