"""Engines: run a set of work units (orchestrate.units) to completion, locally or on a Ray cluster.

    report = execute(units, engine="local")                       subprocesses on this machine
    report = execute(units, engine="ray", address="head:6379")    Ray tasks on a cluster (None: a local Ray)

Both skip units whose outputs are complete, group measurement jobs of one checkpoint into one process
(orchestrate.units.batches), record every unit in the state store's unit records (rcea.state: under the local
engine the data folder's store, beside the queue's jobs; under Ray the same schema on the driver's own disk,
rcea.state.default_path), print stage counts with the time left (orchestrate.engines.progress), and retry
transient failures. `report.failed` maps each unit that
could not be completed to its reason; the caller decides whether that stops the study.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrate.engines.progress import Progress
from orchestrate.units import batches
from rcea.state import Store, default_path

ENGINES = ("local", "ray")


@dataclass
class Report:
    done: list[str] = field(default_factory=list)       # ran to completion now
    skipped: list[str] = field(default_factory=list)    # complete before (nothing ran)
    failed: dict[str, str] = field(default_factory=dict)
    retries: int = 0                                     # attempts beyond the first, all units

    def summary(self) -> str:
        return (f"{len(self.done)} done, {len(self.skipped)} already complete, {len(self.failed)} failed, "
                f"{self.retries} retried")


def execute(units, engine: str = "local", data_root=None, store_path=None, log=print, label: str = "study",
            follow=None, **options) -> Report:
    """Run `units` with `engine`; `options` go to the engine (local: parallel, max_retries; ray: address,
    parallel, max_retries, fake_gpus, on_event, init_kwargs). `follow(unit)` names the units that may start
    once `unit` is complete (a training run's measurements): they join the run as soon as it is, or at
    once for a unit found complete."""
    from rcea.paths import data_dir

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    root = Path(data_root) if data_root is not None else data_dir()
    units = list(units)
    scales = {getattr(u, "scale", None) for u in units}
    store = Store(store_path or default_path(root, scales.pop() if len(scales) == 1 else None, engine))
    report, seen, counts = Report(), set(), {"total": {}, "skipped": {}}
    progress = None

    def triage(new_units) -> list[list]:
        """The incomplete batches of `new_units` not seen before; complete ones are recorded as skipped
        (and what follows them is triaged in turn)."""
        todo, after = [], []
        for batch in batches(u for u in new_units if u.key not in seen):
            role = batch[0].role
            seen.update(u.key for u in batch)
            rest = []
            for u in batch:
                if u.done(root):
                    report.skipped.append(u.key)
                    counts["skipped"][role] = counts["skipped"].get(role, 0) + 1
                    if (store.state(u.key) or {}).get("state") != "done":
                        store.set(u.key, role, "done", error=None)
                    after += follow(u) if follow else []
                else:
                    rest.append(u)
            counts["total"][role] = counts["total"].get(role, 0) + len(batch)
            if progress is not None:
                progress.add(role, len(batch), done=len(batch) - len(rest))
            if rest:
                todo.append(rest)
        return todo + (triage(after) if after else [])

    todo = triage(units)
    progress = Progress(dict(counts["total"]), store, label=f"{label}:{engine}")
    for role, n in counts["skipped"].items():
        progress.done[role] = n
    if report.skipped:
        by_role = ", ".join(f"{role} {n}" for role, n in counts["skipped"].items())
        log(f"[{label}:{engine}] {len(report.skipped)} unit(s) already complete, skipped ({by_role})")

    def expand(batch) -> list[list]:
        """The batches that follow a completed batch (none without `follow`)."""
        return triage([n for u in batch for n in follow(u)]) if follow else []

    try:
        if todo:
            if engine == "local":
                from orchestrate.engines.local import run_local as runner
            else:
                from orchestrate.engines.ray_exec import run_ray as runner
            runner(todo, root, store, progress, report, log=log, expand=expand, **options)
    finally:
        store.close()
    log(f"[{label}:{engine}] {report.summary()}")
    return report
