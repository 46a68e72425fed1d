"""Pure command builders: the exact argv of every stage, by the scale's launcher (rcea.launch, the `[launch]`
table of configs/scales/<scale>.toml): a process in the role's environment (`local`: tiny) or a container of
compose.yaml (`compose`: 3b/7b). What differs between the launchers is built in rcea.launch (the seam); nothing
here branches on a launcher.

The scale reaches every container: `docker compose run` commands carry `--scale S` in their arguments,
and the services started with `docker compose up` (workers, judge server) get `RCEA_SCALE=S` in their
environment (compose.yaml passes it through; a worker refuses to start without it). Tested against the
exact command lines in tests/deploy/test_tasks.py.
"""
from __future__ import annotations

import os
import re

from invoke.exceptions import Exit

from rcea import layout
from rcea.config import METHODS, SCALES, ConfigError, load_config  # rcea.config needs only the stdlib
from rcea.launch import host_file, role_argv
from rcea.launch import MAX_WORKERS, ROLES, SERVICE_OF, WORKERS_GROUP, launch, with_scale  # noqa: F401
# (ROLES, SERVICE_OF, WORKERS_GROUP, with_scale: read here by tasks.py and the tests)
from rcea.layout import JOB_KINDS as KINDS
from rcea.paths import project_root

WHATS = (*KINDS, "all")
# Which environment (and container) runs each entry module.
ENV_OF = {"rcea.prepare": "train", "rcea.warmstart_rebuild": "train", "train": "train", "train.noise_study": "train",
          "train.plan": "train", "infer": "infer", "rcea.status": "tools",
          "infer.judge": "infer", "infer.labels": "infer", "infer.audit": "infer", "infer.outside": "infer",
          "aggregate": "aggregate",
          "rcea.publish": "aggregate"}
BUILD_SERVICES = {"train": "train", "infer": "infer-cli", "aggregate": "aggregate"}
AUDIT_PORT = 8765

# ---------------------------------------------------------------- validation


def choice(option: str, value, choices) -> str:
    """Return ``value`` if it is one of ``choices``, else stop with the list of valid choices."""
    if value not in choices:
        raise Exit(f"invalid --{option} {value!r}; valid choices: {', '.join(choices)}", code=2)
    return value


ENV_FILE = project_root() / ".env"   # the project's .env, which Compose reads


def compose_variable(key: str) -> str:
    """`key` as `docker compose` reads it: the shell's environment, else the project's .env ('' if neither),
    so Invoke and a bare `docker compose up infer-workers` agree on NUM_WORKERS."""
    if os.environ.get(key):
        return os.environ[key]
    lines = ENV_FILE.read_text().splitlines() if ENV_FILE.is_file() else []
    found = [v.strip().strip("'\"") for k, _, v in (ln.partition("=") for ln in lines) if k.strip() == key]
    return found[-1] if found else ""


def check_workers(n, scale: str = "3b") -> int:
    """The measurement workers, the same under every engine and launcher: --num-workers (None: not given), else
    Compose's NUM_WORKERS (compose launcher: the shell's, else .env's), else the scale's `workers`
    (rcea.launch); each is a process (one CPU thread) or a GPU."""
    lc = launch(scale)
    n = lc.default_workers(compose_variable("NUM_WORKERS")) if n is None else n
    if not str(n).isdigit() or not 1 <= int(n) <= MAX_WORKERS:
        raise Exit(f"invalid --num-workers {n!r}; valid choices: 1..{MAX_WORKERS} ({lc.each_worker})", code=2)
    return int(n)


def check_overrides(overrides, scale: str = "tiny") -> list[str]:
    """`key=value` strings, checked here against the configuration (keys, types, ranges, with the shared
    $RCEA_OVERRIDES) before any process or container starts."""
    bad = [o for o in overrides or [] if not re.fullmatch(r"[A-Za-z_][\w.\-]*=.*", o)]
    if bad:
        raise Exit(f"invalid --override {bad[0]!r}; expected section.key=value, e.g. "
                   "--override train.learning_rate=1e-6", code=2)
    try:
        load_config(scale if scale in SCALES else "tiny", None, list(overrides or []))
    except ConfigError as exc:   # an override's own error says "override '...'"; a file's names the file
        raise Exit(f"invalid --override: {exc}" if str(exc).startswith("override ") else f"error: {exc}",
                   code=2) from None
    return list(overrides or [])


def parse_methods(methods: str) -> list[str]:
    return [choice("methods", m.strip(), METHODS) for m in methods.split(",") if m.strip()]


# ---------------------------------------------------------------- builders


def local_command(module: str, args) -> list[str]:
    """``python -m <module> <args>`` in that module's own environment under .envs/, whatever the scale."""
    return role_argv("local", ENV_OF[module], module, args)


def compose(*args: str) -> list[str]:
    return ["docker", "compose", *args]


def role_command(module: str, args, scale: str, run_opts=()) -> list[str]:
    """The scale's launcher: a local process, or the same module in the role's container (same working layout)."""
    return launch(scale).argv(ENV_OF[module], module, args, run_opts)


def plan_command(scale: str, gpu: str = "", num_gpus: int = 0, overrides=()) -> list[str]:
    """`python -m train.plan`: the resource plan, always a local process on CPU (fake tensors), at every scale;
    no --gpu: the scale's first training card (the [targets] of configs/scales/<scale>.toml)."""
    args = ["--scale", scale, *(["--gpu", gpu] if gpu else []), *(["--num-gpus", str(num_gpus)] if num_gpus else [])]
    for o in overrides:
        args += ["--override", o]
    return local_command("train.plan", args)


def train_args(method, scale, max_steps=0, resume=False, overrides=()) -> list[str]:
    args = ["--method", method, "--scale", scale]
    if max_steps:
        args += ["--max-steps", str(max_steps)]
    if resume:
        args.append("--resume")
    for o in overrides:
        args += ["--override", o]
    return args


def train_command(method: str, scale: str, **kw) -> list[str]:
    return role_command("train", train_args(method, scale, **kw), scale)


def enqueue_command(scale: str, method: str, what: str = "all") -> list[str]:
    return role_command("infer", ["enqueue", "--scale", scale, "--method", method, "--what", what], scale)


def worker_services(n: int) -> list[str]:
    return [f"infer-worker-{i}" for i in range(n)]


def workers_command(scale: str, num_workers: int = MAX_WORKERS, detach: bool = True, lease: float = 0,
                    gpus=None) -> list[str]:
    """Local launcher: `num_workers` local worker processes (one CPU thread each) until the queue is empty and
    not held open (infer.queue), one progress line on the terminal (each worker's own output in
    <data>/logs/workers/<scale>.log: infer.console).
    Compose: the `infer-workers` group of compose.yaml (workers 0..NUM_WORKERS-1 on GPUs 0..NUM_WORKERS-1, no
    container for a GPU beyond them, and a follower of the queue; the same as a bare `docker compose up
    infer-workers` with that NUM_WORKERS); `gpus` (a study's: rcea.launch Placement.workers) puts worker i on host
    GPU gpus[i] instead (compose.yaml's INFER_GPU_<i>) and runs one worker per GPU listed:
    detached for `invoke workers` and for a study's workers while it trains (`docker compose logs -f
    infer-workers` follows them; a study whose training GPUs join the workers later starts them one service at a
    time instead, with the same variables: rcea.launch study_worker_argv), attached in the study's workers
    stage, which re-attaches to those containers (the same configuration: Compose leaves them running), returns
    when every worker and the follower have exited and stops them all if one fails."""
    return launch(scale).workers_argv(num_workers, detach, lease, gpus)


def hand_worker_gpus(scale: str, n: int, training: set[int] | None, host_gpus: int | None = None) -> tuple[int, ...]:
    """The GPUs of `n` hand-started GPU workers (`invoke workers`): () (compose.yaml's worker i on GPU i) when no
    training container runs (`training` None; shell.training_gpus); else the first `n` of the host's GPUs
    (`host_gpus` of them, MAX_WORKERS when not known) that neither a running training container (`training`,
    the host GPU indices they name) nor the scale's train_gpus (rcea.launch) holds, so no worker shares a GPU
    with a training job (possibly fewer than `n`). `host_gpus` may be a function, called only then."""
    if training is None:
        return ()
    host_gpus = host_gpus() if callable(host_gpus) else host_gpus   # shell.host_gpu_count, asked only now
    busy = training | set(launch(scale).train_gpus)
    free = tuple(g for g in range(min(host_gpus or MAX_WORKERS, MAX_WORKERS)) if g not in busy)
    if not free:
        raise Exit(f"training holds every GPU of this host (GPUs {','.join(map(str, sorted(busy)))}): start the "
                   "workers when it ends, or with a study (invoke study), which keeps them off its training GPUs",
                   code=2)
    gpus = free[:n]
    print(f"a training container is running: the workers avoid its GPUs and the scale's train_gpus, and take "
          f"GPU{'s' * (len(gpus) > 1)} {','.join(map(str, gpus))}" + (f" ({len(gpus)} of {n})" if len(gpus) < n else ""))
    return gpus


AUDIT_HELP = {"sample": "draw the audit pairs (once; kept on a rerun)",
              "serve": f"serve the annotation page on http://127.0.0.1:{AUDIT_PORT}/ (another: --port N)",
              "port": f"the annotation page's port with --serve (default {AUDIT_PORT})",
              "import": "import annotations from a CSV file (annotator,pair_id,label)",
              "report": "agreement metrics and the five gates"}


def warm_start_command(write: bool = False, steps: int = 0) -> list[str]:
    """Rebuild the shipped tiny warm start and compare it (rcea.warmstart_rebuild); --write replaces it."""
    return local_command("rcea.warmstart_rebuild", ["--rebuild", *(["--write"] if write else []),
                                            *(["--steps", str(steps)] if steps else [])])


def hold_command(scale: str) -> list[str]:
    """`python -m infer hold`: the queue stays open (idle workers wait for more jobs) until this command's stdin
    ends; the study runs it in the background through its train stage, its stdin a pipe (-T: no TTY)."""
    return role_command("infer", ["hold", "--scale", scale], scale, run_opts=("-T",))


def status_command(scale: str, check: bool = False) -> list[str]:
    return role_command("infer", ["status", "--scale", scale, *(["--check"] if check else [])], scale)


def judge_server_up(scale: str) -> list[str]:
    """The judge / codebook model server (vLLM, OpenAI-compatible) on its GPU; waits until healthy."""
    return with_scale(scale, compose("--profile", "judge", "up", "-d", "--wait", "judge"))


def judge_server_stop(scale: str) -> list[str]:
    return with_scale(scale, compose("--profile", "judge", "stop", "judge"))


def labels_command(scale: str, step: str) -> list[str]:
    """`python -m infer.labels validity|modes|all`: rules in the toy world, the LLM judge/codebook otherwise."""
    return role_command("infer.labels", [step, "--scale", scale], scale)


def judge_commands(scale: str) -> list[list[str]]:
    run = labels_command(scale, "validity")
    return [judge_server_up(scale), run] if launch(scale).judge_server else [run]


def codebook_commands(scale: str) -> list[list[str]]:
    run = labels_command(scale, "modes")
    return [judge_server_up(scale), run] if launch(scale).judge_server else [run]


def audit_command(scale: str, action: str, *args: str, run_opts=()) -> list[str]:
    return role_command("infer.audit", [action, "--scale", scale, *args], scale, run_opts)


def audit_serve_command(scale: str, port: int | str = AUDIT_PORT) -> list[str]:
    """The annotation page's server on `port` (on the host's loopback; inside a container on all interfaces)."""
    if not (str(port).isdecimal() and 1 <= int(port) <= 65535):
        raise Exit(f"invalid --port {port!r}; valid choices: 1..65535 (default {AUDIT_PORT})", code=2)
    args, opts = launch(scale).serve_opts(int(port))
    return audit_command(scale, "serve", *args, run_opts=opts)


def audit_import_command(scale: str, path: str) -> list[str]:
    name, opts = host_file(launch(scale).launcher, path, f"/workspace/import/{os.path.basename(path)}")
    return audit_command(scale, "import", name, run_opts=opts)


def data_root(scale: str = "tiny") -> str:
    """The data folder as the role processes see it: the host's locally, its mount point in a container."""
    return launch(scale).data_root()


def host_data(scale: str = "tiny") -> str:
    """The data folder on this host at every launcher (compose.yaml bind-mounts it into every container):
    $RCEA_DATA, else ./data."""
    return launch(scale).host_data()


def results_dir(scale: str = "tiny") -> str:
    """Where a study's results land on this host at every launcher: $RCEA_RESULTS, else ./results (compose.yaml
    bind-mounts it into the aggregate container; one folder per scale inside)."""
    return launch(scale).host_results()


def published_dir(scale: str) -> str:
    """Where `publish_command` puts a scale's results on this host."""
    return f"{results_dir(scale)}/{scale}"


def aggregate_command(scale: str, skip_bad_parts: bool = False, if_changed: bool = False) -> list[str]:
    """`python -m aggregate` of the scale's tables; `if_changed` (the study's): keep the last outputs when nothing
    they are made from has changed (aggregate/fresh.py)."""
    root = data_root(scale)
    return role_command("aggregate", ["--input", str(layout.tables_dir(scale, root)),
                                      "--output", str(layout.results_dir(scale, root)), "--scale", scale,
                                      *(["--skip-bad-parts"] if skip_bad_parts else []),
                                      *(["--if-changed"] if if_changed else [])], scale)


def publish_command(scale: str) -> list[str]:
    """Copy <data>/results/<scale> to <results>/<scale> (in a container through its mounts of both folders)."""
    return role_command("rcea.publish", [str(layout.results_dir(scale, data_root(scale))),
                                         f"{launch(scale).results_root()}/{scale}"], scale)
