"""The state store's unit records (rcea.state: SQLite) and the progress line: attempts, durations, time left;
where the store lives at each engine, and `invoke status` reading it at both."""

from __future__ import annotations

import io
import os

import pytest

from orchestrate.engines.progress import Progress
from rcea import layout
from rcea.state import Store, default_path, stores


def test_attempts_states_and_events_survive_a_driver_restart(tmp_path):
    records = Store(tmp_path / "l.sqlite")
    assert records.attempt("u1", "train", {"node": "n1"}) == 1
    assert records.attempt("u1", "train", {"node": "n2"}) == 2
    records.set("u1", "train", "done", seconds=30.0, host="h")
    records.set("u2", "train", "done", seconds=10.0, host="h")
    records.set("u3", "train", "failed", error="exit 2")
    records.close()
    again = Store(tmp_path / "l.sqlite")   # a new driver process reads what the last one wrote
    assert again.state("u1")["attempts"] == 2 and again.state("u1")["state"] == "done"
    assert again.state("u3")["error"] == "exit 2" and again.state("nope") is None
    assert [e["node"] for e in again.events("u1")] == ["n1", "n2"]
    assert again.mean_seconds("train") == 20.0 and again.mean_seconds("infer") is None


def test_the_store_is_in_the_data_folder_except_on_a_clusters_shared_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("RCEA_STATE", raising=False)
    monkeypatch.delenv("RCEA_LEDGER", raising=False)
    path = default_path(tmp_path / "shared", "7b", "ray")   # a cluster's shared folder: the driver's own disk
    assert path.name == "7b.sqlite" and path.parent.parent.name == ".state" and tmp_path not in path.parents
    assert default_path(tmp_path / "shared", "7b", "ray") == path != default_path(tmp_path / "other", "7b", "ray")
    assert default_path(tmp_path / "shared", None).name == "several.sqlite"   # units of several scales
    # the default engine: the study's one state store, the file of the queue's jobs
    assert default_path(tmp_path / "shared", "3b") == layout.state_path("3b", tmp_path / "shared")
    monkeypatch.setenv("RCEA_STATE", str(tmp_path / "mine.sqlite"))
    assert default_path(tmp_path / "shared", "3b") == tmp_path / "mine.sqlite"
    monkeypatch.delenv("RCEA_STATE")
    monkeypatch.setenv("RCEA_LEDGER", str(tmp_path / "old.sqlite"))   # the old name, still read
    assert default_path(tmp_path / "shared", "3b", "ray") == tmp_path / "old.sqlite"


def test_one_store_holds_the_units_and_the_queue_each_side_sees_the_other(tmp_path):
    """Issue 28: one state store. The engine's unit records and the workers' queue (infer.queue) open the same
    file, in either order, while the other is open; each keeps its own tables."""
    from infer.queue import Queue

    path = layout.state_path("3b", tmp_path)
    records = Store(path)                  # the driver first (the study's train stage)
    q = Queue(path, lease_s=30)            # a worker's, while the driver's connection is open
    q.enqueue("greedy:base-0", "greedy", {"step": 0}, cost=2.0)
    records.attempt("train:3b:grpo:ab12", "train", {"host": "h"})
    job = q.claim("w1")
    records.set("train:3b:grpo:ab12", "train", "done", seconds=5.0)
    q.finish(job.id, "w1")
    records.close()
    again = Store(path)
    assert again.state("train:3b:grpo:ab12")["state"] == "done"
    assert [(j["key"], j["state"]) for j in Queue(path).jobs()] == [("greedy:base-0", "done")]
    assert {p.name for p in path.parent.iterdir() if p.suffix == ".sqlite"} == {"3b.sqlite"}


def test_records_written_from_several_threads_all_land(tmp_path):
    """The engines write unit records from the driver's loop and its helper threads: one connection each."""
    import threading

    records = Store(tmp_path / "s.sqlite")
    threads = [threading.Thread(target=lambda i=i: [records.attempt(f"u{i}", "infer", {"n": n}) for n in range(5)])
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted((u["key"], u["attempts"]) for u in records.units()) == [(f"u{i}", 5) for i in range(4)]
    assert len(records.events()) == 20
    records.close()


def test_status_reads_the_store_at_either_engine(tmp_path, monkeypatch, capsys):
    """Issue 39: after a Ray study `invoke status` said "no queue". It reads the local engine's store in the
    data folder and a Ray study's on the driver's disk for the same data folder (python -m rcea.status)."""
    from rcea import status

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.delenv("RCEA_STATE", raising=False)
    monkeypatch.delenv("RCEA_LEDGER", raising=False)
    assert status.main(["--scale", "tiny"]) == 1
    assert "no state store for scale tiny" in capsys.readouterr().err
    ray = tmp_path / "driver" / ".state" / "d" / "tiny.sqlite"   # the driver's disk (not this repo's .state/ here)
    monkeypatch.setattr("rcea.state.driver_path", lambda root, scale=None: ray.with_name(f"{scale}.sqlite"))
    records = Store(ray)
    records.set("train:tiny:grpo:ab12", "train", "done", seconds=3.0)
    records.set("infer:tiny:greedy:x", "infer", "failed", error="exit 2")
    records.close()
    assert stores("tiny", tmp_path) == [ray]
    assert status.main(["--scale", "tiny"]) == 0
    out = capsys.readouterr().out
    assert f"state store {ray}:" in out and "units train: 1 done" in out and "units infer: 1 failed" in out
    assert "failed   infer:tiny:greedy:x attempts=0 error=exit 2" in out and "jobs (the queue)" not in out
    local = Store(layout.state_path("tiny", tmp_path))   # the local engine's too, with a job
    local.close()
    from infer.queue import Queue

    Queue(local.path).enqueue("greedy:base-0", "greedy", {"tables": ["greedy"], "scale": "tiny", "kind": "greedy", "method": "base", "step": 0})
    assert stores("tiny", tmp_path) == [local.path, ray]
    assert status.main(["--scale", "tiny"]) == 0
    out = capsys.readouterr().out
    assert out.index(str(local.path)) < out.index(str(ray)) and "jobs (the queue): 1 pending, 0 running" in out


@pytest.mark.skipif(os.getuid() != 0, reason="root only: a store root makes for the containers' user")
def test_a_store_root_makes_takes_its_folders_owner(tmp_path):
    """Under Compose the driver (root on CI) may make the state store before a container (UID 1000) opens it:
    the file takes the folder's owner, so the container can write it."""
    folder = tmp_path / "state"
    folder.mkdir()
    os.chown(folder, 1000, 1000)
    Store(folder / "3b.sqlite").close()
    for made in ("3b.sqlite", "3b.sqlite.lock"):   # the lock of the damage check too: containers take it
        st = (folder / made).stat()
        assert (st.st_uid, st.st_gid) == (1000, 1000), made
    Store(tmp_path / "mine.sqlite").close()   # a folder of root's: root's file
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
