"""CPU-time-limited symbolic answer comparison with math-verify, isolated in a worker process.

The budget counts CPU time, not wall time, so a verdict is a function of the input: a busy machine slows
a comparison but does not turn a correct answer into a wrong one (a wall-clock budget did: 348 of 349
cases accepted idle, 345 at load 10). No signal interrupts a long C-level computation (a big-integer
power from `9^{9^{9^{9}}}`), so comparisons run in a persistent child process (`python -m
rcea.verify_sandbox`, JSON lines over pipes). Three limits, for a call with `timeout` T seconds:
- soft, in the child: a re-arming ITIMER_PROF timer (SIGPROF after `budget` = 0.8 T seconds of the
  child's CPU time, user + system) interrupts Python code: the comparison returns False, the child lives;
- hard, in the parent: a child that has used T seconds of CPU on the call (a C-level computation the
  timer cannot interrupt) is killed (SIGKILL), read from /proc/<pid>/stat every 20 ms, and a fresh
  child is started on the next call;
- against hangs only, in the parent: WALL_FACTOR x T seconds of wall time (a child that waits without
  using CPU); where the child's CPU time cannot be read (no /proc) this is the only hard limit.
math-verify's own timeouts (`signal.alarm`, whole seconds, main thread) are passed as None.

Workers are pooled, one per concurrent caller, so the API is thread-safe. Worker start-up (imports,
about a second) is not counted in a call's time limit; `warmup()` starts one ahead of time.
If a worker cannot be started (no POSIX pipes, sandboxed interpreter), comparisons run in-process:
under the CPU interval timer in the main thread (the whole process's CPU counts there, other threads
included), or in an abandoned daemon thread elsewhere (that thread's CPU clock, polled).

Only math-verify's LaTeX extraction is used. Its `ExprExtractionConfig` goes through sympy's
`parse_expr`, which calls `eval`, so it is never used on model output.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Sequence

__all__ = ["symbolic_equal", "compare_pairs", "warmup", "shutdown"]

STARTUP_TIMEOUT_S = 120.0
WALL_FACTOR = 20.0   # the wall-clock limit, against hangs only: this many times the call's CPU limit
POLL_S = 0.02        # how often the parent reads the child's CPU time
_MEM_LIMIT_MB = int(os.environ.get("RCEA_VERIFY_MEM_MB", "4096"))
_MODE = os.environ.get("RCEA_VERIFY_SANDBOX", "process")  # "process" or "inline"
try:
    _TICKS = float(os.sysconf("SC_CLK_TCK"))   # the unit of /proc/<pid>/stat's CPU times
except (AttributeError, ValueError, OSError):
    _TICKS = 100.0


class _Deadline(BaseException):
    """Raised by the interval timer; a BaseException so that `except Exception` cannot swallow it."""


# ---------------------------------------------------------------------------------------------
# the comparison itself (runs in the worker, or in-process as a fallback)


@lru_cache(maxsize=8192)
def _parse(latex: str) -> tuple:
    """math-verify parse of one normalised LaTeX answer (cached: references repeat across samples)."""
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse

    # WARNING: model output is parsed here (latex2sympy via math-verify builds sympy objects from
    # it). LaTeX extraction only: no sympy `parse_expr`/`sympify` of strings, hence no eval/exec.
    # The caller bounds the time (interval timer here, process kill in the parent).
    # units=False: math-verify's unit stripping deletes trailing variables (`\frac{1}{m} t` -> 1/m,
    # so it would accept `\frac{1}{m}`); `rcea.verify_normalize` strips units more carefully.
    norm = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True,
                               boxed="all", equations=False)
    cfg = [LatexExtractionConfig(boxed_match_priority=0, normalization_config=norm)]
    return tuple(parse(f"${latex}$", extraction_config=cfg, parsing_timeout=None))


def _equal_one(gold_latex: str, pred_latex: str) -> bool:
    """math-verify equivalence of one (reference, prediction) pair of LaTeX strings."""
    from math_verify import verify as mv_verify

    gold, pred = _parse(gold_latex), _parse(pred_latex)
    if not gold or not pred:
        return False
    if mv_verify(list(gold), list(pred), timeout_seconds=None):
        return True
    return _complex_equal(gold[0], pred[0])


def _complex_equal(gold: object, pred: object) -> bool:
    """Exact equality of two constant complex numbers written with the letter i (`e^{i\\pi/4}` vs
    `\\frac{\\sqrt2}{2}+\\frac{\\sqrt2}{2}i`, `\\cos x + i\\sin x`): latex2sympy keeps `i` a symbol,
    so math-verify cannot evaluate `e^{i\\pi}`. Here `i` becomes the imaginary unit when it is the
    only symbol on both sides, and the difference must simplify to exactly 0 (no numerical tolerance)."""
    import sympy

    if not (isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr)):
        return False
    names = {str(x) for x in gold.free_symbols | pred.free_symbols}
    if names != {"i"}:
        return False
    unit = {x: sympy.I for x in gold.free_symbols | pred.free_symbols}
    diff = sympy.expand_complex(gold.subs(unit) - pred.subs(unit))
    return sympy.simplify(diff) == 0


_guard_active = False


def _on_timer(signum: int, frame: object) -> None:
    if _guard_active:
        raise _Deadline()


def _arm(budget: float) -> object:
    """Raise `_Deadline` in the main thread after `budget` s of this process's CPU time, and every 50 ms
    of CPU time after that (ITIMER_PROF: user + system time; waiting for the CPU does not count)."""
    global _guard_active
    old = signal.signal(signal.SIGPROF, _on_timer)
    _guard_active = True
    signal.setitimer(signal.ITIMER_PROF, max(budget, 1e-3), 0.05)
    return old


def _disarm(old: object) -> None:
    """Stop the timer and restore the previous handler, even if a last signal lands meanwhile."""
    global _guard_active
    while True:
        try:
            _guard_active = False
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, old)
            return
        except _Deadline:
            continue


def compare_pairs(pairs: Sequence[tuple[str, str]], budget: float) -> tuple[bool, bool]:
    """(equal, timed_out): True if any (reference, prediction) pair is math-verify equivalent.

    Bounded by `budget` seconds of CPU time via SIGPROF when called in the main thread; unbounded
    otherwise (callers off the main thread must bound it themselves, see `_inline`).
    """
    if not (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")):
        return any(_equal_one(g, p) for g, p in pairs), False
    old = _arm(budget)
    try:
        try:
            return any(_equal_one(g, p) for g, p in pairs), False
        finally:
            _disarm(old)
    except _Deadline:
        _disarm(old)
        return False, True


def _inline(pairs: Sequence[tuple[str, str]], timeout: float) -> bool:
    """In-process fallback: guarded in the main thread, else a daemon thread abandoned once it has used
    `timeout` s of its CPU clock (or WALL_FACTOR x `timeout` s of wall time)."""
    import latex2sympy2_extended.latex2sympy2  # noqa: F401  (imports are not part of the time limit)
    import math_verify  # noqa: F401

    if threading.current_thread() is threading.main_thread():
        return compare_pairs(pairs, timeout)[0]
    box: list[bool] = []
    t = threading.Thread(target=lambda: box.append(compare_pairs(pairs, timeout)[0]), daemon=True)
    t.start()
    end = time.monotonic() + WALL_FACTOR * timeout
    try:
        clock = time.pthread_getcpuclockid(t.ident)  # type: ignore[arg-type]
    except (AttributeError, OSError, TypeError):
        clock = None
    while t.is_alive() and time.monotonic() < end:
        t.join(POLL_S)
        try:
            if clock is not None and time.clock_gettime(clock) > timeout:
                break
        except OSError:   # the thread ended meanwhile
            continue
    return bool(box and box[0])


# ---------------------------------------------------------------------------------------------
# worker process


def _worker_main() -> None:
    """Serve JSON lines `{"pairs": [[gold, pred], ...], "budget": s}` -> `{"equal": b, "timed_out": b}`."""
    logging.disable(logging.WARNING)
    # The protocol gets a private copy of stdout; stray prints (Python or C level) go to stderr.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        import resource

        lim = _MEM_LIMIT_MB * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    except (ImportError, ValueError, OSError):
        pass
    import math_verify  # noqa: F401  (import before announcing readiness)

    _equal_one("1", "1")  # warm the parser
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        t0 = time.process_time()
        try:
            req = json.loads(line)
            pairs = [(str(g), str(p)) for g, p in req["pairs"]]
            equal, timed_out = compare_pairs(pairs, float(req["budget"]))
            resp = {"equal": equal, "timed_out": timed_out}
        except (ValueError, KeyError, TypeError, MemoryError, RecursionError) as exc:
            resp = {"equal": False, "timed_out": False, "error": type(exc).__name__}
        resp["cpu_s"] = round(time.process_time() - t0, 4)
        out.write(json.dumps(resp) + "\n")
        out.flush()


class _Worker:
    """Handle on one worker process."""

    last_cpu_s: float | None = None   # CPU seconds the child used on the last request (None: unknown)

    def __init__(self, wait: bool = True) -> None:
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rcea.verify_sandbox"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, bufsize=0, close_fds=True,
        )
        self._buf = b""
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until the worker has imported math-verify (RuntimeError if it never does)."""
        if self._readline(time.monotonic() + STARTUP_TIMEOUT_S) != "ready":
            self.kill()
            raise RuntimeError("verifier worker did not start")

    def cpu_s(self) -> float | None:
        """The child's CPU time so far (user + system, seconds; clock-tick resolution), None where the
        platform cannot tell (no /proc)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _TICKS   # utime, stime: fields 14 and 15 of stat
        except (OSError, IndexError, ValueError):
            return None

    def _readline(self, deadline: float, cpu_end: float | None = None) -> str | None:
        """One line from the worker, or None at the wall `deadline`, once the child's CPU time passes
        `cpu_end`, or at EOF."""
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining if cpu_end is None else min(remaining, POLL_S))
            if not ready:
                used = self.cpu_s() if cpu_end is not None else None
                if used is not None and used > cpu_end:
                    return None
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode("utf-8", "replace").strip()

    def request(self, pairs: Sequence[tuple[str, str]], budget: float, deadline: float,
                cpu_limit: float | None = None) -> bool | None:
        """Equality verdict, or None when the worker used more than `cpu_limit` s of CPU time on it,
        overran the wall `deadline`, or died. `budget`: the child's own soft CPU budget (seconds)."""
        msg = json.dumps({"pairs": [list(p) for p in pairs], "budget": budget}) + "\n"
        cpu0 = self.cpu_s()
        try:
            self.proc.stdin.write(msg.encode())  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            return None
        cpu_end = None if cpu0 is None or cpu_limit is None else cpu0 + cpu_limit
        line = self._readline(deadline, cpu_end)
        cpu1 = self.cpu_s()
        self.last_cpu_s = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        if line is None:
            return None
        try:
            return bool(json.loads(line)["equal"])
        except (ValueError, KeyError, TypeError):
            return None

    def kill(self) -> None:
        """Kill the worker process (idempotent)."""
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


_idle: list[_Worker] = []
_pool_lock = threading.Lock()
_spawn_failed = False


def _forget_parent_workers() -> None:
    """In a forked child: the parent's workers (and a possibly held lock) belong to the parent."""
    global _pool_lock
    _idle.clear()
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_workers)


def _acquire() -> _Worker | None:
    with _pool_lock:
        if _idle:
            return _idle.pop()
        if _spawn_failed:
            return None
    return _acquire_new()


def _acquire_new() -> _Worker | None:
    global _spawn_failed
    try:
        return _Worker()
    except (OSError, RuntimeError, ValueError):
        _spawn_failed = True
        return None


def _release(w: _Worker) -> None:
    with _pool_lock:
        _idle.append(w)


def warmup(n: int = 1) -> None:
    """Have at least `n` idle workers (one per expected concurrent caller), so that no call waits
    for a worker's imports (start-up is not counted in a call's time limit)."""
    if _MODE != "process" or os.name != "posix":
        return
    with _pool_lock:
        missing = n - len(_idle)
    starting = []
    for _ in range(max(0, missing)):  # start them all, then wait: start-ups overlap
        try:
            starting.append(_Worker(wait=False))
        except (OSError, ValueError):
            break
    for w in starting:
        try:
            w.wait_ready()
        except RuntimeError:
            continue
        _release(w)


@atexit.register
def shutdown() -> None:
    """Stop all idle workers (also run at interpreter exit)."""
    with _pool_lock:
        workers, _idle[:] = list(_idle), []
    for w in workers:
        try:
            w.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        w.kill()


def symbolic_equal(pairs: Sequence[tuple[str, str]], timeout: float) -> bool:
    """True if any (reference, prediction) LaTeX pair is equivalent, decided within `timeout` s of CPU
    time (whatever the machine's load; wall time at most WALL_FACTOR x `timeout` s).

    A timeout or any failure counts as not equal.
    """
    if not pairs or timeout <= 0:
        return False
    worker = _acquire() if (_MODE == "process" and os.name == "posix") else None
    if worker is None:
        return _inline(pairs, timeout)
    budget = max(0.05, min(0.8 * timeout, timeout - 0.2))   # CPU seconds, soft (in the child)
    verdict = worker.request(pairs, budget, time.monotonic() + WALL_FACTOR * timeout, cpu_limit=timeout)
    if verdict is None:
        worker.kill()
        return False
    _release(worker)
    return verdict


if __name__ == "__main__":
    _worker_main()
