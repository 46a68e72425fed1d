"""`python -m benchmarks.scheduler`: the 3b study's order of work on one host with 8 GPUs, through the real
local engine (orchestrate.engines.execute: batching per checkpoint, the unit records, per-role slots, `follow`),
with stand-in units that sleep for their cost. No GPU, no model: only the scheduler is measured.

Units: the 3b study's seven training runs and the measurement jobs `infer.plan.plan_jobs` plans for each
(fake complete checkpoints every 50 steps of a 4,000-step run), grouped per checkpoint as the engine groups
them (one process per checkpoint; its jobs one after another). Weights: a measurement job's cost is its
kind's (infer/kinds/: about the tokens it generates or scores, sampling plus scoring weighing 3 per token, as
the probe's); a training run weighs `--train-weight` x max_steps x (per_device_batch x grad_accum) x
max_completion_tokens, 3 by default (each step samples its batch and scores it for the update, as a probe
sample). Sleeps are those weights scaled so one training run sleeps `--train-seconds`; model loads and
start-up are left out. GPU busy share: the stand-ins' sleep time over 8 x the makespan.

    (a) the earlier order: the runs one after another on one GPU, then every measurement on the 8 GPUs
    (b) measurements follow each run: the runs on one GPU, each run's measurements (and the base policy's,
        from the start) on the other 7 as soon as it has finished (`execute(..., follow=...)`); what both
        engines now do (the default one through the queue held open during training: orchestrate/ops/background.py)
    (c) several training GPUs: k runs side by side on k GPUs, the measurements following on the other 8 - k
    (d) elastic: one pool of 8 GPUs (the engine's `parallel["any"]`); training runs start first, one per free
        GPU, and any GPU that no training run is left to take runs measurement batches (the base policy's from
        the start, each run's as soon as it has finished), the training GPUs included

In (a) to (c) the GPUs are per-role slots (`parallel`): a GPU belongs to one role for the whole study. Every order
is also compared with a lower bound on any schedule of the same batches on 8 GPUs: max(the longest run plus its
longest measurement batch, which cannot start before the run has finished; the total GPU work / 8).

    .envs/infer/bin/python -m benchmarks.scheduler [--train-seconds 1.5] [--train-weight 3] [--train-gpus 2,4]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

GPUS = 8
SCALE = "3b"
# The data folder and the state store of each scenario: in memory where the machine has it, so the makespan is the
# scheduler's, not this disk's (the unit records commit about four times per unit; an fsync can take 20 ms on a
# busy disk, and the scheduling loop waits for it).
FAST_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


@dataclass(frozen=True)
class SleepUnit:
    """A stand-in work unit: its batch (one process) sleeps for the sum of its units' seconds, then marks them
    done."""
    key: str
    role: str
    group: str
    seconds: float

    def marker(self, data_root) -> Path:
        return Path(data_root) / "done" / self.key.replace(":", "_").replace("/", "_")

    def done(self, data_root) -> bool:
        return self.marker(data_root).exists()

    @staticmethod
    def command(batch, python: str, data_root, spec_dir) -> list[str]:
        marks = " ".join(shlex.quote(str(u.marker(data_root))) for u in batch)
        return ["sh", "-c", f"sleep {sum(u.seconds for u in batch):.4f} && touch {marks}"]


def _fake_run(root: Path, method: str, steps, max_steps: int) -> None:
    """Complete checkpoint folders (adapter files, trainer state, its manifest) of one 3b run."""
    from rcea.layout import TRAINER_STATE, checkpoint_dir
    from rcea.store import manifest_path, write_manifest

    manifest = None
    for s in steps:
        d = checkpoint_dir(SCALE, method, s, root)
        d.mkdir(parents=True)
        (d / "adapter_config.json").write_text("{}")
        (d / "adapter_model.safetensors").write_text("")
        (d / "trainer_state.json").write_text(json.dumps({"max_steps": max_steps}))
        (d / TRAINER_STATE).write_bytes(b"state")
        if manifest is None:   # one real manifest (its provenance takes a while), copied to the others
            manifest = write_manifest(d / TRAINER_STATE).read_text()
        else:
            manifest_path(d / TRAINER_STATE).write_text(manifest)


def study_costs(train_weight: float = 3.0) -> tuple[dict[str, float], dict[str, list[dict]]]:
    """{method: training cost} and {method: its planned jobs (key, group, cost)} of the 3b study."""
    from rcea.config import METHODS, load_config

    from infer.plan import plan_jobs

    cfg = load_config(SCALE)
    steps = cfg["train.max_steps"] if cfg["train.max_steps"] > 0 else 4000
    train = train_weight * steps * cfg["train.per_device_batch"] * cfg["train.grad_accum"] * \
        cfg["train.max_completion_tokens"]
    jobs = {}
    with tempfile.TemporaryDirectory(dir=FAST_DIR) as tmp, mock.patch.dict(os.environ, {"RCEA_DATA": tmp}):
        for m in METHODS:
            _fake_run(Path(tmp), m, range(cfg["train.save_steps"], steps + 1, cfg["train.save_steps"]), steps)
            planned = plan_jobs(cfg, SCALE, m, "all", [])
            jobs[m] = [{"key": j["key"], "group": j["payload"]["adapter"] or "base", "cost": j["cost"]}
                       for j in planned]
    return {m: train for m in jobs}, jobs


def units(train: dict[str, float], jobs: dict[str, list[dict]], seconds_per_cost: float):
    """Training units by method, measurement units by method (a run's own) and the base policy's."""
    t = {m: SleepUnit(f"train:{m}", "train", f"train:{m}", c * seconds_per_cost) for m, c in train.items()}
    runs, base = {}, {}
    for m, js in jobs.items():
        for j in js:
            u = SleepUnit(f"infer:{j['key']}", "infer", j["group"], j["cost"] * seconds_per_cost)
            if j["group"] == "base":
                base[u.key] = u
            else:
                runs.setdefault(m, []).append(u)
    return t, runs, list(base.values())


def _execute(units_, root: Path, parallel: dict, follow=None) -> None:
    from orchestrate.engines import execute

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):   # its progress lines
        report = execute(units_, "local", data_root=root, store_path=root / "state.sqlite", log=lambda *a: None,
                         follow=follow, parallel=parallel, max_retries=0)
    if report.failed:
        raise RuntimeError(f"stand-in units failed: {report.failed}")


def ideal(batches_, parallel: dict, follow=None) -> float:
    """The makespan of the same order if scheduling cost nothing: the local engine's rule (start every waiting
    batch, in order, whose role has a free slot; a finished batch's followers join the end of the line)
    replayed with the sleeps as durations."""
    from orchestrate.units import batches

    seen = {u.key for b in batches_ for u in b}
    waiting, running, now = list(batches_), [], 0.0
    pool = parallel.get("any")   # every role's batches together (order (d)), when set
    while waiting or running:
        for b in list(waiting):
            if pool is not None and len(running) >= pool:
                break
            if sum(1 for _, r in running if r[0].role == b[0].role) < parallel.get(b[0].role, 1):
                waiting.remove(b)
                running.append((now + sum(u.seconds for u in b), b))
        running.sort(key=lambda x: x[0])
        now, done = running.pop(0)
        new = [n for u in done for n in (follow(u) if follow else []) if n.key not in seen]
        seen.update(n.key for n in new)
        waiting += batches(new)
    return now


def lower_bound(train, runs, base) -> float:
    """No schedule of these batches on GPUS GPUs ends sooner: max(a run + its longest measurement batch; all GPU
    work / GPUS). A run's batches may go side by side once it has finished; a batch is one process."""
    from orchestrate.units import batches

    longest = max(t.seconds + max((sum(u.seconds for u in b) for b in batches(runs.get(m, []))), default=0.0)
                  for m, t in train.items())
    work = sum(u.seconds for u in [*train.values(), *base, *(u for us in runs.values() for u in us)])
    return max(longest, work / GPUS)


def scenario(name: str, train, runs, base, train_gpus: int, follow: bool, elastic: bool = False) -> dict:
    """Run one order of the study's units through the engine; returns its makespan, the ideal one (no
    scheduling cost) and the GPU busy share (the units' GPU time over 8 x the makespan)."""
    from orchestrate.units import batches

    measure = [*base, *(u for us in runs.values() for u in us)]
    with tempfile.TemporaryDirectory(dir=FAST_DIR) as tmp:
        root = Path(tmp)
        (root / "done").mkdir()
        t0 = time.monotonic()
        if follow:
            after = {t.key: runs[m] for m, t in train.items()}
            slots = ({"train": train_gpus, "infer": GPUS, "any": GPUS} if elastic
                     else {"train": train_gpus, "infer": GPUS - train_gpus})
            _execute([*train.values(), *base], root, slots, follow=lambda u: after.get(u.key, []))
            best = ideal(batches([*train.values(), *base]), slots, lambda u: after.get(u.key, []))
        else:   # all training, then all measurement
            _execute(list(train.values()), root, {"train": train_gpus, "infer": 0})
            _execute(measure, root, {"train": 0, "infer": GPUS})
            best = ideal(batches(train.values()), {"train": train_gpus}) + ideal(batches(measure), {"infer": GPUS})
        makespan = time.monotonic() - t0
        missing = [u.key for u in [*train.values(), *measure] if not u.done(root)]
    if missing:
        raise RuntimeError(f"{len(missing)} stand-in units did not run, e.g. {missing[0]}")
    work = sum(u.seconds for u in [*train.values(), *measure])
    gpus = (f"{GPUS} shared" if elastic else f"{train_gpus}+{GPUS - train_gpus}") if follow \
        else f"{train_gpus}, then {GPUS}"
    return {"name": name, "gpus": gpus,
            "makespan_s": makespan, "ideal_s": best, "busy": work / (GPUS * makespan),
            "ideal_busy": work / (GPUS * best)}


def run(train_seconds: float = 1.5, train_weight: float = 3.0, train_gpus=(2, 4), log=print, costs=None,
        elastic: bool = True) -> list[dict]:
    """Rows (a), (b), one (c) per count in `train_gpus` and (d) when `elastic`; `costs`: study_costs(train_weight)
    if given. Each row's `vs_bound` is its ideal makespan over `lower_bound`, `vs_b` over (b)'s (today's order)."""
    from rcea.launch import split

    train_cost, jobs = costs or study_costs(train_weight)
    per_cost = train_seconds / next(iter(train_cost.values()))
    train, runs, base = units(train_cost, jobs, per_cost)
    n_jobs = len(base) + sum(len(v) for v in runs.values())
    work = sum(u.seconds for u in [*train.values(), *base, *(u for us in runs.values() for u in us)])
    log(f"{SCALE} study: {len(train)} training runs, {n_jobs} measurement jobs; total sleep {work:.1f} s on {GPUS} "
        f"GPUs (one training run {train_seconds:.2f} s; its measurements "
        f"{sum(u.seconds for u in next(iter(runs.values()))):.2f} s, the base policy's {sum(u.seconds for u in base):.2f} s)")
    rows = [scenario("(a) all training, then all measurement", train, runs, base, 1, follow=False),
            scenario("(b) measurements follow each run", train, runs, base, 1, follow=True)]
    rows += [scenario(f"(c) {k} training GPUs, measurements follow", train, runs, base, k, follow=True)
             for k in train_gpus]
    if elastic:
        rows.append(scenario("(d) elastic: one pool, training first", train, runs, base,
                             len(split(range(GPUS), len(train))[0]), follow=True, elastic=True))   # the study's rule
    a, a_ideal = rows[0]["makespan_s"], rows[0]["ideal_s"]
    bound = lower_bound(train, runs, base)
    log(f"{'':<44} GPUs (train+measure)  makespan  vs (a)  GPU busy | ideal: makespan  vs (a)  vs (b)  "
        f"GPU busy  / bound")
    for r in rows:
        r["ratio"], r["ideal_ratio"] = r["makespan_s"] / a, r["ideal_s"] / a_ideal
        r["vs_b"], r["vs_bound"] = r["ideal_s"] / rows[1]["ideal_s"], r["ideal_s"] / bound
        log(f"{r['name']:<44} {r['gpus']:<20} {r['makespan_s']:6.2f} s  {r['ratio']:5.3f}  "
            f"{100 * r['busy']:6.1f}%  | {r['ideal_s']:12.2f} s  {r['ideal_ratio']:5.3f}  {r['vs_b']:5.3f}  "
            f"{100 * r['ideal_busy']:7.1f}%  {r['vs_bound']:6.3f}")
    log(f"lower bound on any order: {bound:.2f} s (max(a run + its longest measurement batch, GPU work / {GPUS}))")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scheduler", description=__doc__.split("\n\n")[0])
    p.add_argument("--train-seconds", type=float, default=1.5, help="sleep of one training run (scales every unit)")
    p.add_argument("--train-weight", type=float, default=3.0,
                   help="cost per training token, in the measurement kinds' units (sampling plus scoring: 3)")
    p.add_argument("--train-gpus", default="2,4", help="training GPUs of the (c) rows, comma-separated (< 8)")
    args = p.parse_args(argv)
    try:
        ks = tuple(int(k) for k in args.train_gpus.split(",") if k.strip())
    except ValueError:
        ks = ()
    if any(not 1 <= k < GPUS for k in ks) or args.train_seconds <= 0 or args.train_weight <= 0:
        print(f"error: --train-gpus takes counts from 1 to {GPUS - 1} (e.g. 2,4), --train-seconds and "
              "--train-weight positive numbers", file=sys.stderr)
        return 2
    run(args.train_seconds, args.train_weight, ks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
