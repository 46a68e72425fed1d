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
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

V_QWEN, T_LONG = 151_936, 2_048


# ----------------------------------------------------------------------------- entropy
def _inputs(T: int, H: int, V: int, device: str):
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    hidden = torch.randn(T, H, generator=g).to(device)              # (T, H)
    weight = (torch.randn(V, H, generator=g) / H ** 0.5).to(device)  # (V, H): logits of order 1
    targets = torch.randint(0, V, (T,), generator=g).to(device)
    return hidden, weight, targets


def _naive(hidden, weight, targets):
    import torch

    logits = hidden @ weight.T                                       # (T, V) fp32, whole sequence
    logp = torch.log_softmax(logits, dim=-1)                         # (T, V)
    entropy = -(logp.exp() * logp).sum(-1)                           # (T, V) temporaries
    return logp.gather(-1, targets[:, None]).squeeze(-1), entropy


def _chunked(hidden, weight, targets, chunk):
    from infer.entropy import chunked_stats_from_hidden
    return chunked_stats_from_hidden(hidden, weight, targets, chunk=chunk)


def measure(method: str, T: int, H: int, V: int, chunk: int, device: str, repeats: int = 2) -> dict:
    """Peak extra memory (bytes) and best time (s) of one method, measured in this process."""
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    hidden, weight, targets = _inputs(T, H, V, device)
    run = (lambda: _naive(hidden, weight, targets)) if method == "naive" else \
        (lambda: _chunked(hidden, weight, targets, chunk))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del out
    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"method": method, "peak_bytes": int(peak), "seconds": min(times), "T": T, "H": H, "V": V,
            "chunk": chunk, "device": device}


def entropy_bench(T: int, H: int, V: int, chunk: int, device: str, rounds: int = 1) -> list[dict]:
    """Peak memory of each method in a fresh child process (CPU peak RSS is per process); time is the
    best of that run and `rounds` more runs here, alternating methods so both see the same machine load."""
    if device.startswith("cuda"):
        return [measure(m, T, H, V, chunk, device, repeats=1 + rounds) for m in ("chunked", "naive")]
    results = {}
    for method in ("chunked", "naive"):
        cmd = [sys.executable, "-m", "benchmarks.infer", "--_child", method, "--T", str(T), "--hidden", str(H),
               "--V", str(V), "--chunk", str(chunk), "--device", device]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[method] = json.loads(out.stdout.strip().splitlines()[-1])
    hidden, weight, targets = _inputs(T, H, V, device)
    for _ in range(rounds):
        for method in ("naive", "chunked"):
            t0 = time.perf_counter()
            _naive(hidden, weight, targets) if method == "naive" else _chunked(hidden, weight, targets, chunk)
            results[method]["seconds"] = min(results[method]["seconds"], time.perf_counter() - t0)
    return [results["chunked"], results["naive"]]


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
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    import torch

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    H = a.hidden or (2048 if device.startswith("cuda") else 256)
    if a._child:
        print(json.dumps(measure(a._child, a.T, H, a.V, a.chunk, device, repeats=1)))
        return 0
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
