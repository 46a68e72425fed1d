"""The local engine: batches as subprocesses on this machine, a few at a time per role.

`parallel` caps the batches of each role running side by side (default: two training runs, one
measurement process, as the tiny demo runs them on a small CPU); its key "any", when given, caps the batches of
every role together: one pool of GPUs (or cores) that a role's batches take as they free up, so the training
GPUs join the measurement tail once no training run is left to start (benchmarks/scheduler.py, order (d)).
`gpus` ({role: [host GPU, ...]}) pins each running batch of a role to one GPU of its list that no other batch
holds (the unit's `gpu_env`: the train container's TRAIN_GPU), so training runs side by side on several GPUs of
one host. A batch that fails
transiently is put back at the front of the line, up to `max_retries` times.
`on_idle(role, gpu)`, when given, is asked for every slot of a role that is free while no batch of that role waits
(a training slot freed once no run is left to start; `gpu` its GPU, None when unpinned): when it takes the slot
(True: the study starts a measurement worker there) the slot leaves this engine for good.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from orchestrate.engines.batch import TransientUnitError, UnitError, driver_env, run_batch
from orchestrate.units import SLOTS

DEFAULT_PARALLEL = SLOTS["cpu"]


def run_local(batches, data_root, store, progress, report, log=print, parallel: dict | None = None,
              max_retries: int = 2, expand=None, gpus: dict | None = None, on_idle=None) -> None:
    limits = {**DEFAULT_PARALLEL, **(parallel or {})}
    pool = limits.pop("any", None)   # batches of every role together, when set
    free = {role: list(ids) for role, ids in (gpus or {}).items() if ids}   # GPUs of a role no batch holds
    for role, ids in free.items():
        limits[role] = min(limits.get(role, 1), len(ids))
    env = driver_env()
    batches = list(batches)
    waiting = [(b, 1) for b in batches]
    running = {}   # future -> (batch, attempt, its GPU or None)
    declined = {(role, None) for role in limits if role not in {b[0].role for b in batches}}   # not asked (again)
    with ThreadPoolExecutor(max_workers=max(1, min(sum(limits.values()), pool or sum(limits.values())))) as threads:
        progress.held = True   # one line once the free slots are filled: "running" counts what really runs
        while waiting or running:
            for item in list(waiting):
                if pool is not None and len(running) >= pool:
                    break
                batch, attempt = item
                role = batch[0].role
                if sum(1 for b, *_ in running.values() if b[0].role == role) >= limits.get(role, 1):
                    continue
                waiting.remove(item)
                for u in batch:
                    store.attempt(u.key, role, {"host": "local", "attempt": attempt})
                if attempt == 1:
                    progress.start(role, len(batch))
                gpu = free[role].pop(0) if role in free else None
                note = f"attempt {attempt}" + ("" if gpu is None else f", GPU {gpu}")
                fut = threads.submit(run_batch, batch, data_root, env, None if gpu is None else [gpu], note)
                running[fut] = (batch, attempt, gpu)
            if on_idle is not None:
                _hand_over(on_idle, limits, free, waiting, running, declined)
            progress.held = False
            progress.show()
            finished, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
            progress.held = True   # settled below; shown after the next batches have started
            for fut in finished:
                batch, attempt, gpu = running.pop(fut)
                if gpu is not None:
                    free[batch[0].role].append(gpu)
                if _settle(fut, batch, attempt, max_retries, waiting, store, progress, report, log) and expand:
                    waiting += [(b, 1) for b in expand(batch)]
        if on_idle is not None:   # the slots the last batches freed
            _hand_over(on_idle, limits, free, waiting, running, declined)
    progress.held = False
    progress.show()


def _hand_over(on_idle, limits, free, waiting, running, declined) -> None:
    """Offer `on_idle` each slot of a role that no running batch holds while no batch of that role waits; a
    slot it takes is gone from `limits` (and its GPU from `free`)."""
    for role in list(limits):
        if (role, None) in declined or any(b[0].role == role for b, _ in waiting):
            continue
        idle = limits[role] - sum(1 for b, *_ in running.values() if b[0].role == role)
        for gpu in (list(free[role])[:idle] if role in free else [None] * idle):
            if (role, gpu) in declined:
                continue
            if not on_idle(role, gpu):
                declined.add((role, gpu))
                continue
            limits[role] -= 1
            if gpu is not None:
                free[role].remove(gpu)


def _settle(fut, batch, attempt, max_retries, waiting, store, progress, report, log) -> bool:
    """Record a finished batch (or queue its retry); True when it completed."""
    role, keys = batch[0].role, [u.key for u in batch]
    try:
        out = fut.result()
    except TransientUnitError as exc:
        if attempt <= max_retries:
            report.retries += len(batch)
            log(f"[retry] {', '.join(keys)}: attempt {attempt} failed ({exc}); attempt {attempt + 1} queued")
            for k in keys:
                store.event(k, "retry", {"error": str(exc), "attempt": attempt})
            waiting.insert(0, (batch, attempt + 1))
            return False
        _fail(batch, f"{exc} (after {attempt} attempts)", store, progress, report, log)
        return False
    except (UnitError, OSError) as exc:
        _fail(batch, str(exc), store, progress, report, log)
        return False
    per_unit = out["seconds"] / max(1, len(out["ran"]))
    for u in batch:
        store.set(u.key, role, "done", seconds=per_unit, host=out["host"], error=None)
        report.done.append(u.key)
    progress.finish(role, True, per_unit, n=len(batch))
    return True


def _fail(batch, error, store, progress, report, log) -> None:
    log(f"[failed] {error}")
    for u in batch:
        store.set(u.key, u.role, "failed", error=error[:2000], updated=time.time())
        report.failed[u.key] = error
    progress.finish(batch[0].role, False, n=len(batch))
