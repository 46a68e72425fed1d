"""Measurement job kinds, one module each, in an explicit registry (registry.py), the way train/objectives/
holds the objectives.

Each kind module registers its runner with its outputs (the tables one job writes), its settings section, its
token budget, which checkpoints of a run it measures and the cost of one job. The plan (infer.plan), the job
runner (infer.jobs) and the workers' engine size (infer.worker) read the registry; a planned job carries its
tables, so rcea.store and orchestrate.units check its outputs without a kind list of their own. The modules are
found here, not named: every module of this folder but common.py and registry.py is a kind, named as its file
(rcea.kinds, which the orchestration reads too, since it runs without this role's code). The setting
`measure.kinds` (configs/base.toml) orders and chooses them; its `"*"` stands for every module it does not name.

Adding a kind: a module here (its `register("<file name>", ...)` runner) and its settings section in
configs/base.toml; nothing else names it (docs/kinds.md). A kind that writes a new table also adds the
table's columns to the sample schema (rcea/schema.py, docs/schema.md): that is the contract with every reader
of the tables, not knowledge of this role.
"""

from __future__ import annotations

import importlib

from rcea import kinds as _names
from rcea.config import base_value
from infer.kinds.registry import BASE, REGISTRY, Checkpoint, Kind, PlanContext, get, register, token_budget  # noqa: I001

# Imported in the order `--what all` plans them and error messages list them: measure.kinds over the modules found.
_MODULES = _names.kind_modules()
_found = tuple(k for k in _names.resolve([*base_value("measure.kinds"), _names.EVERY_OTHER], _MODULES)
               if k in _MODULES)
for _module in _found:
    importlib.import_module(f"{__name__}.{_module}")
if set(REGISTRY) != set(_found):
    raise ImportError(f"the modules of infer/kinds/ are {_found} but they register {tuple(REGISTRY)}: each kind "
                      "module registers one kind, named as its file (register(\"<file name>\", ...))")
_registered = dict(REGISTRY)   # one module may import another: the registry keeps the planning order
REGISTRY.clear()
REGISTRY.update((k, _registered[k]) for k in _found)

__all__ = ["BASE", "REGISTRY", "Checkpoint", "Kind", "PlanContext", "get", "register", "token_budget"]
