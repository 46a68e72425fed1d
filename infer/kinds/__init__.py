"""Measurement job kinds, one module each, in an explicit registry (registry.py), the way train/objectives/
holds the objectives.

Each kind module registers its runner with its outputs (the tables one job writes), its settings section, its
token budget, which checkpoints of a run it measures and the cost of one job. The plan (infer.plan), the job
runner (infer.jobs) and the workers' engine size (infer.worker) read the registry; a planned job carries its
tables, so rcea.store and orchestrate.units check its outputs without a kind list of their own. The names of
the kinds a study plans are a setting, `measure.kinds` (configs/base.toml): the orchestration reads them there
(it runs without this role's code), and this package checks they are the registered ones.

Adding a kind: a module here (its `register(...)` runner), its settings section and its name in
`measure.kinds` (configs/base.toml), and its row in docs/kinds.md. A kind that writes a new table
also adds the table's columns to the sample schema (rcea/schema.py, docs/schema.md): that is the contract
with every reader of the tables, not knowledge of this role.
"""

from __future__ import annotations

from rcea.config import base_value
# Registered in this order (the order `--what all` plans and error messages list them).
from infer.kinds import greedy, passk, probe, covariance  # noqa: F401, I001
from infer.kinds.registry import BASE, REGISTRY, Checkpoint, Kind, PlanContext, get, register, token_budget

if tuple(REGISTRY) != tuple(base_value("measure.kinds")):
    raise ImportError(f"infer.kinds registers {tuple(REGISTRY)} but configs/base.toml measure.kinds is "
                      f"{tuple(base_value('measure.kinds'))}: name each kind module there, in this order")

__all__ = ["BASE", "REGISTRY", "Checkpoint", "Kind", "PlanContext", "get", "register", "token_budget"]
