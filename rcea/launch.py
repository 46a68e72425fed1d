"""Where and how a scale's study runs: the `[launch]` table of configs/scales/<scale>.toml, as one record, and
the one seam where the launchers differ.

What differs between the scales besides their settings (model, dtype, batch sizes: `rcea.config`) is a value
here, read once per scale, never a comparison with a scale's name:

    launcher      "local": each unit is a process in its role's environment (.envs/<role>) on this machine;
                  "compose": each unit is a `docker compose run` container of compose.yaml (one GPU host)
    device        "cpu" or "gpu": what a unit of each role occupies (a Ray task asks for a GPU on "gpu")
    slots         units of each role side by side on one host ({train = N, infer = M})
    workers       measurement workers started when --num-workers is not given (and $NUM_WORKERS is unset)
    train_gpus    the host GPUs training containers are pinned to, one run per GPU side by side (none on CPU)
    infer_gpus    the host GPUs of a study's measurement workers, one worker each, which run while training does
                  ([] on a GPU device: every GPU of the host's MAX_WORKERS not in train_gpus; none may train)
    judge_server  whether the study starts the judge / codebook model server itself (compose's `judge`)
    data          the host's data folder when $RCEA_DATA is unset (./data)
    results       the host's results folder when $RCEA_RESULTS is unset (./results)

One view of the data: at every launcher the data folder is the host's $RCEA_DATA (else `data`); compose.yaml
bind-mounts it into every container at /workspace/data (the containers' working folder's `data/`), and the
results folder ($RCEA_RESULTS, else `results`) at /workspace/results. So the driver sees every output a
container writes, and checks it as it checks a local process's.

The launcher seam (below the record): everything that differs by launcher is decided here and nowhere else in
the study's code: the argv of a role's command (`role_argv`: a local python, or `docker compose run --rm ...`
in the role's service), a host file handed to one (`host_file`), the measurement workers' command
(`Launch.workers_argv`), the variable that pins a unit to its GPU (`gpu_variable`), the exit statuses of a
killed unit (`killed`), and a host folder as the role's processes see it (`Launch.data_root`,
`results_root`). docs/architecture.md lists the branches on launcher or device values left outside it.

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

    def host_data(self) -> str:
        """The data folder on this host, at every launcher: $RCEA_DATA, else the scale's `data` (./data)."""
        return os.environ.get("RCEA_DATA", self.data)

    def host_results(self) -> str:
        """The results folder on this host, at every launcher: $RCEA_RESULTS, else the scale's `results`."""
        return os.environ.get("RCEA_RESULTS", self.results)

    def data_root(self) -> str:
        """The data folder as the role processes see it: the host's (a local process), or its mount point in
        a container (compose.yaml: /workspace/data, `data` in the containers' working folder)."""
        return view(self.launcher, self.host_data(), CONTAINER_DATA)

    def results_root(self) -> str:
        return view(self.launcher, self.host_results(), CONTAINER_RESULTS)

    def argv(self, role: str, module: str, args, run_opts=()) -> list[str]:
        return role_argv(self.launcher, role, module, args, run_opts=run_opts)

    def default_workers(self, env_value: str = "") -> int | str:
        """Workers without --num-workers: Compose's NUM_WORKERS (`env_value`: the shell's, else .env's, as a bare
        `docker compose up infer-workers` reads it) under Compose, else the scale's `workers`."""
        return (env_value if self.launcher == "compose" else "") or self.workers

    @property
    def each_worker(self) -> str:
        return "one GPU each" if self.gpus else "one CPU process each"

    def workers_phrase(self, n: int, gpus) -> str:
        """`n` measurement workers in words, on `gpus` (worker_gpus) or as local processes."""
        if self.gpus:
            return f"{n} GPU worker{'s' * (n > 1)} on GPU{'s' * (n > 1)} {','.join(map(str, gpus))}"
        return f"{n} local worker process{'es' * (n > 1)}"

    def workers_argv(self, num_workers: int, detach: bool = True, lease: float = 0, gpus=None) -> list[str]:
        """The measurement workers. Local: `num_workers` worker processes of the infer environment until the
        queue is empty and not held open. Compose: `docker compose up` of compose.yaml's `infer-workers` group
        (workers 0..NUM_WORKERS-1 and a follower of the queue; the same as a bare `docker compose up
        infer-workers` with that NUM_WORKERS), worker i on host GPU gpus[i] (INFER_GPU_<i>) when `gpus` is
        given; detached, or attached to every container and stopping them all if one fails."""
        lease_opt = f"{lease:g}" if lease else ""
        if self.launcher == "local":
            return role_argv("local", "infer", "infer", [
                "worker", "--scale", self.scale, "--until-empty", "--processes", str(num_workers),
                *(["--lease", lease_opt] if lease else []), "--progress"])
        pinned = {f"INFER_GPU_{i}": g for i, g in enumerate(gpus or ())}
        env = {"NUM_WORKERS": len(pinned) or num_workers, **pinned, **({"RCEA_LEASE_S": lease_opt} if lease else {})}
        how = ["-d"] if detach else ["--attach-dependencies", "--abort-on-container-failure"]
        return with_scale(self.scale, ["docker", "compose", "up", *how, WORKERS_GROUP], **env)

    def training_containers(self, probe):
        """The host GPUs that running training containers hold (`probe()`: orchestrate/ops/shell.py
        training_gpus; None when none runs), for workers started by hand; None for a local launcher, whose
        workers are processes with no GPU to place."""
        return probe() if self.launcher == "compose" else None

    def serve_opts(self, port: int) -> tuple[list[str], list[str]]:
        """(arguments, run options) of a role's web server on `port`: on the host's loopback, or in a container
        on all its interfaces with the port published on the host's loopback only."""
        if self.launcher == "local":
            return ["--port", str(port)], []
        return ["--host", "0.0.0.0", "--port", str(port)], ["-p", f"127.0.0.1:{port}:{port}"]

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


# ---------------------------------------------------------------- the launcher seam

CONTAINER_DATA = "data"          # compose.yaml: the host's $RCEA_DATA at /workspace/data, under its working folder
CONTAINER_RESULTS = "results"    # and the host's $RCEA_RESULTS at /workspace/results
SERVICE_OF = {"train": "train", "infer": "infer-cli", "aggregate": "aggregate"}   # one-off commands per role
WORKERS_GROUP = "infer-workers"  # compose.yaml: brings infer-worker-0..NUM_WORKERS-1, follows the queue
# The variable pinning a unit to the host GPU an engine hands it: CUDA's own for a local process, compose.yaml's
# TRAIN_GPU (the train service's device reservation) for a container.
GPU_VARIABLE = {"local": "CUDA_VISIBLE_DEVICES", "compose": "TRAIN_GPU"}
# Exit statuses of a unit killed from outside that a retry may cure. A local process killed by a signal has a
# negative status already; `docker compose run` reports its killed container as 128 + the signal (137: SIGKILL,
# `docker kill` or the OOM killer; 143: SIGTERM).
KILLED = {"local": (), "compose": (137, 143)}


def role_argv(launcher: str, role: str, module: str, args, python: str | None = None, run_opts=()) -> list[str]:
    """`python -m <module> <args>` in `role`'s environment: the local launcher's python (`python`, else the
    project's .envs/<role>/bin/python, relative to the project folder every command runs from), or the role's
    service of compose.yaml (`run_opts`: options of `docker compose run`, e.g. -T, -v, -p)."""
    check_choice("launcher", launcher, LAUNCHERS)
    if launcher == "local":
        return [python or f".envs/{role}/bin/python", "-m", module, *map(str, args)]
    return ["docker", "compose", "run", "--rm", *run_opts, SERVICE_OF[role], "python", "-m", module, *map(str, args)]


def with_scale(scale: str, argv: list[str], **env) -> list[str]:
    """`env RCEA_SCALE=S [K=V ...] docker compose up ...`: the scale of services started by `up`."""
    return ["env", f"RCEA_SCALE={scale}", *(f"{k}={v}" for k, v in env.items()), *argv]


def host_file(launcher: str, path: str, inside: str) -> tuple[str, list[str]]:
    """A host file or folder outside the data folder handed to a role command: (its name in the command, the
    run options that make it visible): the path itself locally; in a container, `inside`, mounted read-only."""
    if launcher == "local":
        return path, []
    return inside, ["-v", f"{os.path.abspath(path)}:{inside}:ro"]


def view(launcher: str, host: str, inside: str) -> str:
    """A host folder (the data or results folder) as the role's processes see it: itself, or its mount point."""
    return host if launcher == "local" else inside


def gpu_variable(launcher: str) -> str:
    return GPU_VARIABLE[launcher]


def killed(launcher: str, rc: int) -> bool:
    """Whether exit status `rc` of a unit's command means the launcher's container was killed from outside."""
    return rc in KILLED[launcher]


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
    return Launch(scale, table["launcher"], table["device"], dict(slots), workers,
                  tuple(gpus) if table["device"] == "gpu" else (),
                  tuple(infer) if table["device"] == "gpu" else (), table["judge_server"], table["data"],
                  table["results"])


def tiny_model(cfg) -> bool:
    """Whether `cfg` names the locally built tiny model (trained and served on CPU, whatever the scale)."""
    return cfg["model.name"] == TINY_MODEL
