"""The Ray engine: each batch of work units is one Ray task wrapping the batch's subprocess.

Placement: a training batch asks for one GPU and one unit of the custom resource `train`, a measurement
batch for one GPU and one `infer`; worker nodes advertise these by the image they run
(`ray start ... --num-gpus N --resources '{"infer": N}'`, see compose.yaml). Ray chooses the GPU and the
task hands `ray.get_gpu_ids()` to the subprocess as CUDA_VISIBLE_DEVICES.

Failures: Ray retries a task whose worker process or node died (`max_retries`), and a task that raised
TransientUnitError (the subprocess was killed, ran out of GPU memory, lost a connection; see
orchestrate.engines.batch). Training tasks get a fresh worker process each (`max_calls=1`). Each attempt
reports its start (node, pid, GPUs) to a small actor on the driver's node; the driver writes these into
its state store (unit records) and prints a `[retry]` line when a unit starts again.

Without GPUs (the tiny scale, or tests), `gpus=False` asks for CPU slots instead; `fake_gpus=True` keeps
the GPU request but at `num_cpus=0`, so eight fake GPUs run eight tasks at once on a two-core machine.
"""

from __future__ import annotations

import os
import socket
import time

from orchestrate.engines.batch import TransientUnitError, UnitError, driver_env, run_batch
from orchestrate.units import SLOTS


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise RuntimeError("the Ray engine needs the `ray` package: it is in the tools environment "
                           "(scripts/bootstrap tools) and the train/infer images (lockfiles/*.txt)") from exc
    return ray


def task_options(role: str, gpus: bool = True, fake_gpus: bool = False, max_retries: int = 3) -> dict:
    """Ray options of a batch's task (pure, tested)."""
    opts = {"resources": {role: 1}, "max_retries": max_retries, "retry_exceptions": [TransientUnitError]}
    if gpus:
        opts.update(num_gpus=1, num_cpus=0 if fake_gpus else 1)
    else:
        opts.update(num_gpus=0, num_cpus=1)
    if role == "train":
        opts["max_calls"] = 1   # a fresh worker process per training run
    return opts


def _batch_task(batch, data_root, env, events):
    """Runs on a Ray worker: report the attempt, then run the batch as a subprocess on Ray's GPUs."""
    ray = _ray()
    ctx = ray.get_runtime_context()
    gpus = list(ray.get_gpu_ids())
    info = {"keys": [u.key for u in batch], "role": batch[0].role, "node": ctx.get_node_id(),
            "host": socket.gethostname(), "pid": os.getpid(), "gpus": gpus, "t": time.time()}
    try:
        ray.get(events.record.remote(info))
    except ray.exceptions.RayActorError:   # the event log is restarting (its node was lost): the unit runs all the
        pass                               # same; only this start goes unrecorded
    # A node sees the shared folder at its own mount point (compose: /workspace/data), named by RCEA_NODE_DATA.
    root = os.environ.get("RCEA_NODE_DATA") or data_root
    return run_batch(batch, root, env, gpu_ids=gpus or None, attempt_note=f"ray node {info['node'][:12]}")


def _event_log_class(ray):
    @ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
    class EventLog:
        """Attempt starts reported by the tasks, drained by the driver. Restarted wherever it can run when its
        node is lost (the starts not yet drained are lost with it: reports, not state)."""

        def __init__(self):
            self.items = []

        def record(self, item: dict) -> None:
            self.items.append(item)

        def drain(self) -> list:
            out, self.items = self.items, []
            return out

    return EventLog


def connect(address: str | None, parallel: dict | None = None, gpus: bool = True, init_kwargs: dict | None = None,
            log=print):
    """Join the cluster at `address`, or start a local Ray offering `train`/`infer` slots (parallel)."""
    ray = _ray()
    if ray.is_initialized():
        return False
    kwargs = dict(init_kwargs or {})
    # Ray refuses a driver whose Python differs from the cluster's in the patch level by default. The images
    # run uv's Python 3.11 build, the driver whatever 3.11 the host has; tasks pickle across patch levels.
    os.environ.setdefault("RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL", "minor")
    # Every unit task names its GPUs itself (run_batch); opt in to Ray's coming default, which leaves
    # CUDA_VISIBLE_DEVICES alone for tasks without GPUs (and stops its FutureWarning about it).
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    env_address = os.environ.get("RAY_ADDRESS", "")
    if not address and env_address not in ("", "local"):
        address = env_address  # Ray's own variable names the cluster to join
    if address:
        ctx = ray.init(address=address, **kwargs)
    else:
        slots = {**SLOTS["gpu" if gpus else "cpu"], **(parallel or {})}
        kwargs.setdefault("resources", slots)
        # address="local": a Ray of our own. Without it ray.init joins whatever cluster Ray's address file
        # (/tmp/ray/ray_current_cluster) names, e.g. one the user started with `ray start` for something else.
        ctx = ray.init(address="local", **kwargs)
    url = getattr(ctx, "dashboard_url", "") or ""
    log(f"[ray] connected to {address or 'a local Ray instance'}; dashboard: "
        + (f"http://{url}" if url else "not running (the cluster's head serves it when started with ray[default])"))
    return True


def check_resources(ray, roles, gpus: bool) -> None:
    have = ray.cluster_resources()
    missing = [r for r in roles if have.get(r, 0) < 1] + (["GPU"] if gpus and have.get("GPU", 0) < 1 else [])
    if missing:
        raise RuntimeError(f"the Ray cluster offers no {', '.join(missing)} resource, so those tasks would wait "
                           f"forever (it has {dict(sorted(have.items()))}); start worker nodes with e.g. "
                           "`ray start --address HEAD:6379 --num-gpus 8 --resources '{\"infer\": 8}'` "
                           "(see compose.yaml, services ray-train-node / ray-infer-node)")


def run_ray(batches, data_root, store, progress, report, log=print, address: str | None = None,
            parallel: dict | None = None, gpus: bool = True, fake_gpus: bool = False, max_retries: int = 3,
            on_event=None, init_kwargs: dict | None = None, poll_s: float = 0.5, expand=None,
            limit: dict | None = None) -> None:
    """Run `batches` as Ray tasks; `expand(batch)` gives the batches that may start once `batch` is complete
    (orchestrate.engines.execute's `follow`), submitted at once. `limit` ({role: n}) caps the batches of a
    role in flight, whatever the cluster offers (--num-workers: the measurement workers under every engine)."""
    ray = _ray()
    started = connect(address, parallel, gpus, init_kwargs, log)
    try:
        roles = {b[0].role for b in batches} | ({"infer"} if expand is not None and "train" in
                                                {b[0].role for b in batches} else set())
        check_resources(ray, sorted(roles), gpus)
        here = ray.get_runtime_context().get_node_id()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        events = _event_log_class(ray).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True)).remote()
        # One remote function per role (max_calls can only be set when the function is made remote).
        remote = {}
        env = driver_env()
        pending, attempts, held = {}, {}, []   # held: batches waiting for their role's limit

        def submit(batch) -> None:
            role = batch[0].role
            if role in (limit or {}) and sum(b[0].role == role for b in pending.values()) >= limit[role]:
                held.append(batch)
                return
            if role not in remote:   # one remote function per role (max_calls is set when it is made remote)
                remote[role] = ray.remote(**task_options(role, gpus, fake_gpus, max_retries))(_batch_task)
            pending[remote[role].remote(batch, str(data_root), env, events)] = batch

        for batch in batches:
            submit(batch)
        while pending or held:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=poll_s) if pending else ([], [])
            try:
                started_now = ray.get(events.drain.remote())
            except ray.exceptions.RayActorError:   # ActorUnavailableError: the event log's node was lost and
                started_now = []                     # it restarts (seen in CI when a node was removed mid-study)
            for item in started_now:
                _started(item, attempts, store, progress, report, log, on_event)
            for ref in ready:
                batch = pending.pop(ref)
                if _collect(ray, ref, batch, attempts, store, progress, report, log) and expand is not None:
                    for new in expand(batch):   # e.g. a finished run's measurements, while others still train
                        submit(new)
            if held:   # freed slots take the held batches in order (submit holds again what does not fit)
                waiting, held[:] = list(held), []
                for batch in waiting:
                    submit(batch)
    finally:
        if started:
            ray.shutdown()


def _started(item, attempts, store, progress, report, log, on_event) -> None:
    keys, role = item["keys"], item["role"]
    n = attempts.get(keys[0], 0) + 1
    for k in keys:
        attempts[k] = n
        store.attempt(k, role, {kk: item[kk] for kk in ("node", "host", "pid", "gpus")})
    if n == 1:
        progress.start(role, len(keys))
    else:
        report.retries += len(keys)
        log(f"[retry] {', '.join(keys)}: attempt {n} on node {item['node'][:12]} pid {item['pid']} "
            f"(attempt {n - 1} was lost or failed transiently)")
    if on_event is not None:
        on_event({**item, "attempt": n})


def _collect(ray, ref, batch, attempts, store, progress, report, log) -> bool:
    """Record a finished task; True when the batch completed."""
    role = batch[0].role
    try:
        out = ray.get(ref)
    except Exception as exc:   # RayTaskError (UnitError/TransientUnitError after retries), node/worker lost
        cause = getattr(exc, "cause", None) or exc
        kind = "error" if isinstance(cause, UnitError) else "gave up after retries"
        lines = str(cause).strip().splitlines() or [""]
        # the first line names the unit's log, the last one is the unit's own last word
        error = f"{kind}: {type(cause).__name__}: {lines[0]}" + (f" | {lines[-1]}" if len(lines) > 1 else "")
        log(f"[failed] {', '.join(u.key for u in batch)}: {error}")
        for u in batch:
            store.set(u.key, role, "failed", error=error[:2000])
            report.failed[u.key] = error
        progress.finish(role, False, was_running=attempts.get(batch[0].key, 0) > 0, n=len(batch))
        return False
    per_unit = out["seconds"] / max(1, len(out["ran"]))
    for u in batch:
        store.set(u.key, role, "done", seconds=per_unit, host=out["host"], error=None)
        report.done.append(u.key)
    progress.finish(role, True, per_unit, was_running=attempts.get(batch[0].key, 0) > 0, n=len(batch))
    return True
