"""Experiment configuration: typed, validated on load, tagged stated / reconstructed / chosen.

Sources, in order (later wins): `configs/base.toml` (every setting with its status and doc),
`configs/objectives.toml` (per-objective settings, read as `objectives.<method>.<name>`; its sections are the
methods, `METHODS`, each with its `label`),
`configs/scales/<scale>.toml` (plain values), then the `RCEA_OVERRIDES` environment variable
(`;`-separated, shared by every process of one pipeline run; `overlay(name)` turns configs/overlays/<name>.toml
into such strings), then `--override section.key=value` strings.
A key that is not in the base files, a value of the wrong type, or an unknown method or scale stops
the load with a message naming the valid choices. `Config.write(run_dir)` copies the source files
verbatim and the resolved values into a run folder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from rcea.choices import choice_problem  # settings with a fixed set of valid values
from rcea.paths import configs_dir
from rcea.ranges import RANGES, out_of_range, range_rule  # noqa: F401  (re-exported: their home was here)

BASE_METHOD = "base"  # the `method` of the untrained policy in job keys and tables (not an objective)
LABEL = "label"   # the one plain key of a section (objectives.toml), beside its { value, status, doc } settings
STATUSES = {"S": "stated in the paper", "E": "the cited source's", "R": "reconstructed", "C": "chosen"}


# Transport settings: where an LLM endpoint lives, how its key is found, how many requests run at once
# and how long to wait. Results do not depend on them (responses are cached per request), so they are
# recorded in each run's resolved.json but left out of the configuration hash.
# What a training run reads (besides its own objectives.<method> settings): its configuration hash and the
# check of a run folder cover these only, so correcting e.g. judge.model never orphans a trained run.
TRAINING_SECTIONS = ("model", "data", "toy", "train", "failure")
NOT_IN_HASH = frozenset({
    "judge.base_url", "judge.api_key_env", "judge.concurrency", "judge.timeout_s", "judge.max_retries",
    "judge.max_retry_after_s", "codebook.base_url", "codebook.api_key_env", "codebook.api_key_file",
    "codebook.concurrency", "train.report_to", "aggregate.workers",
    "train.logprob_chunk_tokens",   # how the log-prob pass is split in memory: the same numbers (tests/train)
})


class ConfigError(ValueError):
    """A configuration problem; the message says what is valid."""


@dataclass(frozen=True)
class Setting:
    value: Any
    status: str  # "S" | "E" | "R" | "C" (STATUSES)
    doc: str = ""


def check_choice(kind: str, value: str, valid: Iterable[str]) -> str:
    valid = tuple(valid)
    if value not in valid:
        raise ConfigError(f"unknown {kind} {value!r}; valid {kind}s: {', '.join(valid)}")
    return value


def value_fits(kind: type, value: Any) -> bool:
    """Whether `value` may stand for a setting of type `kind`: bools only for bools, ints for floats."""
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _type_ok(default: Any, value: Any) -> bool:
    return value_fits(type(default), value)


def _read_settings(path: Path, prefix: str = "") -> dict[str, Setting]:
    """Flatten `[section] key = {value, status, doc}` into {"section.key": Setting}."""
    out: dict[str, Setting] = {}

    def walk(table: dict, where: str) -> None:
        for key, item in table.items():
            name = f"{where}.{key}" if where else key
            if key == LABEL and where and "." not in where and isinstance(item, str):
                continue   # a section's name for people (objectives.toml: how tables print the method)
            if isinstance(item, dict) and "value" in item and "status" in item:
                if item["status"] not in STATUSES:
                    raise ConfigError(f"{path.name}: {name} has status {item['status']!r}; use one of {', '.join(STATUSES)}")
                out[prefix + name] = Setting(item["value"], item["status"], item.get("doc", ""))
            elif isinstance(item, dict):
                walk(item, name)
            else:
                raise ConfigError(f"{path.name}: {name} must be {{ value = ..., status = \"{'|'.join(STATUSES)}\" }}")

    walk(read_toml(path), "")
    return out


def read_toml(path: Path) -> dict:
    """A TOML file's table; a syntax error names the file and the line to fix (tomllib gives the line)."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}; fix that line") from None


def _scale_names() -> tuple[str, ...]:
    """The scales: one per configs/scales/*.toml, so adding a scale is adding that file. Scales that run locally
    ([launch] launcher = "local", the CPU default) come first, then by name: ("tiny", "3b", "7b")."""
    found = []
    for path in sorted((configs_dir() / "scales").glob("*.toml")):
        launcher = read_toml(path).get("launch", {}).get("launcher")
        found.append((launcher != "local", path.stem))
    return tuple(name for _, name in sorted(found))


SCALES = _scale_names()
SCALE_TABLES = ("launch", "targets")   # tables of a scale file that hold no setting: where and on what it runs


def _method_labels(cdir: Path) -> dict[str, str]:
    """{method: label}: one per section of configs/objectives.toml, in its order (the paper's), each with its
    `label`, so adding a method is its section there plus its module in train/objectives/ (which checks the two
    agree). The label is how tables and figures print the method, not a setting."""
    out = {}
    for name, section in read_toml(cdir / "objectives.toml").items():
        label = section.get(LABEL) if isinstance(section, dict) else None
        if not isinstance(label, str) or not label.strip():
            raise ConfigError(f"configs/objectives.toml [{name}] has no {LABEL}; add {LABEL} = \"<how tables print "
                              "the method>\" at the top of the section")
        if name == BASE_METHOD:
            raise ConfigError(f"configs/objectives.toml [{name}]: {name!r} names the untrained policy; rename the "
                              "section")
        out[name] = label
    return out


# The method list, once: each objective's name and how tables print it, in the paper's order.
METHOD_LABELS = _method_labels(configs_dir())
METHODS = tuple(METHOD_LABELS)


def toml_value(v) -> str:
    """A setting's value as an override's right-hand side (TOML: strings quoted, inline tables and arrays)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v) if isinstance(v, str) else repr(v)


def parse_override(text: str) -> tuple[str, Any]:
    """`section.key=value` with a TOML value; a bare word is taken as a string."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    key, raw = (part.strip() for part in text.split("=", 1))
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def overlay(name: str, root: str | Path | None = None) -> tuple[str, ...]:
    """configs/overlays/<name>.toml (plain values, as in a scale file) as `section.key=value` overrides, in the
    file's order: a named set of changes, e.g. `quick`, the shortened demo's budgets, shared with every process
    through RCEA_OVERRIDES as if typed. A key that is not a setting names the file and the valid keys."""
    cdir = Path(root) if root else configs_dir()
    path = cdir / "overlays" / f"{name}.toml"
    if not path.exists():
        known = sorted(p.stem for p in (cdir / "overlays").glob("*.toml"))
        raise ConfigError(f"no overlay {name!r}; overlays (configs/overlays/*.toml): {', '.join(known) or 'none'}")
    settings = {**_base_settings(str(cdir)), **_read_settings(cdir / "objectives.toml", prefix="objectives.")}
    values = _settings_from_plain(read_toml(path), settings)
    for key in values:
        if key not in settings:
            raise ConfigError(f"{path.name}: " + _unknown_key_message(key, settings))
    return tuple(f"{key}={toml_value(value)}" for key, value in values.items())


def env_overrides() -> list[str]:
    """Overrides every process of a pipeline shares: `RCEA_OVERRIDES="a.b=1;c.d='x'"` (the demo uses it)."""
    import os

    return [part.strip() for part in os.environ.get("RCEA_OVERRIDES", "").split(";") if part.strip()]


class Config:
    """Resolved settings for one (scale, method). Read with `cfg["section.key"]`."""

    def __init__(self, scale: str, method: str | None, settings: dict[str, Setting], sources: list[Path]):
        self.scale, self.method, self._s, self.sources = scale, method, settings, sources

    def __getitem__(self, key: str) -> Any:
        if key not in self._s:
            raise ConfigError(_unknown_key_message(key, self._s))
        return self._s[key].value

    def __contains__(self, key: str) -> bool:
        return key in self._s

    def get(self, key: str, default: Any = None) -> Any:
        return self._s[key].value if key in self._s else default

    def status(self, key: str) -> str:
        self[key]
        return self._s[key].status

    def keys(self) -> list[str]:
        return sorted(self._s)

    def section(self, name: str) -> dict[str, Any]:
        prefix = name + "."
        found = {k[len(prefix):]: s.value for k, s in self._s.items() if k.startswith(prefix)}
        if not found:
            sections = sorted({k.rsplit(".", 1)[0] for k in self._s})
            raise ConfigError(f"unknown section {name!r}; sections: {', '.join(sections)}")
        return found

    def objective(self) -> dict[str, Any]:
        """The settings of this config's objective (empty when no method or none listed)."""
        if not self.method:
            return {}
        prefix = f"objectives.{self.method}."
        return {k[len(prefix):]: s.value for k, s in self._s.items() if k.startswith(prefix)}

    def in_scope(self, key: str, scope: str | None) -> bool:
        """Whether setting `key` belongs to `scope`: None is every setting; "train" what a training run reads
        (`TRAINING_SECTIONS` and its own objective's settings), so a unit's key holds only what changes it."""
        if scope is None:
            return True
        if scope != "train":
            raise ValueError(f"unknown configuration scope {scope!r}; valid: train")
        return key.split(".", 1)[0] in TRAINING_SECTIONS or (bool(self.method)
                                                             and key.startswith(f"objectives.{self.method}."))

    def to_dict(self, scope: str | None = None) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "method": self.method,
            "settings": {k: {"value": s.value, "status": s.status} for k, s in sorted(self._s.items())
                         if self.in_scope(k, scope)},
        }

    def hash(self, scope: str | None = None) -> str:
        """Identity of the run: every setting (of `scope`, see `in_scope`) except those that only say where
        or how fast a service is reached (`NOT_IN_HASH`), so moving the judge to another port does not
        orphan finished runs. Values only: a status tag (S/E/R/C) says where a value comes from, not what the
        run did, so retagging a setting keeps every finished run."""
        d = self.to_dict(scope)
        d["settings"] = {k: v["value"] for k, v in d["settings"].items() if k not in NOT_IN_HASH}
        blob = json.dumps(d, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def write(self, run_dir: str | Path, scope: str | None = None, replace: bool = False) -> Path:
        """Copy the configuration into `run_dir/config/` (source files verbatim + resolved JSON).

        Refuses a folder that already holds a different configuration (compared on the settings of
        `scope`, hash-excluded ones aside), unless `replace` (nothing was made under the old one).
        """
        from rcea.store import atomic_write_json

        run_dir = Path(run_dir)
        target = run_dir / "config" / "resolved.json"
        if target.exists():
            old = json.loads(target.read_text())
            if old.get("hash") == self.hash(scope):
                return target
            mine = {k: v["value"] for k, v in self.to_dict(scope)["settings"].items() if k not in NOT_IN_HASH}
            theirs = {k: v.get("value") for k, v in old.get("settings", {}).items()
                      if self.in_scope(k, scope) and k not in NOT_IN_HASH}
            # equal settings under another hash: a folder written when the hash covered every setting
            same = json.dumps(mine, sort_keys=True, default=str) == json.dumps(theirs, sort_keys=True, default=str)
            if not same and not replace:
                changed = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
                raise ConfigError(
                    f"{run_dir} holds a run with a different configuration (hash {old.get('hash')} != "
                    f"{self.hash(scope)}; differs in {', '.join(changed[:6]) or 'its layout'}); choose another "
                    "--output folder or remove that one"
                )
        (run_dir / "config").mkdir(parents=True, exist_ok=True)
        for src in self.sources:
            shutil.copyfile(src, run_dir / "config" / src.name)
        atomic_write_json(target, {"hash": self.hash(scope), **self.to_dict(scope)})
        return target


def _unknown_key_message(key: str, settings: dict[str, Setting]) -> str:
    section = key.rsplit(".", 1)[0] if "." in key else ""
    same = sorted(k for k in settings if k.rsplit(".", 1)[0] == section)
    if same:
        return f"unknown setting {key!r}; valid keys in [{section}]: {', '.join(same)}"
    sections = sorted({k.rsplit(".", 1)[0] for k in settings})
    return f"unknown setting {key!r}; valid sections: {', '.join(sections)}"


@lru_cache(maxsize=4)
def _base_settings(cdir: str) -> dict[str, Setting]:
    return _read_settings(Path(cdir) / "base.toml")


def objective_defaults(method: str) -> dict[str, Any]:
    """An objective's settings as configs/objectives.toml gives them (no scale, no override): the values
    `train.objectives.batch_loss` starts from; the same reader `load_config` uses for objectives.*."""
    check_choice("method", method, METHODS)
    prefix = f"{method}."
    table = _objective_settings(str(configs_dir()))
    return {k[len(prefix):]: s.value for k, s in table.items() if k.startswith(prefix)}


@lru_cache(maxsize=4)
def _objective_settings(cdir: str) -> dict[str, Setting]:
    return _read_settings(Path(cdir) / "objectives.toml")


def base_default(key: str):
    """A dataclass `default_factory` giving `key`'s value in configs/base.toml (read when first needed)."""
    return lambda: base_value(key)


def base_value(key: str) -> Any:
    """A setting's value in configs/base.toml alone (no scale file, no override): the default a library
    function falls back to when it is given no Config, so no default is written a second time in code."""
    settings = _base_settings(str(configs_dir()))
    if key not in settings:
        raise ConfigError(_unknown_key_message(key, settings))
    return settings[key].value


def load_config(scale: str, method: str | None = None, overrides: Iterable[str] = (),
                root: str | Path | None = None) -> Config:
    """Load and validate the configuration of one scale (and optionally one objective)."""
    check_choice("scale", scale, SCALES)
    if method is not None:
        check_choice("method", method, METHODS)
    cdir = Path(root) if root else configs_dir()
    base, objectives, scale_file = cdir / "base.toml", cdir / "objectives.toml", cdir / "scales" / f"{scale}.toml"
    settings = _read_settings(base)
    sources = [base]
    if objectives.exists():
        settings.update(_read_settings(objectives, prefix="objectives."))
        sources.append(objectives)
    scale_values = {}
    if scale_file.exists():  # [launch] says where units run (rcea.launch), [targets] the cards it must fit
        scale_values = {k: v for k, v in read_toml(scale_file).items() if k not in SCALE_TABLES}  # (train.plan_data)
        sources.append(scale_file)

    def apply(key: str, value: Any, origin: str) -> None:
        if key not in settings:
            raise ConfigError(f"{origin}: " + _unknown_key_message(key, settings))
        old = settings[key]
        if isinstance(value, dict) and set(value) == {"value", "status"}:
            value, status = value["value"], value["status"]
        else:
            status = old.status
        if not _type_ok(old.value, value):
            raise ConfigError(f"{origin}: {key} must be {type(old.value).__name__}, got {value!r}")
        if isinstance(old.value, float):
            value = float(value)
        problem = out_of_range(key, value) or choice_problem(key, value)
        if problem:
            raise ConfigError(f"{origin}: {problem}")
        settings[key] = Setting(value, status, old.doc)

    for key, value in _settings_from_plain(scale_values, settings).items():
        apply(key, value, scale_file.name)
    for text in [*env_overrides(), *overrides]:
        key, value = parse_override(text)
        apply(key, value, f"override {text!r}")
    _check_ranges(settings)
    return Config(scale, method, settings, sources)


def _check_ranges(settings: dict[str, Setting]) -> None:
    """Ranges that depend on more than one value (after every override is applied)."""
    rank = settings.get("train.lora_rank")
    if rank is not None:
        from rcea.lora_ranks import max_lora_rank

        try:
            max_lora_rank(rank.value)   # the inference workers serve every adapter through vLLM
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def _settings_from_plain(table: dict, settings: dict[str, Setting], where: str = "") -> dict[str, Any]:
    """Flatten a plain-valued scale file, keeping dict-valued settings (like probe.composition) whole."""
    out: dict[str, Any] = {}
    for key, item in table.items():
        name = f"{where}.{key}" if where else key
        if isinstance(item, dict) and name not in settings:
            out.update(_settings_from_plain(item, settings, name))
        else:
            out[name] = item
    return out
