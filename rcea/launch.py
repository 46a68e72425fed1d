"""Where and how a scale's study runs: the `[launch]` table of configs/scales/<scale>.toml, as one record.

What differs between the scales besides their settings (model, dtype, batch sizes: `rcea.config`) is a value
here, read once per scale, never a comparison with a scale's name:

    launcher      "local": each unit is a process in its role's environment (.envs/<role>) on this machine;
                  "compose": each unit is a `docker compose run` container of compose.yaml (one GPU host)
    device        "cpu" or "gpu": what a unit of each role occupies (a Ray task asks for a GPU on "gpu")
    slots         units of each role side by side on one host ({train = N, infer = M})
    workers       measurement workers started when --num-workers is not given (and $NUM_WORKERS is unset)
    train_gpus    the host GPUs training containers are pinned to, one run per GPU side by side ([] on CPU)
    infer_gpus    the host GPUs of a study's measurement workers, one worker each, which run while training does
                  ([] on a GPU device: every GPU of the host's MAX_WORKERS not in train_gpus; none may train)
    judge_server  whether the study starts the judge / codebook model server itself (compose's `judge`)
    data          the data folder as the role processes see it ($RCEA_DATA first under the local launcher)
    results       the host folder the results are copied to ($RCEA_RESULTS first under the local launcher)

Not settings: nothing here changes what a unit computes, so none of it enters a configuration hash.
Standard library only (the tools environment reads it).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rcea.config import SCALES, ConfigError, check_choice, read_toml, value_fits
from rcea.paths import configs_dir

LAUNCHERS = ("local", "compose")
DEVICES = ("cpu", "gpu")
ROLES = ("train", "infer", "aggregate")   # one image, one environment and one Compose service family each
SLOT_ROLES = ("train", "infer")   # the roles whose units hold a device slot (training runs, measurement batches)
MAX_WORKERS = 8   # compose.yaml's infer-worker-0..7; the same cap for local worker processes
TINY_MODEL = "tiny"   # model.name of the locally built tiny Qwen2 (rcea.tiny), which runs on CPU at any scale


@dataclass(frozen=True)
class Launch:
    scale: str
    launcher: str
    device: str
    slots: dict
    workers: int
    train_gpus: tuple[int, ...]
    infer_gpus: tuple[int, ...]
    judge_server: bool
    data: str
    results: str

    @property
    def local(self) -> bool:
        return self.launcher == "local"

    @property
    def gpus(self) -> bool:
        return self.device == "gpu"

    def data_root(self) -> str:
        """The data folder as the role processes see it: a container's is its volume, whatever this host sets."""
        return os.environ.get("RCEA_DATA", self.data) if self.local else self.data

    def host_data(self) -> str:
        """The study driver's folder on this host (data lock, unit logs, state/: the state store, shared with the
        containers through a bind mount): $RCEA_DATA, else the scale's data folder (under Compose the rest of the
        containers' data stays in the volume)."""
        return os.environ.get("RCEA_DATA", self.data)

    def results_root(self) -> str:
        return os.environ.get("RCEA_RESULTS", self.results) if self.local else self.results

    def train_slots(self) -> int:
        """Training runs side by side: one per training GPU, else the scale's slots."""
        return len(self.train_gpus) if self.gpus and self.train_gpus else self.slots["train"]

    def worker_gpus(self, n: int) -> tuple[int, ...]:
        """The GPUs of a study's `n` measurement workers: the first `n` of infer_gpus (--num-workers caps them,
        and there are never more workers than GPUs that do not train); () on CPU."""
        return self.infer_gpus[:n] if self.gpus else ()

    def study_workers(self, n: int) -> int:
        """How many measurement workers a study runs for --num-workers `n`: `n` processes on CPU, else one per
        GPU of worker_gpus(n)."""
        return len(self.worker_gpus(n)) if self.gpus else n


def launch(scale: str, root: str | Path | None = None) -> Launch:
    """The `[launch]` record of `scale` (read once per configuration folder)."""
    check_choice("scale", scale, SCALES)
    return _read(scale, str(Path(root) if root else configs_dir()))


@lru_cache(maxsize=16)
def _read(scale: str, cdir: str) -> Launch:
    path = Path(cdir) / "scales" / f"{scale}.toml"
    table = read_toml(path).get("launch") if path.exists() else None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: no [launch] table; every scale file says where its units run (rcea/launch.py)")
    fields = set(Launch.__dataclass_fields__) - {"scale"}
    missing, unknown = sorted(fields - set(table)), sorted(set(table) - fields)
    if missing or unknown:
        raise ConfigError(f"{path.name} [launch]: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else [])
        ) + f"; its keys are {', '.join(sorted(fields))}")
    where = f"{path.name} [launch]"
    for key, valid in (("launcher", LAUNCHERS), ("device", DEVICES)):
        if table[key] not in valid:
            raise ConfigError(f"{where}: unknown {key} {table[key]!r}; valid: {', '.join(valid)}")
    slots = table["slots"]
    if not isinstance(slots, dict) or set(slots) != set(SLOT_ROLES) or not all(
            value_fits(int, v) and v >= 1 for v in slots.values()):
        raise ConfigError(f"{where}: slots must be {{ train = N, infer = M }} with N, M >= 1, got {slots!r}")
    workers, gpus = table["workers"], table["train_gpus"]
    if not value_fits(int, workers) or not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"{where}: workers must be 1..{MAX_WORKERS}, got {workers!r}")
    if not isinstance(gpus, list) or not all(value_fits(int, g) and g >= 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise ConfigError(f"{where}: train_gpus must be a list of distinct host GPU indices, got {gpus!r}")
    if table["device"] == "gpu" and not gpus:
        raise ConfigError(f"{where}: device = \"gpu\" needs at least one training GPU in train_gpus (e.g. [0])")
    infer = table["infer_gpus"]
    if not isinstance(infer, list) or not all(value_fits(int, g) and g >= 0 for g in infer) or len(set(infer)) != len(infer):
        raise ConfigError(f"{where}: infer_gpus must be a list of distinct host GPU indices, got {infer!r}")
    if set(infer) & set(gpus):
        raise ConfigError(f"{where}: infer_gpus and train_gpus share GPU(s) {sorted(set(infer) & set(gpus))}: a "
                          "measurement worker runs while training does, so it never shares a training GPU")
    if table["device"] == "gpu" and not infer:   # every GPU of the host (compose.yaml's 8 workers) that does not train
        infer = [g for g in range(MAX_WORKERS) if g not in gpus]
    if table["device"] == "gpu" and not infer:
        raise ConfigError(f"{where}: every GPU trains (train_gpus {gpus}): name a GPU for the measurement workers "
                          "in infer_gpus")
    if not isinstance(table["judge_server"], bool):
        raise ConfigError(f"{where}: judge_server must be true or false")
    for key in ("data", "results"):
        if not isinstance(table[key], str) or not table[key]:
            raise ConfigError(f"{where}: {key} must be a folder name")
    return Launch(scale, table["launcher"], table["device"], dict(slots), workers, tuple(gpus),
                  tuple(infer) if table["device"] == "gpu" else (), table["judge_server"], table["data"],
                  table["results"])


def tiny_model(cfg) -> bool:
    """Whether `cfg` names the locally built tiny model (trained and served on CPU, whatever the scale)."""
    return cfg["model.name"] == TINY_MODEL
