"""What to run: checkpoint discovery, milestones, the dense trace, and the job list of one run.

Checkpoints are the complete (rcea.store.checkpoint_complete) LoRA adapter folders under data/train/<scale>/<method>/checkpoints/
checkpoint-<step>/ (or, for an outside run, full model folders there: infer/outside.py) plus the base policy (method `base`, step 0). The run length is the `max_steps` of
the newest trainer_state.json (else `train.max_steps`, else the newest step). Milestones are the
checkpoints nearest 25/50/75/100% of the run; the dense greedy trace (`eval.trace_benchmark`, MATH500
in the paper) uses the checkpoints nearest j/dense_points of the run, j = 1..dense_points (ties go to
the later checkpoint). Which of them each job kind measures, and at what cost, its module says (infer/kinds/).
"""

from __future__ import annotations

import json

from rcea.config import BASE_METHOD
from rcea.data import minerva_subset_ids
from rcea.kinds import resolve
from rcea.layout import checkpoints_dir, run_dir
from rcea.paths import data_dir
from rcea.store import complete_checkpoints

from infer import kinds
from infer.kinds import BASE, Checkpoint, PlanContext
from infer.kinds.registry import adapter_rel

KINDS = tuple(kinds.REGISTRY)
NOMINAL_SIZES = {"amc23": 40, "aime24": 30, "aime25": 30, "math500": 500, "minerva_math": 40}
__all__ = ["BASE", "KINDS", "Checkpoint", "adapter_rel", "dense_trace", "discover", "milestones", "plan_jobs"]


def discover(scale: str, method: str) -> list[Checkpoint]:
    """Complete checkpoints of one run (rcea.store.checkpoint_complete), by step; the others are skipped."""
    out = []
    for step, path in complete_checkpoints(checkpoints_dir(scale, method)):
        rel = adapter_rel(scale, method, step)
        full = not (path / "adapter_config.json").exists()   # complete without adapter files: a full model
        out.append(Checkpoint(method, step, None, rel) if full else Checkpoint(method, step, rel))
    return out


def run_length(cfg, ckpts: list[Checkpoint]) -> int:
    if not ckpts:
        return 0
    state = data_dir() / ckpts[-1].folder / "trainer_state.json"
    if state.exists():
        try:
            max_steps = int(json.loads(state.read_text()).get("max_steps", 0))
            if max_steps > 0:
                return max_steps
        except (ValueError, TypeError):
            pass
    if cfg["train.max_steps"] > 0:
        return int(cfg["train.max_steps"])
    return ckpts[-1].step


def nearest(ckpts: list[Checkpoint], target: float) -> Checkpoint:
    return min(ckpts, key=lambda c: (abs(c.step - target), -c.step))


def milestones(cfg, ckpts: list[Checkpoint]) -> list[Checkpoint]:
    total = run_length(cfg, ckpts)
    return sorted({nearest(ckpts, f * total) for f in cfg["eval.milestones"]}, key=lambda c: c.step) if ckpts else []


def dense_trace(cfg, ckpts: list[Checkpoint]) -> list[Checkpoint]:
    total, n = run_length(cfg, ckpts), cfg["eval.dense_points"]
    return sorted({nearest(ckpts, j * total / n) for j in range(1, n + 1)}, key=lambda c: c.step) if ckpts else []


def outside_base(scale: str, method: str) -> str | None:
    """The base model folder (relative to the data folder) an outside run measured with --base-differs is measured
    over: `base_model` of its outside.json (infer/outside.py); None for every other run (the scale's base)."""
    try:
        rec = json.loads((run_dir(scale, method) / "outside.json").read_text())
    except (OSError, ValueError):
        return None
    over = rec.get("base_model") if isinstance(rec, dict) and rec.get("base_differs") else None
    return over if isinstance(over, str) and over else None


def plan_jobs(cfg, scale: str, method: str, what: str, overrides: list[str]) -> list[dict]:
    """One job per (kind, checkpoint it measures); each is {key, kind, payload, cost}, the payload naming the
    tables the job writes. `what`: one registered kind, or `all` (`measure.kinds`; its "*": every other kind).
    Base-policy jobs are shared by all runs; `method="base"` plans only those (no checkpoints needed). The run's
    own jobs of an outside run measured over another base name that base's folder (`base_model`: outside_base);
    its base-policy jobs are the shared ones, over the scale's base."""
    names = resolve(cfg["measure.kinds"], kinds.REGISTRY) if what == "all" else (what,)
    chosen = [kinds.get(name) for name in names]     # an unknown name: one line naming the registered kinds
    ckpts = [] if method == BASE_METHOD else discover(scale, method)   # base: the untrained policy's jobs only
    if not ckpts and method != BASE_METHOD:
        raise FileNotFoundError(f"no complete checkpoints under {checkpoints_dir(scale, method)}; "
                                f"train first (python -m train --scale {scale} --method {method})")
    sizes = dict(NOMINAL_SIZES)
    if "minerva_math" in cfg["eval.benchmarks"]:   # the frozen subset, checked against its setting
        sizes["minerva_math"] = len(minerva_subset_ids(cfg["eval.minerva_subset_size"]))
    p = PlanContext(cfg, scale, method, ckpts, milestones(cfg, ckpts), dense_trace(cfg, ckpts), sizes)
    common = {"scale": scale, "overrides": list(overrides), "config_hash": cfg.hash()}
    over = None if method == BASE_METHOD else outside_base(scale, method)
    own = {"base_model": over} if over else {}   # the run's own checkpoints' jobs, not the shared base-policy ones
    jobs = []
    for kind in chosen:
        for ck, extra in kind.checkpoints(p):
            payload = {**common, "kind": kind.name, "method": ck.method, "step": ck.step, **ck.fields(),
                       "tables": list(kind.tables), **extra, **(own if ck.method == method else {})}
            jobs.append({"key": f"{kind.name}:{ck.tag}", "kind": kind.name, "payload": payload,
                         "cost": float(kind.cost(p, extra))})
    return jobs
