"""The SQLite job queue and the worker loop, with fake jobs (no model)."""

import threading
import time


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
