"""Where and how a scale's study runs: the `[launch]` table of configs/scales/<scale>.toml, as one record, and
the one seam where the launchers differ.

What differs between the scales besides their settings (model, dtype, batch sizes: `rcea.config`) is a value
here, read once per scale, never a comparison with a scale's name:

    launcher      "local": each unit is a process in its role's environment (.envs/<role>) on this machine;
                  "compose": each unit is a `docker compose run` container of compose.yaml (one GPU host)
    device        "cpu" or "gpu": what a unit of each role occupies (a Ray task asks for a GPU on "gpu")
    slots         units of each role side by side on one host ({train = N, infer = M})
    workers       measurement workers started when --num-workers is not given (and $NUM_WORKERS is unset)
    train_gpus    overrides the rule below: the host GPUs training containers are pinned to, one run each
                  ([]: by the rule; none on CPU)
    infer_gpus    overrides the rule below: the host GPUs whose measurement workers start with the study, while
                  training runs ([]: by the rule; none may be in train_gpus)

The rule (`split`, `Launch.placement`): a study's work goes on the host's devices (its GPUs, at most MAX_WORKERS,
or on CPU `slots.train` cores, more if --num-workers asks) as the cost model orders it (docs/scheduler.md, order
(d)): training weighs most, so the training runs start first, one per device; the base policy's measurements take
the devices left; once no training run is left to start, every device that training frees takes a measurement
worker too (orchestrate/ops/study.py: the local engine's `on_idle`), so the devices busy at once never exceed the
host's and none idles while work is left.
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


def split(devices, runs: int, most: int | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The rule, on `devices` (GPU indices, or core numbers) for `runs` training runs, at most `most` of them
    side by side: (the devices that train first, the rest, which measure from the start). Training weighs about
    85% of a study's GPU work (docs/scheduler.md), so it goes first, one run per device; each device that
    training frees once no run is left to start then measures (`Launch.placement`'s workers)."""
    devices = tuple(devices)
    k = max(0, min(runs, len(devices), len(devices) if most is None else most))
    return devices[:k], devices[k:]


@dataclass(frozen=True)
class Placement:
    """Where a study starts its work (`Launch.placement`): `train` the devices of the training runs, `measure`
    those whose workers start with the study, `workers` the device of each measurement worker in order (worker i
    on workers[i]): the measuring ones first, then the training ones, which join once training frees them."""
    train: tuple[int, ...]
    measure: tuple[int, ...]
    workers: tuple[int, ...]
    pins: tuple[int, ...] = ()   # the GPUs the training runs are pinned to, one each (none on CPU)
    where: str = "a slot"        # a device in words ("GPU {}": formatted with its index)
    devices: str = "slots"       # the devices in words

    def device(self, d: int) -> str:
        return self.where.format(d)

    @property
    def first(self) -> int:
        """How many workers start with the study (the rest start on devices training frees)."""
        return len([d for d in self.workers if d in self.measure])


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
        """`n` measurement workers in words, on `gpus` (Placement.workers) or as local processes."""
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
        env = self._workers_env(num_workers, gpus, lease)
        how = ["-d"] if detach else ["--attach-dependencies", "--abort-on-container-failure"]
        return with_scale(self.scale, ["docker", "compose", "up", *how, WORKERS_GROUP], **env)

    @staticmethod
    def _workers_env(num_workers: int, gpus, lease: float) -> dict:
        pinned = {f"INFER_GPU_{i}": g for i, g in enumerate(gpus or ())}
        return {"NUM_WORKERS": len(pinned) or num_workers, **pinned, **({"RCEA_LEASE_S": f"{lease:g}"} if lease else {})}

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

    def placement(self, runs: int, num_workers: int, host_gpus=None) -> Placement:
        """Where a study of `runs` training runs and `num_workers` measurement workers (at most) starts its work
        (the rule above): on a GPU device, the host's `host_gpus` GPUs (a count, or a function asked only here,
        e.g. orchestrate/ops/shell.py host_gpu_count; None: MAX_WORKERS, compose.yaml's workers), with
        train_gpus / infer_gpus as overrides; on CPU, max(slots.train, num_workers) cores, of which at most
        slots.train train side by side (unpinned: only how many counts)."""
        if not self.gpus:
            train, measure = split(range(max(self.slots["train"], num_workers)), runs, self.slots["train"])
            return Placement(train, measure, (*measure, *train)[:num_workers], (), "a slot", "slots")
        else:
            host_gpus = host_gpus() if callable(host_gpus) else host_gpus
            host = range(min(host_gpus or MAX_WORKERS, MAX_WORKERS))
            if self.train_gpus:
                train, spare = split(self.train_gpus, runs)
            else:
                train, spare = split([g for g in host if g not in self.infer_gpus], runs)
            measure = self.infer_gpus or tuple(dict.fromkeys(g for g in (*host, *spare) if g not in train))
        return Placement(train, measure, (*measure, *train)[:num_workers], train, "GPU {}", "GPUs")

    def study_worker_argv(self, workers, which, lease: float = 0) -> list[str]:
        """The argv that starts the study's workers number `which` (indices into `workers`, the devices of a
        study's workers: Placement.workers) and returns once they run: the first ones with the study (the
        group, as `workers_argv` starts it, when they are all of them), or one on a device training has freed.
        Local: worker processes until the queue is empty and closed (worker 0's with the progress line).
        Compose: `up -d` of workers `which` with the environment of the whole group, so the workers stage's
        `up infer-workers` (`workers_argv` with the same `workers`) re-attaches to every one unchanged."""
        which = tuple(which)
        if which == tuple(range(len(workers))) or (self.launcher == "local" and 0 in which):
            return self.workers_argv(len(which), True, lease, workers)
        if self.launcher == "local":
            return role_argv("local", "infer", "infer", [
                "worker", "--scale", self.scale, "--until-empty", *(["--processes", str(len(which))] * (len(which) > 1)),
                *(["--lease", f"{lease:g}"] if lease else [])])
        env = self._workers_env(len(workers), workers, lease)
        return with_scale(self.scale, ["docker", "compose", "up", "-d", *(f"infer-worker-{i}" for i in which)], **env)

    @property
    def rejoins(self) -> bool:
        """Whether the workers stage's own command re-attaches to the workers the train stage started (Compose's
        `up`, which also shows the queue's follower) rather than starting new ones (local processes: the stage
        waits for the train stage's instead)."""
        return self.launcher == "compose"

    def train_slots(self) -> int:
        """Training runs side by side: one per training GPU, else the scale's slots."""
        return len(self.train_gpus) if self.gpus and self.train_gpus else self.slots["train"]


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
    infer = table["infer_gpus"]
    if not isinstance(infer, list) or not all(value_fits(int, g) and g >= 0 for g in infer) or len(set(infer)) != len(infer):
        raise ConfigError(f"{where}: infer_gpus must be a list of distinct host GPU indices, got {infer!r}")
    if set(infer) & set(gpus):
        raise ConfigError(f"{where}: infer_gpus and train_gpus share GPU(s) {sorted(set(infer) & set(gpus))}: a "
                          "measurement worker runs while training does, so it never shares a training GPU")
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
