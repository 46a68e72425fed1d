"""Settings with a fixed set of valid values, checked before any work.

    choice_problem(key, value)                 '' or one line: rcea.config checks every value it applies
    library_problem(key, value)                '' or one line, against the library's own list (imports it)
    rcea.config_check.check_library_choices    what `python -m train` and prepare call

The project's own sets (PROJECT: `data.world`, `judge.labeller`, `train.precision`) are checked
as the configuration loads, in every environment, so the tools environment refuses them before a study starts.
Where a library defines the set, it is read from that library, so it follows the library's version:
`train.lr_scheduler` from transformers' `SchedulerType`, `train.optimizer` from its `OptimizerNames`. A process
whose environment lacks the library (the tools environment) cannot ask it and leaves the check to the role
that has it; the study's first stage (prepare, in the training environment) checks what the overrides set
before it builds anything, and `python -m train` checks every value before it creates the run folder. Importing
transformers costs seconds, so the configuration loader itself does not do it.
"""
from __future__ import annotations

import importlib
import importlib.util
from functools import lru_cache


# Sets the project defines (the code that reads the setting takes exactly these); a list value is checked item
# by item. A value outside them used to pass silently (data.world=maths ran the math world's code on nothing,
# train.precision=fp16 trained in fp32) or fail late.
PROJECT = {"data.world": ("math", "toy"), "judge.labeller": ("auto", "rules", "llm"), "train.precision": ("bf16", "fp32")}


def choice_problem(key: str, value) -> str:
    """'' when `value` (each item of a list) is one of `key`'s choices or `key` has none, else one line."""
    if key not in PROJECT:
        return ""
    valid = PROJECT[key]
    if all(v in valid for v in (value if isinstance(value, list) else [value])):
        return ""
    return f"{key} = {value!r} is not one of its choices; valid: {', '.join(valid)}"


LIBRARY = {"train.lr_scheduler": ("transformers.trainer_utils", "SchedulerType"),
           "train.optimizer": ("transformers.training_args", "OptimizerNames")}


@lru_cache(maxsize=None)
def library_choices(key: str) -> tuple[str, ...] | None:
    """The values the library accepts for `key`, or None when the library is not installed here."""
    module, name = LIBRARY[key]
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return None
    return tuple(str(m.value) for m in getattr(importlib.import_module(module), name))


def library_problem(key: str, value) -> str:
    """'' when the library accepts `value` for `key` (or is not installed here), else one line naming the valid."""
    valid = library_choices(key)
    if valid is None or value in valid:
        return ""
    module, name = LIBRARY[key]
    return f"{key} = {value!r} is not a choice of {module}.{name}; valid: {', '.join(valid)}"
