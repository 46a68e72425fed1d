"""The measurement job kind registry: one explicit dict, filled by the `register` decorator of each kind module.

A `Kind` is everything the study knows about one sort of measurement job:
  tables: the tables one job writes, one part each (rcea.layout.part_name); a planned job carries them in its
      payload (`tables`), so whoever checks a job's outputs (rcea.store.job_complete, orchestrate.units) reads
      them from the job and needs no kind list of its own;
  section: its settings section in configs/base.toml (documented in docs/settings.md);
  budget: the setting of its completion-token budget (the generation engine's context covers the largest);
  checkpoints(p) -> [(Checkpoint, extra payload)]: which checkpoints of a run it measures (`p`: PlanContext);
  cost(p, extra) -> float: its relative cost (about the tokens it generates or scores); the queue and the
      engines start the costliest jobs first, benchmarks/scheduler.py converts it to time;
  run(payload, cfg, ctx, progress) -> (frames by table, seeds): the runner (the decorated function);
  score_calls(cfg) -> int: the HF scorer's teacher-forced passes one job makes (None: the kind only generates);
      the resource plan (train/envelope.py) sizes a worker's scoring phase and its weight swaps from it.
Standard library only: the registry is data; a runner imports its heavy libraries when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from rcea import layout
from rcea.config import BASE_METHOD

REGISTRY: dict[str, "Kind"] = {}


@dataclass(frozen=True)
class Checkpoint:
    method: str                 # training method, or "base" for the untrained policy
    step: int                   # optimizer step (0 for base)
    adapter: str | None         # adapter folder relative to the data folder; None for base and full models
    model: str | None = None    # a full model folder relative to the data folder (an outside run's merged or
                                # exported checkpoint), loaded as the model itself, no adapter; None otherwise

    @property
    def tag(self) -> str:
        return f"{self.method}-{self.step}"

    @property
    def folder(self) -> str | None:
        """The checkpoint's folder relative to the data folder, whatever its form (None: the base policy)."""
        return self.model or self.adapter

    def fields(self, suffix: str = "") -> dict:
        """The payload keys naming this checkpoint: `adapter<suffix>`, and `model<suffix>` for a full model only
        (an adapter run's payloads are what they were before full models were measured)."""
        return {f"adapter{suffix}": self.adapter, **({f"model{suffix}": self.model} if self.model else {})}


BASE = Checkpoint(BASE_METHOD, 0, None)


def adapter_rel(scale: str, method: str, step: int) -> str:
    return layout.checkpoint_dir(scale, method, step, root="").as_posix()


@dataclass(frozen=True)
class PlanContext:
    """What a kind plans from: the configuration and one run's complete checkpoints (none for `base`)."""
    cfg: object
    scale: str
    method: str
    checkpoints: list[Checkpoint]
    milestones: list[Checkpoint]
    dense: list[Checkpoint]
    sizes: dict[str, int] = field(default_factory=dict)   # questions per benchmark

    def n_questions(self, bench: str, cap: int) -> int:
        size = self.sizes.get(bench, 100)
        return min(size, cap) if cap else size

    def at(self, step: int) -> Checkpoint:
        """The run's checkpoint at `step` (the base policy at or before 0), complete or not: a job that reads
        an incomplete one fails with a message naming it (infer.kinds.common.adapter_path)."""
        if step <= 0:
            return BASE
        found = {c.step: c for c in self.checkpoints}.get(step)
        return found or Checkpoint(self.method, step, adapter_rel(self.scale, self.method, step))


@dataclass(frozen=True)
class Kind:
    name: str
    tables: tuple[str, ...]
    section: str
    budget: str
    checkpoints: Callable[[PlanContext], list[tuple[Checkpoint, dict]]]
    cost: Callable[[PlanContext, dict], float]
    run: Callable
    score_calls: Callable[[object], int] | None = None


def register(name: str, *, tables: tuple[str, ...], section: str, budget: str, checkpoints: Callable,
             cost: Callable, score_calls: Callable | None = None) -> Callable:
    """Decorator on a kind module's runner: registers `name` with its outputs, settings, plan and cost."""

    def wrap(run: Callable) -> Callable:
        if name in REGISTRY:
            raise ValueError(f"measurement kind {name!r} registered twice")
        if not tables or "." not in budget:
            raise ValueError(f"measurement kind {name!r}: name its tables and its budget setting (section.key)")
        REGISTRY[name] = Kind(name, tuple(tables), section, budget, checkpoints, cost, run, score_calls)
        return run

    return wrap


def get(name: str) -> Kind:
    """The registered kind `name`; a miss names the valid ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown job kind {name!r}; valid: {', '.join(REGISTRY)}, all")
    return REGISTRY[name]


def token_budget(cfg) -> int:
    """The longest completion any registered kind generates (what the generation engine's context must hold)."""
    return max(int(cfg[k.budget]) for k in REGISTRY.values())
