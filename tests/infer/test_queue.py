"""The job queue (the pull side of the state store, rcea.state) and the worker loop, with fake jobs (no model)."""

import json
import threading
import time

import pytest

from infer.queue import Queue
from infer.worker import run_worker


class Quiet:
    """A progress display that records instead of printing."""

    def __init__(self):
        import io
        self.stream, self.t0, self.calls = io.StringIO(), time.time(), []

    def start(self, job):
        self.t0 = time.time()

    def __call__(self, what, done, total):
        self.calls.append((what, done, total))


def test_enqueue_is_idempotent_and_done_jobs_stay_done(tmp_path):
    q = Queue(tmp_path / "q.sqlite")
    assert q.enqueue("a", "greedy", {"x": 1}) == "added"
    assert q.enqueue("a", "greedy", {"x": 2}) == "exists"
    job = q.claim("w1")
    assert job.key == "a" and job.payload == {"x": 1}
    assert q.finish(job.id, "w1")
    assert q.enqueue("a", "greedy", {"x": 1}) == "exists"
    assert q.counts() == {"pending": 0, "running": 0, "done": 1, "failed": 0}
    assert q.claim("w1") is None


def test_claims_take_the_most_expensive_job_first(tmp_path):
    q = Queue(tmp_path / "q.sqlite")
    for key, cost in [("small", 1), ("big", 100), ("mid", 10), ("mid2", 10)]:
        q.enqueue(key, "k", {}, cost)
    assert [q.claim("w").key for _ in range(4)] == ["big", "mid", "mid2", "small"]


def test_expired_lease_returns_the_job_and_the_old_worker_loses_it(tmp_path):
    q = Queue(tmp_path / "q.sqlite", lease_s=0.2, max_attempts=2)
    q.enqueue("a", "k", {})
    first = q.claim("dead")
    assert q.claim("other") is None                      # leased
    time.sleep(0.3)
    second = q.claim("alive")                            # lease ran out: reclaimed
    assert second.key == "a" and second.attempts == 2
    assert not q.heartbeat(first.id, "dead") and not q.finish(first.id, "dead")
    assert q.heartbeat(second.id, "alive")
    time.sleep(0.3)
    assert q.claim("third") is None                      # second expiry after max_attempts: failed
    (row,) = q.jobs()
    assert row["state"] == "failed" and "lease expired 2 times" in row["error"]


def test_failed_jobs_record_their_reason_and_the_rest_go_on(tmp_path):
    q = Queue(tmp_path / "q.sqlite")
    for i in range(5):
        q.enqueue(f"j{i}", "k", {"i": i}, cost=i)

    def runner(payload, ctx, progress):
        if payload["i"] == 3:
            raise FileNotFoundError("checkpoint-3 is missing")
        progress("step", 1, 1)
        return {}

    stats = run_worker(q, runner, until_empty=True, poll_s=0.01, name="w", display=Quiet())
    assert stats == {"done": 4, "failed": 1}
    failed = [j for j in q.jobs() if j["state"] == "failed"]
    assert [j["key"] for j in failed] == ["j3"] and failed[0]["error"] == "FileNotFoundError: checkpoint-3 is missing"
    assert q.enqueue("j3", "k", {"i": 3}, retry_failed=True) == "retried"
    assert q.counts()["pending"] == 1


def test_each_job_runs_exactly_once_across_threads(tmp_path):
    q = Queue(tmp_path / "q.sqlite")
    for i in range(40):
        q.enqueue(f"j{i}", "k", {"i": i}, cost=i % 7)
    seen, lock = [], threading.Lock()

    def runner(payload, ctx, progress):
        with lock:
            seen.append(payload["i"])
        return {}

    threads = [threading.Thread(target=run_worker, args=(q, runner),
                                kwargs=dict(until_empty=True, poll_s=0.01, name=f"w{t}", display=Quiet()))
               for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(40))
    assert q.counts()["done"] == 40


def test_a_dead_holder_on_this_host_is_reclaimed_at_once(tmp_path):
    """kill -9 of the worker holding a job: a worker on the same host sees the holder's process is gone
    and takes the job at once, not when the (here 300 s) lease runs out."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    q = Queue(tmp_path / "q.sqlite", lease_s=300.0)
    q.enqueue("probe:grpo-4", "probe", {})
    code = ("import sys, time; from infer.queue import Queue\n"
            "job = Queue(sys.argv[1], lease_s=300.0).claim('victim')\n"
            "print(job.key, flush=True); time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "q.sqlite")], cwd=root,
                             env=dict(os.environ, PYTHONPATH=str(root)), stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "probe:grpo-4"
        (row,) = q.jobs()
        assert row["state"] == "running" and row["pid"] == child.pid and row["host"]
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    t = time.monotonic()
    job = q.claim("rescuer")
    assert job is not None and job.key == "probe:grpo-4" and job.attempts == 2
    assert time.monotonic() - t < 2.0


def test_a_live_or_remote_holder_keeps_its_lease_and_the_wait_is_reported(tmp_path):
    """A holder on another host (its process cannot be checked) keeps the job until the lease runs out;
    meanwhile the waiting worker says what it waits for, for how long, at most every `report_s`."""
    q = Queue(tmp_path / "q.sqlite", lease_s=1.5)
    q.enqueue("greedy:dapo-8", "greedy", {})
    assert q.claim("far:77") is not None
    import socket
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that is dead here
    db = q._conn()
    # the same host name in another PID namespace (a container on the host's network): the pid means
    # nothing here, so a dead-looking pid is not proof of a dead holder
    db.execute("UPDATE jobs SET host=?, pid=?", (f"{socket.gethostname()}/pid:[1]", int(gone)))
    assert q.claim("near") is None
    db.execute("UPDATE jobs SET host='another-host', pid=1")
    assert q.claim("near") is None
    quiet = Quiet()
    t = time.monotonic()
    stats = run_worker(q, lambda payload, ctx, progress: {"ok": 1}, until_empty=True, poll_s=0.05,
                       name="near", display=quiet, report_s=0.5)
    waited = time.monotonic() - t
    assert stats == {"done": 1, "failed": 0} and 1.0 < waited < 5.0
    lines = [x for x in quiet.stream.getvalue().splitlines() if "waiting" in x]
    assert lines and "greedy:dapo-8" in lines[0] and "held by far:77" in lines[0] and "s left" in lines[0]
    assert len(lines) <= waited / 0.5 + 1  # rate-limited, not one line per 0.05 s poll


def test_a_full_disk_is_reported_as_itself_and_the_queue_stays_usable(tmp_path):
    """SQLite rolls a transaction back itself on SQLITE_FULL; the queue must not then hide the disk-full
    error behind "cannot rollback - no transaction is active". A full disk is simulated with a page limit."""
    import pytest

    from rcea.state import OperationalError

    q = Queue(tmp_path / "q.sqlite")
    q.enqueue("small", "probe", {"x": 1})
    db = q._conn()
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages + 1}")
    with pytest.raises(OperationalError, match="full"):
        for i in range(50):
            q.enqueue(f"big{i}", "probe", {"x": "a" * 20000})
    assert not db.in_transaction
    db.execute("PRAGMA max_page_count=1073741823")  # space freed: the same connection goes on
    assert q.enqueue("after", "probe", {"x": 2}) == "added" and q.counts()["pending"] >= 2
    job = q.claim("w")
    assert job is not None and q.finish(job.id, "w", None)


def _killed_three_times(q, key):
    """Claim `key` until the queue gives up on it, each holder dying (its lease runs out)."""
    for _ in range(q.max_attempts):
        assert q.claim("doomed").key == key
        time.sleep(q.lease_s + 0.05)
    assert q.claim("next") is None


def test_a_rerun_retries_a_job_whose_workers_were_killed_bounded_and_says_so(tmp_path):
    """A job killed max_attempts times is failed; enqueueing it again (what every rerun of the study does)
    makes it pending with fresh attempts, KILLED_ROUNDS times; a job that failed with an error is left alone."""
    from infer.queue import KILLED_ROUNDS

    q = Queue(tmp_path / "q.sqlite", lease_s=0.1, max_attempts=3)
    q.enqueue("killed", "k", {})
    _killed_three_times(q, "killed")
    q.enqueue("broken", "k", {})
    job = q.claim("w")
    q.finish(job.id, "w", error="ValueError: bad input")
    for round_ in range(1, KILLED_ROUNDS + 1):
        assert q.enqueue("killed", "k", {}) == "retried"
        assert q.enqueue("broken", "k", {}) == "exists"          # an error repeats: --retry-failed decides
        assert {j["key"]: j["state"] for j in q.jobs()} == {"killed": "pending", "broken": "failed"}
        assert {j["key"]: j["rounds"] for j in q.jobs()}["killed"] == round_
        _killed_three_times(q, "killed")
    assert q.enqueue("killed", "k", {}) == "exists"              # bounded: now it needs --retry-failed
    assert q.enqueue("killed", "k", {}, retry_failed=True) == "retried"


def test_a_done_job_whose_output_part_is_gone_is_enqueued_again(tmp_path, monkeypatch, capsys):
    """`python -m infer enqueue` checks the files, not the queue's flag: a job marked done whose table part was
    deleted (or never completed) runs again; one whose parts are all complete stays done."""
    from infer.__main__ import main
    from rcea.layout import state_path
    from rcea.store import write_manifest
    from orchestrate.units import MeasureUnit

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    assert main(["enqueue", "--scale", "tiny", "--method", "base"]) == 0
    q = Queue(state_path("tiny"))
    while (job := q.claim("w")) is not None:                    # every job "done", as a worker marks it
        q.finish(job.id, "w")
    keep = next(j for j in q.jobs() if j["kind"] == "greedy")
    unit = MeasureUnit.from_job({**keep, "payload": json.loads(keep["payload"])})
    for part in unit.outputs(tmp_path):                          # that job's outputs written and complete
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(b"part")
        write_manifest(part, config_hash=unit.payload["config_hash"])   # under the job's settings
    capsys.readouterr()
    assert main(["enqueue", "--scale", "tiny", "--method", "base"]) == 0
    out = capsys.readouterr().out
    states = {j["key"]: j["state"] for j in q.jobs()}
    assert states.pop(keep["key"]) == "done" and f"exists   {keep['key']}" in out
    assert states and set(states.values()) == {"pending"}
    assert all(f"redo     {k}" in out for k in states)


def _damaged_queue(tmp_path, how: str):
    """A queue with three jobs (one done), its file then damaged as the fault table did it."""
    path = tmp_path / "queue.sqlite"
    q = Queue(path)
    for key in ("a", "b", "c"):
        q.enqueue(key, "greedy", {"k": key})
    job = q.claim("w")
    q.finish(job.id, "w")
    q._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")   # everything in the main file, as after the workers exit
    q._conn().close()
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2 + 100]
    elif how == "header":
        data[:100] = b"\xff" * 100
    else:   # every page after the first overwritten
        data[4096:] = b"\x5a" * (len(data) - 4096)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("how", ["truncated", "header", "pages"])
def test_a_damaged_queue_is_moved_aside_and_rebuilt_in_one_line(tmp_path, capsys, how):
    """Issue 31: a damaged queue.sqlite ended in a raw sqlite3.DatabaseError naming neither the file nor the fix.
    Now it is moved aside (kept for a look) and an empty queue is made; the study enqueues the jobs again."""
    path = _damaged_queue(tmp_path, how)
    q = Queue(path)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "damaged" in err and "enqueued again" in err
    assert (tmp_path / "queue.sqlite.damaged").exists()
    assert q.counts() == {"pending": 0, "running": 0, "done": 0, "failed": 0}
    assert q.enqueue("a", "greedy", {"k": "a"}) == "added"
    Queue(path)   # a sound queue is left alone, silently
    assert capsys.readouterr().err == ""


def test_damage_found_while_in_use_names_the_file_and_the_fix(tmp_path):
    from rcea.state import StoreDamaged

    path = tmp_path / "queue.sqlite"
    q = Queue(path)
    q.enqueue("a", "greedy", {})
    q._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    q._conn().close()
    q.store._local.db = None
    with open(path, "r+b") as fh:
        fh.write(b"\xff" * 100)
    with pytest.raises(StoreDamaged, match=r"queue\.sqlite is damaged .*remove it .*rerun the same command"):
        q.claim("w")


def test_the_worker_command_says_a_queue_damaged_while_it_ran_in_one_line(tmp_path, monkeypatch, capsys):
    import infer.worker
    from infer.__main__ import main
    from rcea.state import StoreDamaged
    from rcea.layout import state_path

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    Queue(state_path("tiny", tmp_path)).enqueue("a", "greedy", {})

    def damaged(q, *args, **kwargs):
        raise StoreDamaged(q.path, "file is not a database")

    monkeypatch.setattr(infer.worker, "run_worker", damaged)
    assert main(["worker", "--scale", "tiny", "--until-empty"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "state/tiny.sqlite is damaged (file is not a database)" in err


def test_an_until_empty_worker_waits_while_the_queue_is_open_and_exits_once_it_is_closed(tmp_path):
    """A study holds the queue open while its training runs may still enqueue: an idle `--until-empty` worker
    must wait for their jobs (it used to exit as soon as nothing was pending), run what comes, and exit once
    the study closes the queue and nothing is left."""
    q = Queue(tmp_path / "q.sqlite")
    q.open("study")
    ran = []
    worker = threading.Thread(target=run_worker, args=(q, lambda payload, ctx, progress: ran.append(payload["i"])),
                              kwargs=dict(until_empty=True, poll_s=0.02, name="w", display=Quiet()))
    worker.start()
    time.sleep(0.3)
    assert worker.is_alive() and ran == []          # empty but open: waits
    q.enqueue("late", "k", {"i": 1})                 # a run finished and enqueued its job
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    assert ran == [1] and worker.is_alive()          # ran it, and still waits: the queue is still open
    q.close("someone else")                          # only the holder's own opening is closed by name
    assert q.is_open()
    q.enqueue("last", "k", {"i": 2})
    q.close("study")
    worker.join(timeout=5)
    assert not worker.is_alive() and ran == [1, 2]   # the last job too, then out
    assert q.counts() == {"pending": 0, "running": 0, "done": 2, "failed": 0} and q.drained()


def test_a_stale_heartbeat_counts_as_closed(tmp_path):
    """A killed study cannot close its queue: once its heartbeat is older than the staleness limit the queue
    counts as closed, so the workers never wait forever; a live holder's beat keeps it open."""
    q = Queue(tmp_path / "q.sqlite")
    q.open("study")
    assert q.is_open() and not q.drained()
    q._conn().execute("UPDATE opened SET heartbeat = heartbeat - 61")   # 61 s without a beat (STALE_S = 60)
    assert not q.is_open() and q.drained()
    assert q.is_open(stale_s=120)                                       # the limit decides, not the row
    assert q.beat("study") and q.is_open()                              # the holder beats again: open
    assert not q.beat("other")                                          # not its holder: nothing refreshed
    q._conn().execute("UPDATE opened SET heartbeat = heartbeat - 61")   # then killed: an idle worker exits at once
    t = time.monotonic()
    stats = run_worker(q, lambda payload, ctx, progress: {}, until_empty=True, poll_s=5, name="w", display=Quiet())
    assert stats == {"done": 0, "failed": 0} and time.monotonic() - t < 1


def test_infer_hold_keeps_the_queue_open_until_its_stdin_ends(tmp_path):
    """`python -m infer hold`, as the study runs it (a pipe on its stdin): the queue is open once it says so,
    and closed when the pipe closes (the study after its train stage, or the study killed)."""
    import os
    import subprocess
    import sys

    from rcea.layout import state_path

    env = dict(os.environ, RCEA_DATA=str(tmp_path))
    hold = subprocess.Popen([sys.executable, "-m", "infer", "hold", "--scale", "tiny", "--beat", "0.1"],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = hold.stdout.readline()
        q = Queue(state_path("tiny", tmp_path))
        assert "open" in first and q.is_open()
        time.sleep(0.3)
        assert q.is_open() and hold.poll() is None
        hold.stdin.close()
        assert hold.wait(timeout=10) == 0 and "closed" in hold.stdout.read()
        assert not q.is_open() and q._conn().execute("SELECT count(*) FROM opened").fetchone() == (0,)
    finally:
        hold.kill()


def test_infer_hold_stopped_by_ctrl_c_closes_the_queue_and_says_nothing_else(tmp_path):
    """Ctrl-C reaches the holder with the study's whole process group: it closes the queue and exits 0 with an
    empty stderr (a thread left blocked on stdin made the interpreter abort at exit with a second line)."""
    import os
    import signal
    import subprocess
    import sys

    from rcea.layout import state_path

    env = dict(os.environ, RCEA_DATA=str(tmp_path))
    for _ in range(3):   # the abort depended on timing: a few tries
        hold = subprocess.Popen([sys.executable, "-m", "infer", "hold", "--scale", "tiny", "--beat", "0.1"], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert "open" in hold.stdout.readline()
            hold.send_signal(signal.SIGINT)
            out, err = hold.communicate(timeout=10)
            assert hold.returncode == 0 and "closed" in out and err == "", err
            assert not Queue(state_path("tiny", tmp_path)).is_open()
        finally:
            hold.kill()


def test_infer_hold_orphaned_by_a_killed_driver_closes_the_queue_quietly(tmp_path):
    """Only the driver killed: the holder's stdin ends and nobody reads its stdout any more. It closes the queue
    and exits 0 with an empty stderr (its last line met a broken pipe and printed a BrokenPipeError traceback
    into the run's output)."""
    import os
    import subprocess
    import sys

    from rcea.layout import state_path

    env = dict(os.environ, RCEA_DATA=str(tmp_path))
    hold = subprocess.Popen([sys.executable, "-m", "infer", "hold", "--scale", "tiny", "--beat", "0.1"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "open" in hold.stdout.readline()
        hold.stdout.close()   # the driver is gone: both ends of its pipes close
        hold.stdin.close()
        assert hold.wait(timeout=20) == 0
        err = hold.stderr.read()
        assert err == "", err
        assert not Queue(state_path("tiny", tmp_path)).is_open()
    finally:
        hold.kill()


def _complete_parts(job: dict, root) -> None:
    """Write `job`'s table parts, complete and under its settings, as a worker (of any run) finishes them."""
    from orchestrate.units import MeasureUnit
    from rcea.store import write_manifest

    unit = MeasureUnit.from_job({**job, "payload": json.loads(job["payload"])})
    for part in unit.outputs(root):
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(b"part")
        write_manifest(part, config_hash=unit.payload["config_hash"])


def test_a_failed_job_whose_parts_were_completed_later_is_done_and_the_check_passes(tmp_path, monkeypatch, capsys):
    """Issue 39: the store never contradicts the files. A job marked failed whose table parts were completed
    later (by another run) stayed failed, and the workers stage's check (`status --check`) exited 3 over complete
    files. Now the check decides from the files, and status and enqueue mark such a job done."""
    from infer.__main__ import main
    from rcea.layout import state_path

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    assert main(["enqueue", "--scale", "tiny", "--method", "base"]) == 0
    q = Queue(state_path("tiny"))
    while (job := q.claim("w")) is not None:                    # every job failed, as its worker reported
        q.finish(job.id, "w", error="RuntimeError: CUDA error: an illegal memory access")
    first, second, *rest = q.jobs()
    assert main(["status", "--scale", "tiny", "--check"]) == 3   # failed, no files: the study must not go on
    for job in [second, *rest]:
        _complete_parts(job, tmp_path)                           # completed later, all but `first`
    capsys.readouterr()
    assert main(["status", "--scale", "tiny", "--check"]) == 3   # `first` still lacks its parts
    out, err = capsys.readouterr()
    assert f"{len(rest) + 1} job(s) marked done" in out and f"lack complete table parts ({first['key']};" in err
    assert {j["key"]: j["state"] for j in q.jobs()} == {first["key"]: "failed", **{j["key"]: "done" for j in [second, *rest]}}
    _complete_parts(first, tmp_path)
    assert main(["enqueue", "--scale", "tiny", "--method", "base"]) == 0   # the enqueue path decides the same way
    assert f"complete {first['key']}  (its table parts are complete: marked done)" in capsys.readouterr().out
    assert {j["state"] for j in q.jobs()} == {"done"} and q.counts()["failed"] == 0
    assert main(["status", "--scale", "tiny", "--check"]) == 0


def test_wait_for_work_returns_once_a_job_is_pending_or_the_queue_is_drained(tmp_path):
    """What an `--until-empty` worker asks before it loads its libraries: it waits while the queue is open or
    another worker holds a job, and answers True once a job is pending, False once nothing can come."""
    q = Queue(tmp_path / "q.sqlite")
    q.enqueue("done", "k", {})
    q.finish(q.claim("w").id, "w")
    assert q.wait_for_work(sleep=lambda s: pytest.fail("a drained queue waits for nothing")) is False
    q.open("study")
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(q.wait_for_work(poll_s=0.02)))
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive() and answers == []      # open and empty: waits
    q.enqueue("late", "k", {})
    waiter.join(timeout=5)
    assert answers == [True]
    held = q.claim("w")                              # held by a live worker, the queue closed: still waits
    q.close("study")
    sleeps = []

    def finish_it(s):
        sleeps.append(s)
        q.finish(held.id, "w")

    assert q.wait_for_work(poll_s=0.5, sleep=finish_it) is False and sleeps == [0.5]


def test_an_until_empty_worker_with_nothing_to_do_exits_at_once_without_loading_torch(tmp_path):
    """A rerun whose jobs are all complete: the worker command (with its sibling processes and the progress
    line, as the study starts it) says so in one line and exits 0 before it imports torch or starts a sibling."""
    import os
    import subprocess
    import sys

    from rcea.layout import state_path

    q = Queue(state_path("tiny", tmp_path))
    q.enqueue("done", "k", {})
    q.finish(q.claim("w").id, "w")
    code = ("import sys; from infer.__main__ import main\n"
            "rc = main(['worker', '--scale', 'tiny', '--until-empty', '--processes', '2', '--progress'])\n"
            "print('torch loaded' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, RCEA_DATA=str(tmp_path)),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"worker: nothing to do: no job is pending or running and the queue "
                                       f"{state_path('tiny', tmp_path)} is closed", "no torch"], out.stdout
    assert not (tmp_path / "logs").exists()          # no progress watcher, no per-worker log


@pytest.mark.parametrize("progress", [True, False])
def test_ctrl_c_while_an_until_empty_worker_waits_ends_it_without_a_traceback(tmp_path, progress):
    """A study's Ctrl-C reaches the whole terminal group, the worker on a freed slot included, which may still be
    waiting for a job (its output still the terminal's). It once printed a KeyboardInterrupt traceback under the
    study's one line (tests/e2e/test_interrupt.py, seen once in CI's order). Now: exit 130; with --progress (a
    driver's child, which says the one line) nothing on stderr, by hand one line."""
    import os
    import signal
    import subprocess
    import sys

    from rcea.layout import state_path

    q = Queue(state_path("tiny", tmp_path))
    q.enqueue("done", "k", {})
    q.finish(q.claim("w").id, "w")
    q.open("hold@test")   # open, nothing pending: the worker waits
    code = ("import sys\nfrom infer import queue\nwait = queue.Queue.wait_for_work\n"
            "def announced(self, *a, **k):\n    print('waiting', flush=True)\n    return wait(self, *a, **k)\n"
            "queue.Queue.wait_for_work = announced\nfrom infer.__main__ import main\n"
            f"sys.exit(main(['worker', '--scale', 'tiny', '--until-empty'{', ' + repr('--progress') if progress else ''}]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, RCEA_DATA=str(tmp_path)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "waiting\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert err.splitlines() == ([] if progress else
                                ["worker: interrupted (Ctrl-C) while waiting for a job; it held none"]), err
