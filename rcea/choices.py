"""Settings whose valid values a library defines, checked against that library before any work.

    check_library_choices(cfg)                 every such setting (the training process: transformers is loaded)
    check_library_choices(cfg, overrides)      only those an override sets (prepare, the first stage of a study)

The valid values are read from the library that takes the setting, so they follow its version:
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

from rcea.config import ConfigError, parse_override

LIBRARY = {"train.lr_scheduler": ("transformers.trainer_utils", "SchedulerType"),
           "train.optimizer": ("transformers.training_args", "OptimizerNames")}


@lru_cache(maxsize=None)
def library_choices(key: str) -> tuple[str, ...] | None:
    """The values the library accepts for `key`, or None when the library is not installed here."""
    module, name = LIBRARY[key]
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return None
    return tuple(str(m.value) for m in getattr(importlib.import_module(module), name))


def check_library_choices(cfg, overrides=None) -> None:
    """Raise ConfigError (one line: the key, the value, the valid ones) for a value the library refuses.
    `overrides`: check only the settings these `key=value` strings (and $RCEA_OVERRIDES) set."""
    keys = list(LIBRARY)
    if overrides is not None:
        from rcea.config import env_overrides

        keys = [k for k in keys if k in {parse_override(o)[0] for o in [*env_overrides(), *overrides]}]
    for key in keys:
        valid = library_choices(key)
        if valid is not None and cfg[key] not in valid:
            module, name = LIBRARY[key]
            raise ConfigError(f"{key} = {cfg[key]!r} is not a choice of {module}.{name}; valid: {', '.join(valid)}")
