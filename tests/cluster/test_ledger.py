"""The driver's ledger (SQLite) and the progress line: attempts, durations, time left."""

from __future__ import annotations

import io
import os

import pytest

from orchestrate.executors.ledger import Ledger, Progress, default_ledger
from rcea import layout


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


def test_the_ledger_is_the_state_store_except_on_a_clusters_shared_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("RCEA_LEDGER", raising=False)
    path = default_ledger(tmp_path / "shared", "7b", "ray")   # a cluster's shared folder: the driver's own disk
    assert path.parent.name == ".ledger" and tmp_path not in path.parents
    assert default_ledger(tmp_path / "shared", None) == path != default_ledger(tmp_path / "other", "7b", "ray")
    # the default engine: the study's one state store, the file of the queue's jobs
    assert default_ledger(tmp_path / "shared", "3b") == layout.state_path("3b", tmp_path / "shared")
    monkeypatch.setenv("RCEA_LEDGER", str(tmp_path / "mine.sqlite"))
    assert default_ledger(tmp_path / "shared", "3b") == tmp_path / "mine.sqlite"


def test_one_store_holds_the_units_and_the_queue_each_side_sees_the_other(tmp_path):
    """Issue 28: one state store. The driver's ledger and the workers' queue (infer.queue, standard library only)
    open the same file, in either order, while the other is open; each keeps its own tables."""
    from infer.queue import Queue

    path = layout.state_path("3b", tmp_path)
    led = Ledger(path)                    # the driver first (the study's train stage)
    q = Queue(path, lease_s=30)           # a worker's, while the driver's connection is open
    q.enqueue("greedy:base-0", "greedy", {"step": 0}, cost=2.0)
    led.attempt("train:3b:grpo:ab12", "train", {"host": "h"})
    job = q.claim("w1")
    led.set("train:3b:grpo:ab12", "train", "done", seconds=5.0)
    q.finish(job.id, "w1")
    led.close()
    again = Ledger(path)
    assert again.state("train:3b:grpo:ab12")["state"] == "done"
    assert [(j["key"], j["state"]) for j in Queue(path).jobs()] == [("greedy:base-0", "done")]
    assert {p.name for p in path.parent.iterdir() if p.suffix == ".sqlite"} == {"3b.sqlite"}


@pytest.mark.skipif(os.getuid() != 0, reason="root only: a store root makes for the containers' user")
def test_a_store_root_makes_takes_its_folders_owner(tmp_path):
    """Under Compose the driver (root on CI) may make the state store before a container (UID 1000) opens it:
    the file takes the folder's owner, so the container can write it."""
    folder = tmp_path / "state"
    folder.mkdir()
    os.chown(folder, 1000, 1000)
    Ledger(folder / "3b.sqlite").close()
    st = (folder / "3b.sqlite").stat()
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    Ledger(tmp_path / "mine.sqlite").close()   # a folder of root's: root's file
    assert (tmp_path / "mine.sqlite").stat().st_uid == 0


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
