"""Work units: the pure, idempotent pieces of a study that an executor (local or Ray) runs.

A unit is a function of its spec. It writes its outputs under names derived from that spec, atomically
(temp file + rename) with a manifest last, so `done(data_root)` is "every output's manifest exists" and
running a unit twice is harmless (the role's own code skips complete outputs).

    TrainUnit(method, scale, seed, overrides)   one training run  -> train/<scale>/<method>[-seed<N>]/
    MeasureUnit(key, kind, payload)             one measurement job (what the SQLite queue holds, as
                                                `python -m infer plan` prints it) -> its table parts

Each unit has a deterministic `key` (readable prefix + a digest of its spec), a `role` (the environment
or image that runs it: "train" or "infer"), a `group` (units of one group read the same checkpoint and
run in one process, so the model is loaded once), `done(data_root)`, and a static
`command(batch, python, data_root, spec_dir)`: the argv running a batch of its kind in the role's
interpreter (`role_python`). Anything with these attributes is a unit to the executors (orchestrate/executors).
Standard library only: the tools environment (the Ray driver) imports it without torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rcea import layout
from rcea.store import is_complete, job_complete

ROLES = ("train", "infer")
# Units of each role running side by side on one machine: the tiny scale on CPU (two tiny training runs, one
# measurement process; each uses one CPU thread), real scales on GPUs (one training GPU, eight workers).
SLOTS = {"cpu": {"train": 2, "infer": 1}, "gpu": {"train": 1, "infer": 8}}


def digest(spec) -> str:
    """A short stable hash of a JSON-able spec (key order does not matter)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class TrainUnit:
    """One training run. `seed` None keeps the configuration's `train.seed` and the default run folder."""

    method: str
    scale: str
    seed: int | None = None
    overrides: tuple[str, ...] = ()
    role = "train"

    @property
    def spec(self) -> dict:
        return {"unit": "train", "method": self.method, "scale": self.scale, "seed": self.seed,
                "overrides": list(self.overrides)}

    @property
    def key(self) -> str:
        seed = "" if self.seed is None else f"-seed{self.seed}"
        return f"train:{self.scale}:{self.method}{seed}:{digest(self.spec)}"

    @property
    def group(self) -> str:
        return self.key

    def output(self, data_root) -> Path:
        name = self.method if self.seed is None else f"{self.method}-seed{self.seed}"
        return layout.run_dir(self.scale, name, data_root)

    def done(self, data_root) -> bool:
        """summary.json is written (then its manifest) only after the last checkpoint."""
        return is_complete(self.output(data_root) / "summary.json")

    def args(self, data_root) -> list[str]:
        """`python -m train` arguments; `--resume` makes a retry continue from its newest checkpoint
        (and a complete run is reused), so a second run of the unit is harmless."""
        args = ["-m", "train", "--method", self.method, "--scale", self.scale, "--resume"]
        overrides = list(self.overrides)
        if self.seed is not None:
            overrides.append(f"train.seed={self.seed}")
            args += ["--output", str(self.output(data_root))]
        for o in overrides:
            args += ["--override", o]
        return args

    @staticmethod
    def command(batch, python: str, data_root, spec_dir) -> list[str]:
        """The argv of a batch: a training unit runs alone."""
        if len(batch) != 1:
            raise ValueError("a training batch holds exactly one unit")
        return [python, *batch[0].args(data_root)]


@dataclass(frozen=True)
class MeasureUnit:
    """One measurement job: `job_key` and `kind` as the queue names them, `payload` as plan_jobs builds it."""

    job_key: str
    kind: str
    payload: dict = field(hash=False)
    cost: float = 1.0
    role = "infer"

    @classmethod
    def from_job(cls, job: dict) -> "MeasureUnit":
        """From a line of `python -m infer plan` ({key, kind, payload, cost})."""
        payload = job.get("payload")
        if not isinstance(job.get("kind"), str) or not isinstance(payload, dict) or not payload.get("tables"):
            raise ValueError(f"not a measurement job spec: {json.dumps(job)[:200]} (expected the JSON lines "
                             "`python -m infer plan` prints: key, kind, cost and a payload naming the tables it writes)")
        return cls(job["key"], job["kind"], job["payload"], float(job.get("cost", 1.0)))

    @property
    def spec(self) -> dict:
        return {"key": self.job_key, "kind": self.kind, "payload": self.payload, "cost": self.cost}

    @property
    def scale(self) -> str:
        return self.payload["scale"]

    @property
    def key(self) -> str:
        return f"infer:{self.scale}:{self.job_key}:{digest(self.payload)}"

    @property
    def group(self) -> str:
        """Jobs reading the same checkpoint (and configuration) share one process and one model load."""
        return f"infer:{self.scale}:{self.payload.get('adapter') or 'base'}:{digest(self.payload.get('overrides', []))}"

    def outputs(self, data_root) -> list[Path]:
        return layout.job_parts(self.kind, self.payload, data_root)

    def done(self, data_root) -> bool:
        return job_complete(self.kind, self.payload, data_root)

    @staticmethod
    def command(batch, python: str, data_root, spec_dir) -> list[str]:
        """The argv of a batch: its jobs in one `python -m infer run-job` (one model load), one spec file each
        written into `spec_dir` (local to the node that runs it)."""
        argv = [python, "-m", "infer", "run-job"]
        for i, unit in enumerate(batch):
            path = Path(spec_dir) / f"job-{i}.json"
            path.write_text(json.dumps(unit.spec, sort_keys=True))
            argv += ["--spec-file", str(path)]
        return argv


def batches(units) -> list[list]:
    """Units grouped by `group` (first-seen order); duplicate keys are dropped (shared base jobs)."""
    seen, groups = set(), {}
    for u in units:
        if u.key not in seen:
            seen.add(u.key)
            groups.setdefault(u.group, []).append(u)
    return list(groups.values())


def role_python(role: str, root: Path | None = None) -> str:
    """The interpreter of a role: $RCEA_PYTHON_<ROLE>, else .envs/<role>/bin/python of the project, else this
    interpreter (in a role's container the image's python is the one running this code)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; valid: {', '.join(ROLES)}")
    env = os.environ.get(f"RCEA_PYTHON_{role.upper()}")
    if env:
        return env
    from rcea.paths import project_root

    local = (root or project_root()) / ".envs" / role / "bin" / "python"
    return str(local) if local.exists() else sys.executable
