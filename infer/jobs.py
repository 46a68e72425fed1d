"""Running one measurement job. Each job kind (infer/kinds/, one module each) reads its settings from the
configuration the job was enqueued with and computes every row in memory; `run_job` then writes its table
parts atomically (infer.tables), so a killed job leaves nothing and its rerun writes exactly the rows of an
uninterrupted run.

Settings: docs/settings.md (`[eval]`, `[passk]`, `[probe]`, `[covariance]`); formulas: docs/estimators.md.
"""

from __future__ import annotations

from typing import Callable

from rcea.layout import part_name
from rcea.store import job_complete

from infer import kinds
from infer.kinds.common import JobInputError, derive_seed, encode, job_config
from infer.kinds.covariance import covariance_questions
from infer.kinds.greedy import run_greedy
from infer.tables import clear_stale, part_path, write_parts

Progress = Callable[[str, int, int], None]
# The registry's tables by kind name, for callers that look them up here.
OUTPUTS = {name: list(kind.tables) for name, kind in kinds.REGISTRY.items()}

# Re-exported for the callers that import them from here (infer.unit_cli, tests); the kinds' modules hold them.
__all__ = ["JobInputError", "OUTPUTS", "covariance_questions", "derive_seed", "encode", "run_greedy", "run_job"]


def run_job(payload: dict, ctx, progress: Progress) -> dict:
    """Run one job unless its outputs are complete; returns a short summary."""
    kind, scale = kinds.get(payload["kind"]), payload["scale"]
    if list(payload.get("tables", kind.tables)) != list(kind.tables):
        raise JobInputError(f"this {kind.name} job was planned to write {payload['tables']}, but the kind now "
                            f"writes {list(kind.tables)}; re-enqueue it (python -m infer enqueue ... --retry-failed)")
    part = part_name(payload)
    if job_complete(kind.name, {**payload, "tables": list(kind.tables)}):   # complete, under this job's settings
        return {"skipped": "outputs already complete"}
    for t in kind.tables:
        clear_stale(part_path(scale, t, part))
    cfg = job_config(payload)
    if hasattr(ctx, "for_job"):   # an outside run's own base model, when its payload names one (infer.worker)
        ctx.for_job(payload)
    frames, seeds = kind.run(payload, cfg, ctx, progress)
    if set(frames) != set(kind.tables):
        raise RuntimeError(f"job kind {kind.name} wrote tables {sorted(frames)} but registers {list(kind.tables)}")
    write_parts(scale, part, frames, cfg, seeds, job=f"{kind.name}:{payload['method']}-{payload['step']}",
                adapter=payload.get("adapter"), **{k: payload[k] for k in ("model", "base_model") if payload.get(k)},
                backends=ctx.describe())
    return {t: len(df) for t, df in frames.items()}
