"""The one way to build a typed settings record (a dataclass) from settings: `build`.

    record = build(FailureThresholds, cfg.section("failure"), where="failure")
    record = build(LLMSettings, {**cfg.section("judge"), **cli}, where="judge", others=("labeller", ...))

Strict: a name that is not a field of the record is an error naming it and the valid names, unless the caller
names it in `others` (a key of the same settings table that another reader owns: [codebook] holds both the
codebook model's endpoint and the codebook's own settings); a field without a value takes its default, and one
without a default is an error; a value must fit the field's type (bools only for bools, ints stand for floats,
TOML arrays for tuples). Ints given for floats become floats and arrays become tuples, so a record is the same
whichever way its values arrived. Checks of a record's own rules (a valid choice, a range) stay with it.
Standard library only.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Mapping

from rcea.config import value_fits


class RecordError(ValueError):
    """Settings that do not fit their record; the message names the key and what is valid."""


def _hints(cls) -> dict[str, Any]:
    """Each field's type; a name its module imports only for type checkers (a nested record loaded lazily)
    stands for Any here: that record's own builder checks it."""
    unresolved: dict[str, Any] = {}
    while True:
        try:
            return typing.get_type_hints(cls, localns=unresolved)
        except NameError as exc:
            if exc.name is None or exc.name in unresolved:
                raise
            unresolved[exc.name] = Any


def fits(hint, value) -> bool:
    """Whether `value` may stand for a field typed `hint`."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(fits(a, value) for a in args)
    if origin in (tuple, list):
        if not isinstance(value, (tuple, list)) or isinstance(value, bool):
            return False
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return len(args) == len(value) and all(fits(a, v) for a, v in zip(args, value))
        return all(fits(args[0], v) for v in value) if args else True
    if origin is dict:
        if not isinstance(value, dict):
            return False
        return all(fits(args[0], k) and fits(args[1], v) for k, v in value.items()) if args else True
    if isinstance(hint, type):
        return value_fits(hint, value)
    return True


def _convert(hint, value):
    """Ints for floats become floats, arrays for tuples become tuples (elements converted alike)."""
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        arm = next((a for a in args if a is not type(None) and fits(a, value)), None)
        return _convert(arm, value) if arm is not None else value
    if origin is tuple and isinstance(value, (list, tuple)):
        each = (args[0],) * len(value) if len(args) == 2 and args[1] is Ellipsis else args or (Any,) * len(value)
        return tuple(_convert(a, v) for a, v in zip(each, value))
    return value


def names(cls) -> tuple[str, ...]:
    """The settings a record holds (its init fields), in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def build(cls, values: Mapping[str, Any], where: str, others=(), source: str = "", error=RecordError):
    """The record `cls` from {field name: value} (see the module docstring). `where` names the settings in
    messages (`<where>.<name> must be ...`), `source` says where a missing value belongs, `error` is the
    exception raised (a subclass of ValueError a caller already catches)."""
    valid = names(cls)
    unknown = sorted(set(values) - set(valid) - set(others))
    if unknown:
        raise error(f"{where} has no setting {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    missing = [n for n, f in fields.items() if n not in values and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise error(f"{where} settings lack {', '.join(missing)}" + (f" ({source})" if source else ""))
    hints, checked = _hints(cls), {}
    for name in valid:
        if name not in values:
            continue
        value, hint = values[name], hints.get(name, Any)
        if not fits(hint, value):
            kind = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
            raise error(f"{where}.{name} must be {kind}, got {value!r}")
        checked[name] = _convert(hint, value)
    return cls(**checked)
