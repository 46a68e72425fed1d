"""Benchmarks of the inference role, printed in one run:

1. Chunked full-vocabulary entropy against the naive whole-sequence log_softmax at V = 151,936, T = 2,048:
   peak extra memory (CPU: ru_maxrss growth of a fresh child process; GPU: max_memory_allocated) and time.
   Target: at most 1/8 of the naive peak at no loss of speed.
2. A skewed workload of sleep jobs through the real SQLite queue with 8 worker threads: busy fraction
   (sum of job time / (workers x makespan)) with longest-first claims, and with arrival order for contrast.
   Target: at least 95% busy.

    python -m benchmarks.infer [--hidden 256] [--device cpu|cuda] [--skip-entropy] [--skip-queue]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from infer.entropy_bench import entropy_bench   # the role's own measurement (its device check runs it too)

V_QWEN, T_LONG = 151_936, 2_048


# ----------------------------------------------------------------------------- queue utilisation
def skewed_durations(n: int, total_s: float, seed: int = 2027) -> list[float]:
    import numpy as np

    d = np.random.default_rng(seed).lognormal(0.0, 1.0, n)   # heavy right tail: a few long jobs
    return list(d / d.sum() * total_s)


def queue_bench(workers: int = 8, n_jobs: int = 160, total_s: float = 48.0, order: str = "cost") -> dict:
    """Sleep jobs through the real SQLite queue and worker loop; returns the busy fraction."""
    import numpy as np

    from infer.queue import Queue
    from infer.worker import run_worker

    durations = skewed_durations(n_jobs, total_s)
    noise = np.random.default_rng(7).lognormal(0.0, 0.3, n_jobs)   # cost estimates off by ~30%
    with tempfile.TemporaryDirectory() as tmp:
        q = Queue(Path(tmp) / "queue.sqlite", lease_s=30)
        for i, d in enumerate(durations):
            q.enqueue(f"sleep:{i}", "sleep", {"seconds": d}, cost=d * noise[i] if order == "cost" else 1.0)
        spans, lock = [], threading.Lock()

        def runner(payload, ctx, progress):
            t0 = time.perf_counter()
            time.sleep(payload["seconds"])
            with lock:
                spans.append((t0, time.perf_counter()))
            return {}

        class Silent:
            stream = open("/dev/null", "w") if Path("/dev/null").exists() else sys.stderr
            t0 = 0.0

            def start(self, job):
                pass

            def __call__(self, *a):
                pass

        threads = [threading.Thread(target=run_worker, args=(q, runner),
                                    kwargs=dict(until_empty=True, poll_s=0.05, name=f"w{i}", display=Silent()))
                   for i in range(workers)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        makespan = max(e for _, e in spans) - start
    busy = sum(e - s for s, e in spans) / (workers * makespan)
    return {"order": order, "workers": workers, "jobs": n_jobs, "work_s": total_s, "longest_s": max(durations),
            "makespan_s": makespan, "ideal_s": max(total_s / workers, max(durations)), "busy": busy}


# ----------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.infer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int, default=T_LONG)
    p.add_argument("--V", type=int, default=V_QWEN)
    p.add_argument("--hidden", type=int, default=None, help="hidden width (default: 2048 on GPU, 256 on CPU)")
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--device", default=None)
    p.add_argument("--skip-entropy", action="store_true")
    p.add_argument("--skip-queue", action="store_true")
    a = p.parse_args(argv)
    import torch

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    H = a.hidden or (2048 if device.startswith("cuda") else 256)
    ok = True
    if not a.skip_entropy:
        res = {r["method"]: r for r in entropy_bench(a.T, H, a.V, a.chunk, device)}
        c, n = res["chunked"], res["naive"]
        ratio, speed = c["peak_bytes"] / max(n["peak_bytes"], 1), n["seconds"] / c["seconds"]
        print(f"entropy over the full vocabulary, T={a.T} V={a.V} H={H} chunk={a.chunk} on {device}")
        for r in (n, c):
            print(f"  {r['method']:8s} peak extra memory {r['peak_bytes'] / 2**20:9.1f} MiB   time {r['seconds']:.3f} s")
        print(f"  chunked/naive peak = {ratio:.3f} (target <= 0.125)   speed-up = {speed:.2f}x (target >= 1)")
        ok &= ratio <= 0.125 and speed >= 1.0
    if not a.skip_queue:
        for order in ("cost", "arrival"):
            r = queue_bench(order=order)
            print(f"queue: {r['workers']} workers, {r['jobs']} skewed sleep jobs ({r['work_s']:.0f} s of work, "
                  f"longest {r['longest_s']:.2f} s), claims by {order}: makespan {r['makespan_s']:.2f} s "
                  f"(ideal {r['ideal_s']:.2f} s), busy {100 * r['busy']:.1f}%" + ("  (target >= 95%)" if order == "cost" else ""))
            if order == "cost":
                ok &= r["busy"] >= 0.95
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
