"""The verifier's verdicts do not depend on the machine's load: its budget counts CPU time, not wall time.

The slowest hand-labelled cases (tests/common/verify_cases.jsonl; each about 0.1-0.3 s of CPU) are verified
once on their own, each with a time limit of about three times the CPU time it took, then again beside a CPU hog:
three busy processes pinned to the worker's core, so the worker gets at most a quarter of it (its wall time four
or more times its CPU time, past a wall-clock budget of 2.4 times). The hog stops itself after 60 s and is killed after the test.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from rcea import verify_sandbox
from rcea.verify import verify
from rcea.verify_agreement import CASES_PATH

pytestmark = pytest.mark.skipif(not (hasattr(os, "sched_setaffinity") and os.path.exists("/proc/self/stat")),
                                reason="needs Linux (CPU affinity and /proc) to load one core")
# the slowest cases to compare (CPU time, in a fresh worker), accepted and refused ones
HARD = ["complex_exponential-1", "subscripted_symbols-4", "expression_equivalence-2",
        "plus_minus-16"]
HOG = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far, from /proc/<pid>/stat (fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fresh_worker(core: int | None = None) -> int:
    """One new idle worker (no cached parses), optionally pinned to `core`; returns its pid."""
    verify_sandbox.shutdown()
    verify_sandbox.warmup(1)
    pid = verify_sandbox._idle[0].proc.pid
    if core is not None:
        os.sched_setaffinity(pid, {core})
    return pid


def run(cases, timeouts, pid):
    out = []
    for case, timeout in zip(cases, timeouts):
        cpu0, t0 = cpu_of(pid), time.monotonic()
        correct = verify(case["completion"], case["reference"], timeout=timeout).correct
        out.append((correct, cpu_of(pid) - cpu0, time.monotonic() - t0))
    return out


def test_verdicts_beside_a_cpu_hog_are_the_idle_verdicts():
    by_id = {c["id"]: c for c in map(json.loads, CASES_PATH.read_text().splitlines())}
    cases = [by_id[i] for i in HARD]
    alone = run(cases, [30.0] * len(cases), fresh_worker())
    assert [v for v, _, _ in alone] == [c["label"] for c in cases]   # the hand labels
    timeouts = [3 * cpu + 0.1 for _, cpu, _ in alone]   # CPU budget (0.8 x): about 2.4 x what each case took
    core = max(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(3)]
    try:
        for h in hogs:
            os.sched_setaffinity(h.pid, {core})
        loaded = run(cases, timeouts, fresh_worker(core))
    finally:
        for h in hogs:
            h.kill()
            h.wait(timeout=10)
        verify_sandbox.shutdown()   # the pinned worker goes; later calls start an unpinned one
    report = [(c["id"], round(t, 2), round(a[1], 2), round(b[1], 2), round(b[2], 2))
              for c, t, a, b in zip(cases, timeouts, alone, loaded)]
    print("case, limit s, CPU s alone, CPU s loaded, wall s loaded:", report)
    assert [v for v, _, _ in loaded] == [v for v, _, _ in alone], report
    assert sum(w for _, _, w in loaded) > 2 * sum(cpu for _, cpu, _ in loaded), report   # the hog did slow it
