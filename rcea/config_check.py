"""Checks of a loaded configuration that need more than the configuration: the library-defined choices.

    check_library_choices(cfg)              every setting of rcea.choices.LIBRARY (`python -m train`)
    check_library_choices(cfg, overrides)   only those an override sets, here or in $RCEA_OVERRIDES (prepare)

Apart from rcea.config because importing the library (transformers) costs seconds; see rcea/choices.py.
"""
from __future__ import annotations

from rcea.choices import LIBRARY, library_problem
from rcea.config import ConfigError, env_overrides, parse_override


def check_library_choices(cfg, overrides=None) -> None:
    """Raise ConfigError (one line: the key, the value, the valid ones) for a value the library refuses."""
    keys = list(LIBRARY)
    if overrides is not None:
        given = {parse_override(o)[0] for o in [*env_overrides(), *overrides]}
        keys = [k for k in keys if k in given]
    for key in keys:
        problem = library_problem(key, cfg[key])
        if problem:
            raise ConfigError(problem)
