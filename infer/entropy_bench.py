"""The chunked full-vocabulary entropy against the naive whole-sequence log_softmax: peak extra memory (CPU: ru_maxrss
growth of a fresh child process; GPU: max_memory_allocated) and time, on random inputs of a given shape.

Part of the inference role, since its own device check measures it (`python -m infer.gpu_check`, check 2); the
benchmark run `python -m benchmarks.infer` prints it at V = 151,936, T = 2,048. On CPU each method's peak is taken
in a child process of its own: `python -m infer.entropy_bench METHOD T H V CHUNK DEVICE` prints one JSON line.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time


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
        cmd = [sys.executable, "-m", "infer.entropy_bench", method, str(T), str(H), str(V), str(chunk), device]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[method] = json.loads(out.stdout.strip().splitlines()[-1])
    hidden, weight, targets = _inputs(T, H, V, device)
    for _ in range(rounds):
        for method in ("naive", "chunked"):
            t0 = time.perf_counter()
            _naive(hidden, weight, targets) if method == "naive" else _chunked(hidden, weight, targets, chunk)
            results[method]["seconds"] = min(results[method]["seconds"], time.perf_counter() - t0)
    return [results["chunked"], results["naive"]]


if __name__ == "__main__":
    method, T, H, V, chunk, device = sys.argv[1:7]
    print(json.dumps(measure(method, int(T), int(H), int(V), int(chunk), device, repeats=1)))
