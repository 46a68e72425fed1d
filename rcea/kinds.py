"""The names of the measurement job kinds, found without the inference role's code (standard library only).

A kind is one module of `infer/kinds/` (its file name is the kind's name; `common.py`, `registry.py` and private
`_*.py` modules are helpers): adding a kind is adding that module and its settings section in configs/base.toml.
The setting `measure.kinds` orders and chooses them: the kinds a study plans, in that order, where the entry
`"*"` stands for every other kind module found, by name. The default lists the paper's four and then `"*"`, so a
new module is planned after them with no edit to the list; a list without `"*"` plans only the kinds it names.

The orchestration (`rcea.layout.JOB_KINDS`, its `--what` choices) and the inference role (`infer.kinds`, which
imports the modules in this order and checks each registers the kind of its file name) both resolve the names
here. Where `infer/` is not shipped (the aggregation image) the named kinds stand alone.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path
from typing import Iterable

from rcea.paths import project_root

EVERY_OTHER = "*"                    # in measure.kinds: every kind module not named before or after it, by name
HELPERS = ("common", "registry")     # modules of infer/kinds/ that are not kinds


PACKAGE = "infer/kinds"              # the kind modules' folder in the source tree (not a data folder)


def kinds_dir(root: str | Path | None = None) -> Path:
    return (Path(root) if root else project_root()) / PACKAGE


def kind_modules(root: str | Path | None = None) -> tuple[str, ...]:
    """The kind modules of infer/kinds/ by name (no import): () where the folder is not shipped."""
    folder = kinds_dir(root)
    if not folder.is_dir():
        return ()
    return tuple(sorted(m.name for m in pkgutil.iter_modules([str(folder)])
                        if not m.name.startswith("_") and m.name not in HELPERS and not m.ispkg))


def resolve(listed: Iterable[str], found: Iterable[str] | None = None) -> tuple[str, ...]:
    """The kinds a study plans, in order: `listed` (the setting `measure.kinds`) with `"*"` replaced by every
    module of `found` (default: infer/kinds/) it does not name. Names are not checked here: the plan names the
    registered kinds for an unknown one."""
    listed = list(listed)
    if EVERY_OTHER not in listed:
        return tuple(dict.fromkeys(listed))
    named = [k for k in listed if k != EVERY_OTHER]
    rest = [k for k in (kind_modules() if found is None else found) if k not in named]
    at = listed.index(EVERY_OTHER)
    order = [k for k in listed[:at] if k != EVERY_OTHER] + rest + [k for k in listed[at + 1:] if k != EVERY_OTHER]
    return tuple(dict.fromkeys(order))
