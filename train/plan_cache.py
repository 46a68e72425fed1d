"""The plan's measurement, kept: `python -m train.plan` measures its passes with fake tensors (about 20 s at 3b on
two cores); the same measurement is reused when nothing that decides it changed.

What decides it: the model's shape, the code that measures (`CODE`'s files), the libraries whose ops are
traced (`LIBS`' versions), and the settings the measurement read. The settings are not listed by hand: the
measurement runs on a `Recorder` around the config, which notes every setting (and config attribute) it reads,
and the entry stores them with their values. An entry is reused only where every recorded setting has the same
value now, so a changed train.per_device_batch or train.logprob_chunk_tokens measures again and a changed
judge.model (never read) does not.

The measurement comes in parts (train.plan.measure_scale: the resident weights, the training passes, the
workers' scoring pass), each kept apart, so a changed micro-batch measures the passes again but not the scorer.
Entries: `<cache>/<part>-<code digest>-<reads digest>.json`, written atomically (a temporary file, then a rename);
the folder is $RCEA_PLAN_CACHE, else `.cache/plan` in the project (git-ignored). A folder that cannot be written
only costs the reuse. `python -m train.plan --fresh` measures again and replaces the entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = ("train/plan.py", "train/plan_cache.py", "train/fake_pass.py", "train/envelope.py", "train/logprobs.py",
        "train/run.py", "train/plan_data.py", "infer/entropy.py", "infer/kinds/registry.py")
CODE_DIRS = ("train/objectives",)
LIBS = ("torch", "transformers", "peft", "accelerate", "trl")


def folder() -> Path:
    return Path(os.environ.get("RCEA_PLAN_CACHE") or ROOT / ".cache" / "plan")


def _plain(value):
    """A value as JSON holds it (tuples as lists, paths as strings), so stored and current values compare."""
    return json.loads(json.dumps(value, default=str))


class _Section(dict):
    """A config section (`cfg.section(name)`) noting each key read from it into `reads` as "name.key"."""

    def __init__(self, name, values, reads):
        super().__init__(values)
        self._name, self._reads = name, reads

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self._reads[f"{self._name}.{key}"] = _plain(value)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def _all(self):
        self._reads.update({f"{self._name}.{k}": _plain(v) for k, v in dict.items(self)})

    def items(self):
        self._all()
        return super().items()

    def values(self):
        self._all()
        return super().values()

    def __iter__(self):
        self._all()
        return super().__iter__()


class Recorder:
    """The config as the measurement sees it, noting each setting read: `reads` {key: value}; config attributes
    (`cfg.method`) as ":name"."""

    def __init__(self, cfg):
        self._cfg, self.reads = cfg, {}

    def __getitem__(self, key):
        value = self._cfg[key]
        self.reads[key] = _plain(value)
        return value

    def __contains__(self, key):
        self.reads[key] = _plain(self._cfg[key]) if key in self._cfg else None
        return key in self._cfg

    def get(self, key, default=None):
        return self[key] if key in self._cfg else default

    def section(self, name):
        return _Section(name, self._cfg.section(name), self.reads)

    def objective(self):
        found = self._cfg.objective()
        self.reads[":method"] = self._cfg.method
        self.reads.update({f"objectives.{self._cfg.method}.{k}": _plain(v) for k, v in found.items()})
        return found

    def __getattr__(self, name):
        value = getattr(self._cfg, name)
        if not callable(value):
            self.reads[":" + name] = _plain(value)
        return value


def _current(cfg, key):
    if key.startswith(":"):
        return _plain(getattr(cfg, key[1:], None))
    return _plain(cfg[key]) if key in cfg else None


def code_digest(shape) -> str:
    """The shape, the measuring code's bytes and the traced libraries' versions."""
    h = hashlib.sha256(json.dumps(asdict(shape), sort_keys=True).encode())
    files = [ROOT / f for f in CODE] + sorted(p for d in CODE_DIRS for p in (ROOT / d).glob("*.py"))
    for path in files:
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    for lib in LIBS:
        try:
            h.update(f"{lib}={metadata.version(lib)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=none".encode())
    return h.hexdigest()[:16]


def _dump(value):
    """A part's value as JSON: numbers, tuples (as lists) and Measured (as {"measured": [bytes, flops]})."""
    from train.fake_pass import Measured

    if isinstance(value, Measured):
        return {"measured": [value.peak_bytes, value.flops]}
    if isinstance(value, (tuple, list)):
        return [_dump(v) for v in value]
    return value


def _load(value):
    from train.fake_pass import Measured

    if isinstance(value, dict):
        return Measured(*value["measured"])
    if isinstance(value, list):
        return tuple(_load(v) for v in value)
    return value


def lookup(part: str, cfg, shape) -> tuple[object, Path] | None:
    """The stored `part` whose recorded settings all equal `cfg`'s, and its file; None where none does."""
    for path in sorted(folder().glob(f"{part}-{code_digest(shape)}-*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if all(_current(cfg, k) == v for k, v in entry["reads"].items()):
            return _load(entry["value"]), path
    return None


def store(part: str, shape, reads: dict, value) -> Path | None:
    """Write one entry atomically; None where the folder cannot be written."""
    blob = json.dumps(reads, sort_keys=True).encode()
    path = folder() / f"{part}-{code_digest(shape)}-{hashlib.sha256(blob).hexdigest()[:16]}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"part": part, "reads": reads, "value": _dump(value)}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def measured(part: str, cfg, shape, measure, log, fresh: bool = False):
    """`measure(cfg)`'s value for `part` (a name), reused from the cache where it holds one for these inputs."""
    if not fresh:
        hit = lookup(part, cfg, shape)
        if hit:
            log(f"[plan] reused the measurement of the {part} in {hit[1]} (same shape, code, libraries and the "
                "settings it read)")
            return hit[0]
    rec = Recorder(cfg)
    value = measure(rec)
    path = store(part, shape, rec.reads, value)
    log(f"[plan] stored the measurement of the {part} in {path}" if path else
        f"[plan] could not store the measurement of the {part} in {folder()} (not writable); it is measured "
        "again next time")
    return value
