"""The whole study as a list of stages, and the engine that runs them (`invoke study`, `invoke demo`).

A study is a plain list of `Stage`s; each stage hands its work (a tuple of `Unit`s, each a sequence of
argvs run in order) to an engine chosen by name (`STAGE_RUNNERS`): `local` runs the commands here, each by the
scale's launcher (rcea.launch: a local process, or `docker compose` on one GPU host), and the training runs
as work units (orchestrate.units.TrainUnit) through the local engine (orchestrate/engines/local.py: the
scale's slots side by side, one per training GPU in a container, unit records, a log per unit, a retry of a
transient exit, the other runs going on past a failed one, named at the end);
`ray` runs the train and workers stages as Ray work units on a cluster (orchestrate/engines/ray_stage.py; a
local Ray without an address) and the rest here. Stages:

    prepare     the model where it is built here (the tiny one, its warm start) and the training pool
    train       first, in the background (orchestrate/ops/background.py): the queue's holder (the queue stays
                open), the base policy's enqueue and the measurement workers on the devices that do not
                train (rcea.launch's rule, `placement`: local worker processes or Compose GPU workers); then
                each method, one per device side by side (GPUs, or `slots.train` cores), with --resume: a
                run killed earlier continues from its newest complete checkpoint, a finished one of the same
                settings is reused; each run enqueues all of its measurements once it has finished, and the
                workers start them at once, while the other runs still train; each training slot freed once
                no run is left to start gets one more worker (the local engine's on_idle)
    workers     the queue closes; the workers finish what is left (local: the background processes are waited
                for; Compose: `up` re-attaches to the workers' containers), then a check that every job is done
    judge       process validity of the verified successes (rules in the toy world, else the LLM judge)
    modes       semantic modes: induce, assign, reconcile, freeze (rules in the toy world, else the codebook)
    audit       the partition-audit sample (drawn once; annotate with `invoke audit --serve`)
    aggregate   estimators, tables, figures, report (kept when nothing they are made from has changed)
    results     data/results/<scale> copied to results/<scale> on the host

Every command skips what is already complete (manifests, the queue's job states, a drawn audit), so a
rerun resumes where the last one stopped.
"""
from __future__ import annotations

import os
import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from invoke.exceptions import Exit

from rcea import layout
from rcea.config import overlay
from orchestrate.ops import commands as cmd
from orchestrate.ops import interrupt
from orchestrate.ops.background import BACKGROUND
from rcea.launch import launch
from rcea.progress import duration
from orchestrate.ops.shell import ROOT, bind_source, host_gpu_count, is_dry, run_all, sh
from orchestrate.units import TrainUnit

# The shortened demo (CI): every stage, smaller budgets, from configs/overlays/quick.toml. Shared by every stage's
# process via RCEA_OVERRIDES.
QUICK_OVERRIDES = overlay("quick")

@dataclass(frozen=True)
class Unit:
    """One piece of work: its commands run one after another (a unit stops at the first failure). `work`: the
    work unit (orchestrate.units) its first command is, which the local engine executes as such."""
    name: str
    commands: tuple[tuple[str, ...], ...]
    work: object = None


@dataclass(frozen=True)
class Stage:
    key: str                      # prepare, train, workers, judge, modes, audit, aggregate, results
    title: str
    units: tuple[Unit, ...]
    parallel: int = 1             # units at a time
    gpus: tuple[int, ...] = ()    # host GPUs its units are pinned to, one each (the training GPUs)
    scale: str = "tiny"
    hold: tuple[str, ...] = ()    # the queue's holder, started first and kept until a stage `closes` it
    background: tuple[tuple[str, ...], ...] = ()   # started at the stage's start, joined when a stage `closes`
    quiet: tuple[tuple[str, ...], ...] = ()        # those of `background` whose output goes to the study's log
    closes: bool = False          # close the queue, then join the background commands (see background.py)
    # (device, argv, the device in words) of the measurement workers that start on the training slots freed once
    # no run is left to start (rcea.launch placement: the local engine's on_idle), in the background as the others
    elastic: tuple[tuple[int, tuple[str, ...], str], ...] = ()

    def commands(self) -> list[list[str]]:
        return [list(a) for u in self.units for a in u.commands]


def _unit(name: str, *argvs, work=None) -> Unit:
    return Unit(name, tuple(tuple(a) for a in argvs), work)


def _stage(key: str, title: str, units, **kw) -> Stage:
    return Stage(key, title, tuple(units), **kw)


def study_stages(scale: str, methods, num_workers: int | None = None, host_gpus: int | None = None) -> list[Stage]:
    """The stage list of one study. Pure: the same list is printed by `--dry` and run otherwise. What differs
    between scales comes from the scale's `[launch]` record (rcea.launch), never from its name. Its GPUs and
    cores are placed by rcea.launch's rule (`placement`: training first, one run per device, the base policy's
    measurements on the rest, every device training frees measuring too); `host_gpus`: the host's GPU count
    (None: nvidia-smi's, else compose.yaml's 8)."""
    lc = launch(scale)
    num_workers = lc.workers if num_workers is None else num_workers
    n = len(methods)
    place = lc.placement(n, num_workers, host_gpu_count if host_gpus is None else host_gpus)
    first, workers = place.first, place.workers
    stages = [_stage("prepare", "prepare (the model where built here, warm start, training pool)",
                     [_unit("prepare", cmd.role_command("rcea.prepare", ["--scale", scale], scale))], scale=scale)]
    jobs = max(1, len(place.train))
    gpus = place.pins   # none on a CPU device: only how many run
    where = f" on GPU{'s' * (len(gpus) > 1)} {','.join(map(str, gpus))}" if gpus else ""
    at_a_time = f", {min(jobs, n)} at a time" if n > 1 else ""
    joining = f"on the {place.devices} training frees once no run is left to start"
    phrase = lc.workers_phrase(len(workers), workers) + (
        "" if first == len(workers) else f" ({first} at once, {len(workers) - first} {joining})" if first else f" ({joining})")
    started = (tuple(lc.study_worker_argv(workers, range(first))),) if first else ()
    stages.append(_stage(
        "train", f"train {', '.join(methods)} ({n} method{'s' * (n > 1)}{at_a_time}{where}); each run then "
                 f"enqueues its measurements for {phrase}",
        [_unit(m, run.argv(lc.host_data()), cmd.enqueue_command(scale, m), work=run)   # the argv the unit runs
         for m in methods for run in [TrainUnit(m, scale, launcher=lc.launcher)]],
        parallel=jobs, gpus=gpus, scale=scale, hold=tuple(cmd.hold_command(scale)),
        background=(tuple(cmd.enqueue_command(scale, "base")), *started),
        quiet=(tuple(cmd.enqueue_command(scale, "base")),),   # a line per job: to the log, as a run's enqueue
        elastic=tuple((workers[i], tuple(lc.study_worker_argv(workers, (i,))), place.device(workers[i]))
                      for i in range(first, len(workers)))))
    rejoin = [cmd.workers_command(scale, len(workers), detach=False, gpus=workers)] if lc.rejoins else []
    stages.append(_stage("workers", f"workers (probe, greedy, pass@k, covariance; {phrase}, the rest once "
                                    "training is done)", [_unit(
        "workers", *rejoin, cmd.status_command(scale, check=True))], scale=scale, closes=True))
    up = [cmd.judge_server_up(scale)] if lc.judge_server else []
    stages.append(_stage("judge", "judge (process validity of the verified successes)",
                         [_unit("judge", *up, cmd.labels_command(scale, "validity"))]))
    down = [cmd.judge_server_stop(scale)] if lc.judge_server else []
    stages.append(_stage("modes", "modes (semantic modes: induce, assign, reconcile, freeze)",
                         [_unit("modes", cmd.labels_command(scale, "modes"), *down)]))
    stages.append(_stage("audit", "audit sample (pairs for the partition audit; drawn once)",
                         [_unit("audit", cmd.audit_command(scale, "sample", "--if-missing"))]))
    stages.append(_stage("aggregate", "aggregate", [_unit("aggregate", cmd.aggregate_command(scale, if_changed=True))]))
    stages.append(_stage("results", f"results -> {cmd.published_dir(scale)}/",
                         [_unit("results", cmd.publish_command(scale))]))
    return stages


def check_endpoints(scale: str, dry: bool = False) -> None:
    """Preflight at the start of a study: every LLM endpoint it will call lists its configured model
    (rcea.endpoints); otherwise stop now, before any GPU work, with each fix. A dry run asks no one."""
    if dry:
        return
    from rcea.config import load_config
    from rcea.endpoints import preflight, stand_ins

    cfg = load_config(scale)
    for line in stand_ins(cfg):
        print(f"study: warning: {line}", flush=True)
    problems = preflight(cfg)
    if problems:
        raise Exit("study: an LLM endpoint does not serve its configured model (checked before any GPU work):\n  "
                   + "\n  ".join(problems), code=2)


def run_local(c, stage: Stage, log_dir: Path) -> None:
    """The default engine: the commands run here (by the scale's launcher); a stage whose units are work
    units (the training runs) runs them through the local engine, `stage.parallel` at a time (each pinned to
    one of `stage.gpus`, if any), and each one's remaining commands (its run's enqueue) as soon as it is
    complete, while the others still run. A failed unit runs nothing more; the stage stops once the others
    are done, naming each failure and its log."""
    if is_dry(c):
        for argv in ([stage.hold] if stage.hold else []) + list(stage.background):
            print(f"{sh(argv)} &", flush=True)   # in the background (orchestrate/ops/background.py)
        run_all(c, stage.commands())
        for _, argv, where in stage.elastic:   # started as training frees its slots (on_idle below)
            print(f"{sh(argv)} &   # once training frees {where} and no run is left to start", flush=True)
        return None
    if stage.hold or stage.background:
        BACKGROUND.start(stage.background, stage.hold or None, log=Path(log_dir) / "background.log",
                         quiet=stage.quiet)
    if stage.closes:   # the queue closes; a command of a background process waits for it (Compose's `up` re-attaches)
        BACKGROUND.close()
        commands = [argv for argv in stage.commands() if not BACKGROUND.join(argv)]
        BACKGROUND.finish()
        return run_all(c, commands)
    if not stage.units or any(u.work is None for u in stage.units):
        return run_all(c, stage.commands())
    from orchestrate.engines import execute

    os.chdir(ROOT)
    role = stage.units[0].work.role
    host = (ROOT / cmd.host_data(stage.scale)).resolve()   # the driver's unit logs, as execute's
    for u in stage.units:   # a finished run with a damaged checkpoint: named with the fix before anything runs
        why = u.work.damage(host) if hasattr(u.work, "damage") else ""
        if why:
            raise Exit(f"{interrupt.task_name()}: {why}", code=2)
    rest = {u.work.key: [list(a) for a in u.commands[1:]] for u in stage.units}
    late = {}

    def follow(unit) -> list:
        """A finished run's next commands (its enqueue), their output in the run's log, not on the terminal."""
        from orchestrate.engines.batch import log_path

        log = log_path(host, unit.group)
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            for argv in rest.get(unit.key, []):
                with open(log, "a", encoding="utf-8") as fh:
                    fh.write(f"\n=== {' '.join(argv)}\n")
                    fh.flush()
                    run_all(c, [argv], out_stream=fh, err_stream=fh)
        except Exception:   # invoke's UnexpectedExit / Exit, an unwritable log: named with the failed units at the end
            try:   # the command's own last line (its one-line error) says why
                why = ": " + [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1].strip()
            except (OSError, IndexError):
                why = ""
            late[unit.key] = f"done, but its next command failed{why} (log: {log})"
        return []

    elastic = list(stage.elastic)   # the workers not started yet

    def on_idle(_role, gpu) -> bool:
        """A training slot (GPU `gpu`, None unpinned) freed with no run left to start: a measurement worker there."""
        mine = [e for e in elastic if gpu is None or e[0] == gpu]
        if mine:
            elastic.remove(mine[0])
            _start_worker(mine[0][1], log_dir, mine[0][2], len(stage.elastic) - len(elastic), len(stage.elastic))
        return bool(mine)

    report = execute([u.work for u in stage.units], "local", data_root=host, label=stage.key,
                     parallel={role: stage.parallel}, gpus={role: list(stage.gpus)},   # none: unpinned (a CPU device)
                     follow=follow, **({"on_idle": on_idle} if elastic else {}))
    failed = {**late, **report.failed}
    if failed:
        lines = "\n".join(f"  {k}: {v}" for k, v in sorted(failed.items()))
        raise Exit(f"{len(failed)} of {len(stage.units)} unit(s) of stage {stage.key} failed:\n{lines}\n"
                   "fix the cause and rerun: complete units are skipped", code=1)
    if elastic and not _measurements_left(stage, host):   # every run and its enqueue done: nothing more comes
        print(f"study: every measurement job is complete: no measurement worker starts on the {len(elastic)} "
              "slot(s) training leaves free", flush=True)
        elastic.clear()
    for _, argv, where in list(elastic):   # slots no unit took (every run complete before): workers there too
        elastic.pop(0)
        _start_worker(argv, log_dir, where, len(stage.elastic) - len(elastic), len(stage.elastic))


def _measurements_left(stage: Stage, host: Path) -> bool:
    """Once every training run and its enqueue are done: whether the queue (the state store, rcea.state) still has
    a job pending or running, after the stage's background enqueues (`quiet`: the base policy's) have ended. The
    enqueues have brought the store in line with the files (a job whose table parts are complete is done, one
    marked done whose parts are missing is pending again: infer.queue), so none left means no worker has work;
    a failed enqueue, a missing or an unreadable store count as work left (the workers stage says what is wrong)."""
    from rcea.state import read

    if not all([BACKGROUND.ended(argv) for argv in stage.quiet]):   # a failed one: the workers stage names it
        return True
    path = layout.state_path(stage.scale, host)
    if not path.is_file():
        return True
    try:   # a job still marked running (its holder may be gone: a worker reclaims it) counts as work left
        left = read(path, "SELECT count(*) AS n FROM jobs WHERE state IN ('pending', 'running')")[0]["n"]
    except Exception:   # a busy, damaged or older store: the workers open it and report what is wrong
        return True
    return bool(left)


def _start_worker(argv, log_dir: Path, where: str, i: int, n: int) -> None:
    """One more measurement worker in the background (background.py owns it: joined by the workers stage,
    stopped with the rest); its output to the background log unless it prints the queue's progress line."""
    print(f"study: measurement worker {i} of {n} on freed slots starts on {where}: no training run is left to "
          "start", flush=True)
    quiet = "--progress" not in argv   # the one with the queue's progress line keeps the terminal (and logs the rest)
    BACKGROUND.add(argv, log=Path(log_dir) / "background.log", quiet=quiet, errors=quiet)


def _ray(scale: str, methods, address: str | None, num_workers: int | None = None):
    from orchestrate.engines.ray_stage import RayStage   # imports Ray only when a stage needs it

    return RayStage(scale, list(methods), address, local=run_local, num_workers=num_workers)


STAGE_RUNNERS = {"local": run_local, "ray": _ray}


def stage_runner(engine: str, scale: str, methods, address: str | None = None, num_workers: int | None = None):
    """The stage runner `f(c, stage, log_dir)` of an engine name (`local`: every stage runs here).
    An engine that runs some stages elsewhere takes `scale`, `methods` and the measurement workers and falls
    back on `run_local`; `address` (HOST:PORT of a Ray head) is for `ray` only."""
    name = cmd.choice("engine", engine, tuple(STAGE_RUNNERS))
    if name == "ray":
        return _ray(scale, methods, address or None, num_workers)
    if address:
        raise Exit(f"--address {address} names a Ray cluster: add --engine ray", code=2)
    return STAGE_RUNNERS[name]


def banner(i: int, stages: list[Stage], spent: float) -> str:
    """`=== [i/n] title  (+elapsed)`. No time left here: the stages differ too much to extrapolate from the
    ones before; each stage's progress line gives its own, measured from the units it has finished."""
    return f"\n=== [{i}/{len(stages)}] {stages[i - 1].title}  (+{duration(spent)})"


def run_study(c, stages: list[Stage], execute=run_local, log_dir: Path | None = None) -> float:
    """Run the stages in order, each through `execute(c, stage, log_dir)`; returns the seconds it took."""
    scale = stages[0].scale if stages else "tiny"
    log_dir = log_dir or layout.logs_dir("study", cmd.host_data(scale))
    if not is_dry(c):  # made here, as this user: Docker would create a missing bind-mount source as root
        bind_source(ROOT / cmd.results_dir(scale), containers=False)   # for containers: shell.data_folder
    t0 = time.monotonic()
    with interrupt.guard(), data_lock(c, scale):
        try:
            for i, stage in enumerate(stages, 1):
                print(banner(i, stages, time.monotonic() - t0), flush=True)
                execute(c, stage, log_dir)
        except Exception as exc:   # a full disk (the state store's SQLite, a unit that could not write): one line
            from rcea.diskfull import cause

            full = cause(exc, [ROOT / cmd.host_data(scale), ROOT / cmd.results_dir(scale)])
            if full is None:
                raise
            raise Exit(f"{interrupt.task_name()}: error: {full.args[1]}", code=1) from None
        finally:   # stopped early: the queue closes and no local worker is left running (background.py)
            BACKGROUND.stop()
    return time.monotonic() - t0


@contextmanager
def data_lock(c, scale: str = "tiny"):
    """One study at a time per data folder (rcea.datalock) of the scale's driver; a dry run takes none."""
    if is_dry(c):
        yield
        return
    import sys

    from rcea import datalock

    folder = (ROOT / cmd.host_data(scale)).resolve()
    try:
        with datalock.hold(folder, shlex.join(["invoke", *sys.argv[1:]])) as fd:
            interrupt.on_interrupt(lambda: datalock.release(folder, fd))
            yield
    except datalock.Busy as exc:   # another live run holds the folder (no stage raises it)
        raise Exit(f"{interrupt.task_name()}: {exc}", code=1) from None
