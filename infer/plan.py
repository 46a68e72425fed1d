"""What to run: checkpoint discovery, milestones, the dense trace, and the job list of one run.

Checkpoints are the complete (rcea.store.checkpoint_complete) LoRA adapter folders under data/train/<scale>/<method>/checkpoints/
checkpoint-<step>/ plus the base policy (method `base`, step 0). The run length is the `max_steps` of
the newest trainer_state.json (else `train.max_steps`, else the newest step). Milestones are the
checkpoints nearest 25/50/75/100% of the run; the dense greedy trace (`eval.trace_benchmark`, MATH500
in the paper) uses the checkpoints nearest j/dense_points of the run, j = 1..dense_points (ties go to
the later checkpoint).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rcea import layout
from rcea.config import BASE_METHOD
from rcea.data import minerva_subset_ids
from rcea.layout import checkpoints_dir
from rcea.paths import data_dir
from rcea.store import complete_checkpoints
from rcea.layout import JOB_KINDS as KINDS

NOMINAL_SIZES = {"amc23": 40, "aime24": 30, "aime25": 30, "math500": 500, "minerva_math": 40}


@dataclass(frozen=True)
class Checkpoint:
    method: str                 # training method, or "base" for the untrained policy
    step: int                   # optimizer step (0 for base)
    adapter: str | None         # adapter folder relative to the data folder; None for base

    @property
    def tag(self) -> str:
        return f"{self.method}-{self.step}"


BASE = Checkpoint(BASE_METHOD, 0, None)


def adapter_rel(scale: str, method: str, step: int) -> str:
    return layout.checkpoint_dir(scale, method, step, root="").as_posix()


def discover(scale: str, method: str) -> list[Checkpoint]:
    """Complete checkpoints of one run (rcea.store.checkpoint_complete), by step; the others are skipped."""
    return [Checkpoint(method, step, adapter_rel(scale, method, step))
            for step, _ in complete_checkpoints(checkpoints_dir(scale, method))]


def run_length(cfg, ckpts: list[Checkpoint]) -> int:
    if not ckpts:
        return 0
    state = data_dir() / ckpts[-1].adapter / "trainer_state.json"
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


def plan_jobs(cfg, scale: str, method: str, what: str, overrides: list[str]) -> list[dict]:
    """One job per (checkpoint, kind); each is {key, kind, payload, cost}. Base-policy jobs are shared by all
    runs; `method="base"` plans only those (no checkpoints needed)."""
    if what != "all" and what not in KINDS:
        raise ValueError(f"unknown job kind {what!r}; valid: {', '.join(KINDS)}, all")
    kinds = KINDS if what == "all" else (what,)
    ckpts = [] if method == BASE_METHOD else discover(scale, method)   # base: the untrained policy's jobs only
    if not ckpts and method != BASE_METHOD:
        raise FileNotFoundError(f"no complete checkpoints under {checkpoints_dir(scale, method)}; "
                                f"train first (python -m train --scale {scale} --method {method})")
    miles, dense = milestones(cfg, ckpts), dense_trace(cfg, ckpts)
    common = {"scale": scale, "overrides": list(overrides), "config_hash": cfg.hash()}
    jobs = []

    def add(kind: str, ck: Checkpoint, cost: float, **extra):
        payload = {**common, "kind": kind, "method": ck.method, "step": ck.step, "adapter": ck.adapter, **extra}
        jobs.append({"key": f"{kind}:{ck.tag}", "kind": kind, "payload": payload, "cost": cost})

    sizes = dict(NOMINAL_SIZES)
    if "minerva_math" in cfg["eval.benchmarks"]:   # the frozen subset, checked against its setting
        sizes["minerva_math"] = len(minerva_subset_ids(cfg["eval.minerva_subset_size"]))

    def n_questions(bench: str, cap: int) -> int:
        size = sizes.get(bench, 100)
        return min(size, cap) if cap else size

    if "greedy" in kinds:   # cost ~ generated tokens: the scheduler runs the longest jobs first
        cap = cfg["eval.questions_per_benchmark"]
        for ck in [BASE] + sorted(set(miles) | set(dense), key=lambda c: c.step):
            benches = list(cfg["eval.benchmarks"]) if (ck is BASE or ck in miles) else [cfg["eval.trace_benchmark"]]
            add("greedy", ck, sum(n_questions(b, cap) for b in benches) * cfg["eval.max_new_tokens"],
                benchmarks=benches)
    if "passk" in kinds:
        nq = n_questions(cfg["passk.benchmark"], cfg["passk.questions"])
        for ck in (BASE, *ckpts[-1:]):
            add("passk", ck, nq * cfg["passk.n"] * cfg["passk.max_new_tokens"])
    if "probe" in kinds:    # sampling plus teacher-forced scoring (about twice the work per token)
        for ck in [BASE] + miles:
            add("probe", ck, 3 * cfg["probe.n_questions"] * cfg["probe.k"] * cfg["probe.max_new_tokens"])
    if "covariance" in kinds:
        gap = cfg["covariance.gap_steps"]
        by_step = {c.step: c for c in ckpts}
        for ck in miles:
            s = ck.step - gap
            src = BASE if s <= 0 else by_step.get(s, Checkpoint(method, s, adapter_rel(scale, method, s)))
            add("covariance", ck, 4 * cfg["covariance.n_questions"] * cfg["covariance.trajectories"]
                * cfg["probe.max_new_tokens"], run_method=method, step_from=src.step, adapter_from=src.adapter)
    return jobs
