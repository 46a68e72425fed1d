"""Work units: the pure, idempotent pieces of a study that an engine (local or Ray) runs.

A unit is a function of its spec. It writes its outputs under names derived from that spec, atomically
(temp file + rename) with a manifest last, so `done(data_root)` is "every output's manifest exists" and
running a unit twice is harmless (the role's own code skips complete outputs).

    TrainUnit(method, scale, seed, overrides, launcher)   one training run  -> train/<scale>/<method>[-seed<N>]/
    MeasureUnit(key, kind, payload)             one measurement job (what the SQLite queue holds, as
                                                `python -m infer plan` prints it) -> its table parts

Each unit has a deterministic `key` (readable prefix + a digest of its spec: for a training run, the hash of its
training settings after the scale file, $RCEA_OVERRIDES and its own overrides, so a run with other settings is
another unit, never "already complete"), a `role` (the environment
or image that runs it: "train" or "infer"), a `group` (units of one group read the same checkpoint and
run in one process, so the model is loaded once), `done(data_root)`, and a static
`command(batch, python, data_root, spec_dir)`: the argv running a batch of its kind in the role's
interpreter (`role_python`). Anything with these attributes is a unit to the engines (orchestrate/engines).
Standard library only: the tools environment (the Ray driver) imports it without torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from rcea import launch as seam   # the one place the launchers differ (argv, GPU variable, kill statuses, paths)
from rcea import layout
from rcea.launch import SLOT_ROLES as ROLES  # the roles whose units hold a slot
from rcea.store import is_complete, job_complete

# The engines' defaults when a caller names no slots: units of each role side by side on one machine, on CPU
# (each uses one CPU thread) or on GPUs (one per unit). A study passes its scale's own (rcea.launch `slots`).
SLOTS = {"cpu": {"train": 2, "infer": 1}, "gpu": {"train": 1, "infer": 8}}
PARTS_KEPT = "measurements"   # in a set-aside run folder: the table parts of its checkpoints (TrainUnit.set_aside)


def digest(spec) -> str:
    """A short stable hash of a JSON-able spec (key order does not matter)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class TrainUnit:
    """One training run. `seed` None keeps the configuration's `train.seed` and the default run folder.
    `launcher` (rcea.launch): "local", a process in the train environment; "compose", the train container of
    compose.yaml, pinned to the GPU the engine hands it (`gpu_env`: compose.yaml's TRAIN_GPU). Either way
    the run folder is in the host's data folder (compose.yaml bind-mounts it), so `done`, `damage` and
    `set_aside` read and move it here at every launcher."""

    method: str
    scale: str
    seed: int | None = None
    overrides: tuple[str, ...] = ()
    launcher: str = "local"
    role = "train"

    @property
    def spec(self) -> dict:
        return {"unit": "train", "method": self.method, "scale": self.scale, "seed": self.seed,
                "overrides": list(self.overrides), "config": self.config_hash}

    def all_overrides(self) -> list[str]:
        return [*self.overrides, *([f"train.seed={self.seed}"] if self.seed is not None else [])]

    @cached_property
    def config_hash(self) -> str:
        """The hash `python -m train` gives this run's settings (rcea.config, scope train; $RCEA_OVERRIDES read
        now), which it stores in the run folder's config/resolved.json and summary.json."""
        from rcea.config import load_config

        return load_config(self.scale, self.method, self.all_overrides()).hash("train")

    @property
    def gpu_env(self) -> str:
        """The variable that pins the unit to the GPU an engine hands it."""
        return seam.gpu_variable(self.launcher)

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
        """summary.json is written (then its manifest) only after the last checkpoint, with the hash of the
        settings it was trained with: a run of other settings (the quick demo's, another override) is not this
        unit's."""
        summary = layout.RunFolder(self.output(data_root)).summary
        if not is_complete(summary) or self.damage(data_root):
            return False
        try:
            return json.loads(summary.read_text()).get("config_hash") == self.config_hash
        except (OSError, ValueError):
            return False

    def damage(self, data_root) -> str:
        """'' unless the run folder holds a finished run whose checkpoint is damaged or lost (a file's size differs
        from the checkpoint's manifest, a file or folder is missing): then one line naming it and the fix."""
        from rcea.store import DamagedRun, complete_checkpoints

        try:
            complete_checkpoints(layout.RunFolder(self.output(data_root)).checkpoints)
        except DamagedRun as exc:
            return str(exc)
        return ""

    def set_aside(self, data_root) -> Path | None:
        """Before the run: a run folder holding a run of other settings is moved out of the way (kept under
        `layout.superseded_run_dir` by its hash, never deleted), with the measurement parts of its checkpoints,
        and one kept earlier under this unit's hash is moved back with its parts (then it resumes or is reused),
        so the unit trains its own settings, never another's, and no other run's parts stay among the tables.
        Returns where the other run went (None: nothing moved)."""
        out = self.output(data_root)
        resolved = layout.RunFolder(out).config / "resolved.json"
        try:
            theirs = json.loads(resolved.read_text()).get("hash") if resolved.exists() else None
        except (OSError, ValueError):
            theirs = None
        if not theirs or theirs == self.config_hash:
            return None
        name = out.name
        kept = layout.superseded_run_dir(self.scale, name, theirs, data_root)
        mine = layout.superseded_run_dir(self.scale, name, self.config_hash, data_root)
        import shutil

        from rcea.store import FolderBusy, folder_lock

        kept.parent.mkdir(parents=True, exist_ok=True)
        try:
            with folder_lock(layout.RunFolder(out).lock):   # not while a study trains in it
                if kept.exists():   # an older copy of the same settings: the newer one in the run folder wins
                    shutil.rmtree(kept)
                out.rename(kept)
        except FolderBusy as exc:
            raise OSError(f"{exc}; wait until it has finished (or stop it), then rerun") from None
        tables, parts = layout.tables_dir(self.scale, data_root), kept / PARTS_KEPT
        if self.seed is None:   # the study measures the default run folders only
            for part in layout.run_parts(self.scale, name, data_root):   # by each part's manifest: this run's only
                (parts / part.parent.name).mkdir(parents=True, exist_ok=True)
                part.rename(parts / part.parent.name / part.name)
        if mine.exists():
            mine.rename(out)
            for part in sorted((out / PARTS_KEPT).glob("*/*")):
                (tables / part.parent.name).mkdir(parents=True, exist_ok=True)
                part.rename(tables / part.parent.name / part.name)
            shutil.rmtree(out / PARTS_KEPT, ignore_errors=True)
        return kept

    def args(self, data_root) -> list[str]:
        """`python -m train` arguments, `data_root` the data folder as the run's process sees it; `--resume`
        makes a retry continue from its newest checkpoint (and a complete run is reused), so a second run of the
        unit is harmless."""
        args = ["-m", "train", "--method", self.method, "--scale", self.scale, "--resume"]
        if self.seed is not None:
            args += ["--output", str(self.output(data_root))]
        for o in self.all_overrides():
            args += ["--override", o]
        return args

    def argv(self, data_root, python: str | None = None) -> list[str]:
        """The run's argv from its launcher (rcea.launch, the seam): a python of the train environment, or the
        train container (-T: no TTY, its output goes to the unit's log). `data_root`: the host's data folder;
        `python`: the local interpreter (None: `role_python`). The study's `--dry` prints it."""
        inside = seam.view(self.launcher, str(data_root), seam.CONTAINER_DATA)
        return seam.role_argv(self.launcher, "train", "train", self.args(inside)[2:],
                              python=python or role_python(self.role), run_opts=("-T",))

    @staticmethod
    def command(batch, python: str, data_root, spec_dir) -> list[str]:
        """The argv of a batch: a training unit runs alone, after `set_aside` made room for its settings."""
        if len(batch) != 1:
            raise ValueError("a training batch holds exactly one unit")
        unit = batch[0]
        moved = unit.set_aside(data_root)
        if moved is not None:
            print(f"[train] {unit.output(data_root)} held a run of other settings: kept as {moved}", flush=True)
        return unit.argv(data_root, python)


@dataclass(frozen=True)
class MeasureUnit:
    """One measurement job: `job_key` and `kind` as the queue names them, `payload` as plan_jobs builds it."""

    job_key: str
    kind: str
    payload: dict = field(hash=False)
    cost: float = 1.0
    role = "infer"
    launcher = "local"   # a process of the infer environment wherever an engine runs it (a Ray node's own)

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
        """Jobs reading the same checkpoint (and configuration) share one process and one model load: its adapter,
        or its full model folder (`model`, an outside run's merged checkpoint), else the base policy."""
        ck = self.payload.get("model") or self.payload.get("adapter") or "base"
        return f"infer:{self.scale}:{ck}:{digest(self.payload.get('overrides', []))}"

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
    """The interpreter of a role: $RCEA_PYTHON_<ROLE>, else .envs/<role>/bin/python of the project (`root`;
    None: this project, named relative to it as the dry run prints it: every unit's command runs from there),
    else this interpreter (in a role's container the image's python is the one running this code)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; valid: {', '.join(ROLES)}")
    env = os.environ.get(f"RCEA_PYTHON_{role.upper()}")
    if env:
        return env
    from rcea.paths import project_root

    local = Path(".envs") / role / "bin" / "python"
    if (root or project_root()).joinpath(local).exists():
        return str(root / local) if root else str(local)
    return sys.executable
