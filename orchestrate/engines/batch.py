"""Running one batch of work units as a subprocess in its role's environment (shared by both engines).

A batch is a list of units of one group (orchestrate.units.batches): a training run alone, or the measurement
jobs of one checkpoint. `run_batch` skips units already complete, runs the rest in one child process
of the role's python (`orchestrate.units.role_python`), appends its output to `<data>/logs/units/<group>.log`
and classifies the outcome:

    all outputs complete                 -> returns a summary
    child killed by a signal, exit 75,   -> TransientUnitError (an engine retries it, elsewhere if it can)
    its launcher's kill status (a killed
    container: exit 137/143, rcea.launch
    `killed`), or a named transient error
    in its log
    any other failure                    -> UnitError (retrying would fail the same way)
    exit 0 with an output incomplete     -> UnitError (the same check at every launcher: the data folder is the
                                            host's, bind-mounted into a container)

The child dies with its parent (PR_SET_PDEATHSIG on Linux), so a lost Ray worker cannot leave a process
holding a GPU that Ray has already handed to the retry.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from rcea import layout
from rcea.launch import killed as launcher_killed
from rcea.paths import project_root
from rcea.transient import EXIT_TRANSIENT, is_transient
from orchestrate.units import role_python
# Environment the driver hands to every unit (it may run on another node, which has its own environment).
PASS_ENV = ("RCEA_OVERRIDES", "HF_HUB_OFFLINE", "OMP_NUM_THREADS")


class UnitError(RuntimeError):
    """A unit failed in a way a retry would repeat; the message names the log to read."""


class TransientUnitError(RuntimeError):
    """A unit failed in a way a retry may cure (process killed, out of GPU memory, lost connection)."""


def driver_env() -> dict:
    """The variables of PASS_ENV the driver has set: they travel with each task."""
    return {k: os.environ[k] for k in PASS_ENV if k in os.environ}


def log_path(data_root, group: str) -> Path:
    return layout.logs_dir("units", data_root) / (re.sub(r"[^\w.\-]+", "_", group)[:150] + ".log")


def _die_with_parent() -> None:
    """In the child before exec: receive SIGKILL when the parent (the engine's worker) dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass   # not Linux: the child may outlive a killed worker; its outputs are still atomic


def gpu_env(unit) -> str:
    """The variable pinning `unit` to its GPU (its launcher's: a container's is compose.yaml's TRAIN_GPU)."""
    return getattr(unit, "gpu_env", "CUDA_VISIBLE_DEVICES")


def child_env(data_root, env: dict | None, gpu_ids, gpu_env: str = "CUDA_VISIBLE_DEVICES") -> dict:
    """The unit's environment: RCEA_DATA is the host's data folder (a container's bind-mount source)."""
    out = dict(os.environ, **(env or {}), RCEA_DATA=str(data_root))
    out.setdefault("OMP_NUM_THREADS", "1")   # one CPU thread per unit unless asked (tiny models on shared CPUs)
    if gpu_ids is not None:   # the engine's assignment (Ray's, or a local GPU pool); an empty list hides every GPU
        out[gpu_env] = ",".join(str(g) for g in gpu_ids)   # a container's: compose.yaml's TRAIN_GPU
    return out


def run_batch(batch, data_root, env: dict | None = None, gpu_ids=None, attempt_note: str = "") -> dict:
    """Run the incomplete units of `batch`; returns {keys, ran, seconds, host, log}. Raises UnitError or
    TransientUnitError (see the module docstring)."""
    todo = [u for u in batch if not u.done(data_root)]
    keys = [u.key for u in batch]
    if not todo:
        return {"keys": keys, "ran": [], "seconds": 0.0, "host": socket.gethostname(), "log": None}
    log = log_path(data_root, batch[0].group)
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    # The unit's spec files go beside its log, one folder per group, emptied by the next attempt: a killed
    # attempt leaves nothing in /tmp (a temporary folder is never removed when its process is killed).
    spec_dir = log.with_suffix(".specs")
    shutil.rmtree(spec_dir, ignore_errors=True)
    spec_dir.mkdir(parents=True)
    argv = type(todo[0]).command(todo, role_python(todo[0].role), data_root, spec_dir)
    with open(log, "ab") as fh:
        fh.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {socket.gethostname()} pid {os.getpid()} "
                 f"{attempt_note}\n=== {' '.join(argv)}\n".encode())
        fh.flush()
        start = fh.tell()
        proc = subprocess.run(argv, cwd=project_root(), env=child_env(data_root, env, gpu_ids, gpu_env(todo[0])), stdout=fh,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    shutil.rmtree(spec_dir, ignore_errors=True)
    rc, seconds = proc.returncode, time.time() - t0
    with open(log, "rb") as fh:
        fh.seek(start)
        tail = fh.read().decode(errors="replace")[-4000:]
    where = f"{', '.join(u.key for u in todo)} (log: {log})"
    killed = launcher_killed(getattr(todo[0], "launcher", "local"), rc)
    if rc < 0 or rc == EXIT_TRANSIENT or killed or (rc != 0 and is_transient(tail)):
        cause = f"killed by signal {-rc}" if rc < 0 else f"container killed (exit {rc})" if killed else f"exit {rc}"
        raise TransientUnitError(f"{cause}: {where}")
    if rc != 0:
        last = "\n".join(tail.strip().splitlines()[-5:])
        raise UnitError(f"exit {rc}: {where}\n{last}")
    missing = [u.key for u in todo if not u.done(data_root)]
    if missing:
        raise UnitError(f"exit 0 but the outputs of {', '.join(missing)} are incomplete (log: {log})")
    return {"keys": keys, "ran": [u.key for u in todo], "seconds": round(seconds, 2), "host": socket.gethostname(),
            "log": str(log)}
