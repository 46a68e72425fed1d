"""Invoke tasks: one command line for every stage of the RCEA reproduction.

    invoke --list                         all tasks;   invoke --help train   one task's options
    invoke train --method grpo --scale tiny     tiny: runs locally in .envs/train (CPU)
    invoke train --method kl_cov --scale 3b     3b/7b: `docker compose run --rm train ...` (GPU host)
    invoke --dry <task> ...                     print the exact command(s) instead of running them

Runs in the tools environment (.envs/tools): no torch and no role package is imported here. The
command builders (``local_command``, ``compose``, ``*_commands``) are pure functions, tested in
tests/deploy/test_tasks.py against the exact command lines.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from rcea.config import METHODS, SCALES  # one spelling of each name; rcea.config needs only the stdlib

ROOT = Path(__file__).resolve().parent
WHATS = ("greedy", "passk", "probe", "covariance", "all")
ROLES = ("train", "infer", "aggregate")
MAX_WORKERS = 8
# Which environment (and container) runs each entry module.
ENV_OF = {"rcea.prepare": "train", "train": "train", "train.seeds": "train", "infer": "infer", "infer.judge": "infer",
          "aggregate": "aggregate"}
# Compose services that run one-off commands per environment (see compose.yaml).
SERVICE_OF = {"train": "train", "infer": "infer-cli", "aggregate": "aggregate"}
BUILD_SERVICES = {"train": "train", "infer": "infer-cli", "aggregate": "aggregate"}

# ---------------------------------------------------------------- validation


def choice(option: str, value, choices) -> str:
    """Return ``value`` if it is one of ``choices``, else stop with the list of valid choices."""
    if value not in choices:
        raise Exit(f"invalid --{option} {value!r}; valid choices: {', '.join(choices)}", code=2)
    return value


def check_workers(n) -> int:
    """--num-workers, else $NUM_WORKERS, else 8; each worker takes one GPU."""
    n = n or os.environ.get("NUM_WORKERS") or MAX_WORKERS
    if not str(n).isdigit() or not 1 <= int(n) <= MAX_WORKERS:
        raise Exit(f"invalid --num-workers {n!r}; valid choices: 1..{MAX_WORKERS} (one GPU each)", code=2)
    return int(n)


def check_overrides(overrides) -> list[str]:
    bad = [o for o in overrides or [] if not re.fullmatch(r"[A-Za-z_][\w.\-]*=.*", o)]
    if bad:
        raise Exit(f"invalid --override {bad[0]!r}; expected key=value, e.g. --override lr=1e-6", code=2)
    return list(overrides or [])


def parse_methods(methods: str) -> list[str]:
    return [choice("methods", m.strip(), METHODS) for m in methods.split(",") if m.strip()]


# ---------------------------------------------------------------- pure command builders


def local_command(module: str, args) -> list[str]:
    """Tiny scale: run ``python -m <module> <args>`` in that module's own environment under .envs/."""
    return [f".envs/{ENV_OF[module]}/bin/python", "-m", module, *args]


def compose(*args: str) -> list[str]:
    return ["docker", "compose", *args]


def role_command(module: str, args, scale: str) -> list[str]:
    """Tiny runs locally; 3b/7b run the same module in the role's container (same working layout)."""
    if scale == "tiny":
        return local_command(module, args)
    return compose("run", "--rm", SERVICE_OF[ENV_OF[module]], "python", "-m", module, *args)


def train_args(method, scale, max_steps=0, resume=False, overrides=()) -> list[str]:
    args = ["--method", method, "--scale", scale]
    if max_steps:
        args += ["--max-steps", str(max_steps)]
    if resume:
        args.append("--resume")
    for o in overrides:
        args += ["--override", o]
    return args


def worker_services(n: int) -> list[str]:
    return [f"infer-worker-{i}" for i in range(n)]


def workers_command(scale: str, num_workers: int = MAX_WORKERS, lease: float = 0) -> list[str]:
    if scale == "tiny":
        return local_command("infer", ["worker", "--scale", "tiny", "--until-empty",
                                       *(["--lease", f"{lease:g}"] if lease else [])])
    # Only workers 0..N-1 start, so a host with fewer than eight GPUs works (see compose.yaml).
    return ["env", f"RCEA_SCALE={scale}", f"NUM_WORKERS={num_workers}", *([f"RCEA_LEASE_S={lease:g}"] if lease else []),
            *compose("--profile", "infer", "up", "-d", *worker_services(num_workers))]


def judge_commands(scale: str) -> list[list[str]]:
    run = role_command("infer.judge", ["run", "--scale", scale], scale)
    if scale == "tiny":
        return [run]
    return [compose("--profile", "judge", "up", "-d", "--wait", "judge"), run]


def data_root(scale: str = "tiny") -> str:
    """The data directory as the role processes see it: RCEA_DATA locally (tiny), the volume in containers."""
    return os.environ.get("RCEA_DATA", "data") if scale == "tiny" else "data"


def aggregate_command(scale: str, skip_bad_parts: bool = False) -> list[str]:
    root = data_root(scale)
    return role_command("aggregate", ["--input", f"{root}/infer/{scale}/tables",
                                      "--output", f"{root}/results/{scale}", "--scale", scale,
                                      *(["--skip-bad-parts"] if skip_bad_parts else [])], scale)


def build_command(roles) -> list[str]:
    return compose("build", *[BUILD_SERVICES[r] for r in roles])


# Lockfiles: exactly how lockfiles/*.txt were compiled (uv 0.13.9); run from inside lockfiles/.
LOCK_COMMON = ("--python-version", "3.11", "--only-binary", ":all:", "--generate-hashes", "--no-header")
LOCKS = {  # name: (platform, exclude-newer, constrained by this GPU lock, needs find-links)
    "train": ("x86_64-manylinux_2_35", "2026-02-28", None, False),
    "infer": ("x86_64-manylinux_2_35", "2026-06-16", None, False),
    "aggregate": ("x86_64-manylinux_2_28", "2026-06-16", None, False),
    "train-cpu": ("x86_64-manylinux_2_35", "2026-12-01", "train", True),
    "infer-cpu": ("x86_64-manylinux_2_35", "2026-12-01", "infer", True),
    "tools": ("x86_64-manylinux_2_28", "2026-12-01", None, False),
}
GPU_ONLY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")


def constraints_path(gpu_lock: str, tmp: str | None = None) -> Path:
    """Where the CPU twin's constraints go (its path shows in the lock's `# via -c` annotations)."""
    return Path(tmp or tempfile.gettempdir()) / f"{gpu_lock}-constraints.txt"


def lock_command(name: str, uv: str, find_links=(), directory="lockfiles", tmp=None) -> list[str]:
    platform, cutoff, constrained_by, needs_links = LOCKS[name]
    cmd = [uv, "--directory", directory, "pip", "compile", f"{name}.in", "-o", f"{name}.txt"]
    if constrained_by:
        cmd += ["-c", str(constraints_path(constrained_by, tmp))]
    cmd += [*LOCK_COMMON, "--python-platform", platform, "--exclude-newer", cutoff]
    if needs_links:
        if not find_links:
            raise Exit(f"{name}: the CPU torch wheel directory is unknown; set RCEA_FIND_LINKS or pip's "
                       "global.find-links", code=2)
        for d in find_links:
            cmd += ["--find-links", d]
    return cmd


def read_pins(lock_text: str) -> dict[str, str]:
    """{normalised name: version} of every ``name==version`` line in a compiled lockfile."""
    pins = {}
    for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)==([^\s;\\]+)", lock_text, re.M):
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return pins


def constraints_text(gpu_lock_text: str) -> str:
    """The CPU twin's constraints: every pin of the GPU lock except torch, triton and CUDA wheels."""
    lines = [f"{n}=={v}" for n, v in _pins_in_order(gpu_lock_text) if not GPU_ONLY.match(n)]
    return "\n".join(lines) + "\n"


def _pins_in_order(text):
    return re.findall(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)==([^\s;\\]+)", text, re.M)


# ---------------------------------------------------------------- running


def sh(argv) -> str:
    return shlex.join(argv)


def is_dry(c) -> bool:
    return bool(c.config.run.dry)


def run_all(c, commands, **kw):
    """Run (or, under ``invoke --dry``, print) each argv from the project root."""
    os.chdir(ROOT)  # commands use project-relative paths, like .envs/train/bin/python
    return [c.run(sh(argv), **kw) for argv in commands]


def _probe(argv) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def compose_available() -> bool:
    return _probe(["docker", "compose", "version"])


def engine_available() -> bool:
    return _probe(["docker", "info", "--format", "{{.ServerVersion}}"])


def require_compose(c, what: str, tiny_hint: str):
    """Real scales need Docker with the compose plugin and an engine; say so, and what to run instead."""
    if is_dry(c):
        return
    if not compose_available() or not engine_available():
        raise Exit(f"{what} at this scale runs in a GPU container, but this machine has no Docker engine "
                   f"or compose plugin (`docker compose version` / `docker info` failed).\n"
                   f"  Instead: run it locally at the tiny scale: {tiny_hint}\n"
                   f"  or on a GPU host with Docker + the NVIDIA container toolkit (check it with "
                   f"`invoke doctor --strict`).", code=3)
    write_env_file({"UID": str(os.getuid()), "GID": str(os.getgid())})


def write_env_file(values: dict, path: Path | None = None) -> Path:
    """Merge ``values`` into .env (read by Compose for `user: ${UID}:${GID}` and the build args)."""
    path = path or ROOT / ".env"
    lines = path.read_text().splitlines() if path.exists() else []
    keep = [ln for ln in lines if ln.split("=", 1)[0].strip() not in values]
    path.write_text("\n".join(keep + [f"{k}={v}" for k, v in values.items()]) + "\n")
    return path


def find_links() -> list[str]:
    raw = os.environ.get("RCEA_FIND_LINKS")
    if raw is None:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                             capture_output=True, text=True)
        raw = out.stdout if out.returncode == 0 else ""
    return raw.split()


# ---------------------------------------------------------------- tasks

H_SCALE = f"model scale: {', '.join(SCALES)} (tiny runs locally on CPU; 3b/7b in GPU containers)"
H_METHOD = f"RL objective: {', '.join(METHODS)}"


@task(help={"scale": H_SCALE})
def prepare(c, scale="tiny"):
    """Build the tiny model (tiny) and prepare the training/evaluation data for a scale."""
    choice("scale", scale, SCALES)
    if scale != "tiny":
        require_compose(c, "prepare", "invoke prepare --scale tiny")
    run_all(c, [role_command("rcea.prepare", ["--scale", scale], scale)])


@task(iterable=["override"], help={
    "method": H_METHOD, "scale": H_SCALE, "max-steps": "stop after N optimizer steps (0: the config's)",
    "resume": "resume from the latest checkpoint", "override": "config override key=value (repeatable)"})
def train(c, method="grpo", scale="tiny", max_steps=0, resume=False, override=None):
    """Train one method at one scale (tiny: local .envs/train; 3b/7b: the training container, 1 GPU)."""
    choice("method", method, METHODS)
    choice("scale", scale, SCALES)
    args = train_args(method, scale, max_steps, resume, check_overrides(override))
    if scale != "tiny":
        require_compose(c, "training", f"invoke train --method {method} --scale tiny")
    run_all(c, [role_command("train", args, scale)])


@task(help={"scale": H_SCALE, "method": H_METHOD + ", or base (the untrained policy)",
            "what": f"what to generate/measure: {', '.join(WHATS)}"})
def infer(c, scale="tiny", method="grpo", what="all"):
    """Enqueue inference jobs (greedy, pass@k, probe, covariance) for the workers to run."""
    choice("scale", scale, SCALES)
    choice("method", method, METHODS + ("base",))
    choice("what", what, WHATS)
    if scale != "tiny":
        require_compose(c, "enqueueing", f"invoke infer --scale tiny --method {method} --what {what}")
    args = ["enqueue", "--scale", scale, "--method", method, "--what", what]
    run_all(c, [role_command("infer", args, scale)])


@task(help={"scale": H_SCALE, "num-workers": f"GPUs/workers to start, 1..{MAX_WORKERS} (3b/7b; "
                                               "default: $NUM_WORKERS or 8)",
                 "lease": "seconds a job's claim lasts without a heartbeat (default 300)"})
def workers(c, scale="tiny", num_workers=0, lease=0.0):
    """Run the inference workers until the queue is empty (tiny: one local process; else N GPU workers)."""
    choice("scale", scale, SCALES)
    n = check_workers(num_workers)
    if float(lease) < 0:
        raise Exit(f"invalid --lease {lease!r}; seconds > 0 (0: the worker's default, 300)", code=2)
    if scale != "tiny":
        require_compose(c, "the inference workers", "invoke workers --scale tiny")
    run_all(c, [workers_command(scale, n, float(lease))])


@task(help={"scale": H_SCALE})
def status(c, scale="tiny"):
    """Show the inference queue: pending, running, done and failed jobs."""
    choice("scale", scale, SCALES)
    if scale != "tiny":
        require_compose(c, "status", "invoke status --scale tiny")
    run_all(c, [role_command("infer", ["status", "--scale", scale], scale)])


@task(help={"scale": H_SCALE})
def judge(c, scale="tiny"):
    """Judge process validity of verifier-accepted trajectories (3b/7b: starts the vLLM judge server)."""
    choice("scale", scale, SCALES)
    if scale != "tiny":
        require_compose(c, "the judge", "invoke judge --scale tiny")
    run_all(c, judge_commands(scale))


@task(help={"scale": H_SCALE, "skip-bad-parts": "aggregate the readable parts when some cannot be read "
                                                  "(the report lists each skipped file); default: stop"})
def aggregate(c, scale="tiny", skip_bad_parts=False):
    """Aggregate the inference tables into the paper's tables and figures (CPU only)."""
    choice("scale", scale, SCALES)
    if scale != "tiny":
        require_compose(c, "aggregation", "invoke aggregate --scale tiny")
    run_all(c, [aggregate_command(scale, skip_bad_parts)])


@task(help={"role": f"image to build: {', '.join(ROLES)} or all"})
def build(c, role="all"):
    """Build the container images from docker/ (needs a Docker engine with the compose plugin)."""
    roles = ROLES if role == "all" else (choice("role", role, ROLES + ("all",)),)
    require_compose(c, "building images", "scripts/bootstrap (the local CPU environments)")
    run_all(c, [build_command(roles)])


@task(help={"name": f"which lockfile: {', '.join(LOCKS)} or all (default)"})
def lock(c, name="all"):
    """Recompile lockfiles/*.txt from lockfiles/*.in with uv (needs PyPI; CPU twins after their GPU lock)."""
    names = list(LOCKS) if name == "all" else [choice("name", name, tuple(LOCKS) + ("all",))]
    uv_exe = Path(sys.executable).with_name("uv")
    if not uv_exe.exists():
        raise Exit("uv is missing from the tools environment; run scripts/bootstrap tools (lockfiles/tools.txt)")
    uv = os.path.relpath(uv_exe, ROOT)
    for n in names:
        constrained_by = LOCKS[n][2]
        if constrained_by:  # the GPU lock minus torch/triton/CUDA wheels constrains its CPU twin
            dest = constraints_path(constrained_by)
            print(f"# constraints: {dest} <- lockfiles/{constrained_by}.txt minus torch, triton, nvidia-*, cuda-*")
            if not is_dry(c):
                dest.write_text(constraints_text((ROOT / "lockfiles" / f"{constrained_by}.txt").read_text()))
        run_all(c, [lock_command(n, uv, find_links() if LOCKS[n][3] else ())], hide="out")  # uv echoes the lock


@task(help={"role": "environment to (re)build: tools, train, infer, aggregate (default: all)"})
def bootstrap(c, role=""):
    """Build the local CPU environments .envs/<role> from the hashed lockfiles."""
    if role:
        choice("role", role, ("tools",) + ROLES)
    run_all(c, [["scripts/bootstrap", *([role] if role else [])]])


@task(help={"args": "extra arguments passed to scripts/test"})
def test(c, args=""):
    """Run the project's test suite (scripts/test)."""
    run_all(c, [["scripts/test", *shlex.split(args)]], pty=False)


# The shortened demo (CI): every stage, smaller budgets. Shared by every stage's process via RCEA_OVERRIDES.
QUICK_OVERRIDES = ("train.max_steps=4", "train.save_steps=2", "train.per_device_batch=16",
                   "probe.composition={ toy = 12 }", "probe.n_questions=12", "probe.k=4",
                   "eval.questions_per_benchmark=12", "passk.questions=6", "passk.n=4",
                   "aggregate.bootstrap_resamples=200")


@task(help={"method": H_METHOD, "seeds": "comma-separated training seeds (at least two)",
            "questions": "held-out toy questions to measure on", "k": "samples per question"})
def seeds(c, method="grpo", seeds="1,2,3", questions=200, k=8):
    """Run-to-run noise at the tiny scale: train one objective from the warm start with several seeds and
    compare held-out sampled accuracy with the warm start's (writes data/results/tiny/seeds-<method>.md)."""
    choice("method", method, METHODS)
    run_all(c, [local_command("train.seeds", ["--method", method, "--seeds", seeds, "--questions", str(questions),
                                              "--k", str(k)])])


@task(help={"quick": "shortened budgets (what CI runs): every stage, a few steps and questions",
            "methods": f"comma list of: {', '.join(METHODS)} (default: all seven)"})
def demo(c, quick=False, methods=",".join(METHODS)):
    """End to end at the tiny scale on CPU, in the toy arithmetic world.

    Warm start, each objective from that warm start, probe / greedy / pass@k / covariance jobs at the
    base policy and the milestones, the rule-based judge and modes, and the aggregation. Complete
    stages are reused on a second run.
    """
    if quick:
        shared = [o for o in os.environ.get("RCEA_OVERRIDES", "").split(";") if o.strip()]
        os.environ["RCEA_OVERRIDES"] = ";".join([*QUICK_OVERRIDES, *shared])
    stages = demo_stages(parse_methods(methods))
    weights = [stage_weight(title, len(argvs)) for title, argvs in stages]
    t0 = time.monotonic()
    for i, (title, argvs) in enumerate(stages, 1):
        spent, done = time.monotonic() - t0, sum(weights[: i - 1])
        left = f", ~{spent / done * sum(weights[i - 1:]):.0f}s left" if done and spent > 1 else ""
        print(f"\n=== [{i}/{len(stages)}] {title}  (+{spent:.0f}s{left})", flush=True)
        if len(argvs) == 1:
            run_all(c, argvs)
        else:
            run_side_by_side(c, argvs, Path(data_root()) / "logs" / "demo")
    print(f"\n=== demo done in {time.monotonic() - t0:.0f}s")
    print(f"=== report: {data_root()}/results/tiny/report.md (tables/ and figures/ beside it)")


DEMO_TRAIN_JOBS = 2  # objectives trained side by side: each tiny run uses one CPU thread


def demo_stages(methods) -> list[tuple[str, list[list[str]]]]:
    """(title, commands) per stage; a stage with several commands runs them DEMO_TRAIN_JOBS at a time."""
    stages = [("prepare (tiny model, warm start, training pool)", [local_command("rcea.prepare", ["--scale", "tiny"])])]
    jobs = f", {DEMO_TRAIN_JOBS} at a time" if len(methods) > 1 else ""
    stages.append((f"train {', '.join(methods)} ({len(methods)} objective{'s' * (len(methods) > 1)}{jobs})",
                   [local_command("train", train_args(m, "tiny")) for m in methods]))
    for m in methods:  # each enqueue also plans the base policy's jobs (once)
        stages.append((f"enqueue {m}", [local_command(
            "infer", ["enqueue", "--scale", "tiny", "--method", m, "--what", "all"])]))
    stages.append(("workers (probe, greedy, pass@k, covariance)", [workers_command("tiny")]))
    stages.append(("judge and modes (rule-based in the toy world)", [judge_commands("tiny")[0]]))
    stages.append(("aggregate", [aggregate_command("tiny")]))
    return stages


# Rough share of the demo's time per stage (measured on 2 cores: prepare ~110 s, each objective ~50 s
# with two side by side, the workers ~110 s); the "left" estimate scales them by the pace so far.
STAGE_WEIGHTS = {"prepare": 110.0, "train": 25.0, "enqueue": 2.0, "workers": 110.0, "judge": 10.0, "aggregate": 25.0}


def stage_weight(title: str, n_commands: int) -> float:
    w = STAGE_WEIGHTS.get(title.split()[0], 10.0)
    return w * n_commands if title.startswith("train") else w


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def _log_name(argv) -> str:
    return "-".join(a for a in argv[argv.index("-m") + 1:] if not a.startswith("-"))[:80].replace("/", "_")


def run_side_by_side(c, commands, log_dir: Path, jobs: int = DEMO_TRAIN_JOBS) -> None:
    """Run commands `jobs` at a time, each logging to its own file; on a failure show that log's tail."""
    if is_dry(c):
        run_all(c, commands)
        return
    os.chdir(ROOT)
    log_dir.mkdir(parents=True, exist_ok=True)
    waiting, running, failed = list(commands), [], []
    while waiting or running:
        while waiting and len(running) < jobs:
            argv = waiting.pop(0)
            log = log_dir / f"{_log_name(argv)}.log"
            with log.open("ab") as fh:  # appended: a rerun keeps the earlier runs' logs
                fh.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {sh(argv)}\n".encode())
                fh.flush()
                start = fh.tell()
                proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT)
            running.append((argv, log, time.monotonic(), proc, start))
            print(f"  started: {sh(argv)}  (log: {log})", flush=True)
        time.sleep(0.2)
        for item in [r for r in running if r[3].poll() is not None]:
            running.remove(item)
            argv, log, t, proc, start = item
            notes = [ln for ln in _read_from(log, start).splitlines() if ln.startswith("[train]")]
            status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
            print(f"  {status} in {time.monotonic() - t:.0f}s: {sh(argv)}"
                  + "".join(f"\n    {ln}" for ln in notes[-2:]), flush=True)
            if proc.returncode != 0:
                failed.append((argv, log, start))
    if failed:
        argv, log, start = failed[0]
        lines = _read_from(log, start).splitlines()
        raise Exit("\n".join(lines[-40:]) + f"\n\n{len(failed)} of {len(commands)} commands failed; first: "
                   f"{sh(argv)}\nfull log: {log}", code=1)


# ---------------------------------------------------------------- doctor (preflight)


@dataclass
class Check:
    name: str
    level: str  # ok | warn (this machine cannot run real scales) | fail (present but broken)
    detail: str
    fix: str = ""


DRIVER_FLOOR = {"train": 525, "infer": 580}  # CUDA 12.8 (minor-version compat) / CUDA 13.x
TINY_DISK_GB = 5  # the CPU environments and tiny runs; images, 3B/7B weights and checkpoints want ~100


def gather_facts(path: Path = ROOT) -> dict:
    """Probe the host: Docker, nvidia-smi, /dev/shm, disk. Side-effect free."""
    facts = {"compose": compose_available(), "engine": engine_available(), "gpus": None}
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
                             capture_output=True, text=True)
        if out.returncode == 0:
            facts["gpus"] = [ln.split(",")[0].strip() for ln in out.stdout.splitlines() if ln.strip()]
    try:
        st = os.statvfs("/dev/shm")
        facts["shm_bytes"] = st.f_frsize * st.f_blocks
    except OSError:
        facts["shm_bytes"] = None
    facts["free_bytes"] = shutil.disk_usage(path).free
    facts["data_writable"] = os.access(path / "data" if (path / "data").exists() else path, os.W_OK)
    from rcea.data import benchmark_counts
    facts["benchmarks"] = benchmark_counts()  # {name: records or the error}; json only, no `datasets`
    return facts


def evaluate(facts: dict, num_workers: int = MAX_WORKERS, min_disk_gb: int = 100,
             volumes_ok: bool | None = None) -> list[Check]:
    """Turn host facts into checks, each failing one with its fix. Pure, so it is unit-tested."""
    checks = []
    if facts["compose"] and facts["engine"]:
        checks.append(Check("docker", "ok", "engine and compose plugin present"))
    else:
        missing = "compose plugin" if facts["engine"] else "Docker engine"
        checks.append(Check("docker", "warn", f"no {missing}: 3b/7b tasks cannot run here",
                            "install Docker Engine + docker-compose-plugin on a GPU host; "
                            "here use the tiny scale (invoke demo)"))
    gpus = facts["gpus"]
    if not gpus:
        checks.append(Check("gpu", "warn", "no NVIDIA GPU (nvidia-smi missing or failing)",
                            "run 3b/7b on a host with NVIDIA driver >= 580 and the NVIDIA container "
                            "toolkit; tiny runs on CPU"))
    else:
        major = min(int(v.split(".")[0]) for v in gpus)
        for image, floor in DRIVER_FLOOR.items():
            ok = major >= floor
            checks.append(Check(f"driver ({image} image)", "ok" if ok else "fail",
                                f"driver {min(gpus)} {'>=' if ok else '<'} {floor}",
                                "" if ok else f"upgrade the NVIDIA driver to >= {floor} (CUDA "
                                f"{'13' if floor == 580 else '12.8'}) or install cuda-compat"))
        ok = len(gpus) >= num_workers
        checks.append(Check("gpu count", "ok" if ok else "fail", f"{len(gpus)} GPU(s), {num_workers} workers",
                            "" if ok else f"start fewer workers: invoke workers --num-workers {len(gpus)} "
                            f"(or NUM_WORKERS={len(gpus)} in .env)"))
    shm = facts["shm_bytes"]
    ok = shm is not None and shm >= 1 << 30
    checks.append(Check("/dev/shm", "ok" if ok else "fail", f"{(shm or 0) / 2**30:.1f} GiB",
                        "" if ok else "mount a larger /dev/shm (>= 1 GiB); the services use ipc: host, "
                        "so the host's /dev/shm is what NCCL, vLLM and DataLoader workers get"))
    free = facts["free_bytes"] / 2**30
    level = "ok" if free >= min_disk_gb else "warn" if free >= TINY_DISK_GB else "fail"
    checks.append(Check("disk", level, f"{free:.0f} GiB free (3b/7b want {min_disk_gb}, tiny {TINY_DISK_GB})",
                        "" if level == "ok" else "free space, or move Docker's data-root and the volumes "
                        "to a larger disk"))
    from rcea.data import BENCHMARK_COUNTS
    bench = facts["benchmarks"]
    bad = {n: bench.get(n, "missing") for n in BENCHMARK_COUNTS if bench.get(n) != BENCHMARK_COUNTS[n]}
    checks.append(Check("benchmarks", "fail" if bad else "ok",
                        "; ".join(f"{n}: {v}" for n, v in bad.items()) if bad else
                        "mathdata/ loads: " + ", ".join(f"{n} {c}" for n, c in BENCHMARK_COUNTS.items()),
                        "restore the shipped files: git checkout -- mathdata (hashes in mathdata/PROVENANCE.md)"
                        if bad else ""))
    if volumes_ok is None:
        checks.append(Check("volumes", "ok" if facts["data_writable"] else "fail",
                            "local data/ writable" + ("" if facts["engine"] else
                                                      " (named volumes not checked: no Docker engine)"),
                            "" if facts["data_writable"] else "chown -R $(id -u):$(id -g) data"))
    else:
        checks.append(Check("volumes", "ok" if volumes_ok else "fail",
                            "named volumes rcea-data, hf-cache writable by UID:GID"
                            + ("" if volumes_ok else " failed"),
                            "" if volumes_ok else "rebuild with `invoke build` (images take UID/GID from "
                            ".env) or: docker compose run --rm -u 0 aggregate chown -R $(id -u):$(id -g) "
                            "/workspace/data /cache/hf"))
    return checks


VOLUME_PROBE = ["run", "--rm", "--no-deps", "aggregate", "python", "-c",
                "import os,sys; sys.exit(0 if all(os.access(p, os.W_OK) for p in "
                "('/workspace/data', '/cache/hf')) else 1)"]


@task(help={"strict": "exit non-zero also when Docker or a GPU is missing (readiness for 3b/7b)",
            "num-workers": f"workers you plan to start (default $NUM_WORKERS or {MAX_WORKERS})",
            "min-disk-gb": "free disk wanted at the project root, GiB"})
def doctor(c, strict=False, num_workers=0, min_disk_gb=100):
    """Preflight: Docker, NVIDIA driver (>= 580 for infer), GPU count, /dev/shm, disk, volume permissions.

    Exit status: 1 if a check fails; missing Docker/GPU are warnings (tiny still runs) unless --strict."""
    n = check_workers(num_workers)
    facts = gather_facts()
    volumes_ok = None
    if facts["compose"] and facts["engine"]:
        volumes_ok = _probe(compose(*VOLUME_PROBE))
    checks = evaluate(facts, n, min_disk_gb, volumes_ok)
    for ch in checks:
        print(f"[{ch.level.upper():4}] {ch.name}: {ch.detail}" + (f"\n       fix: {ch.fix}" if ch.fix else ""))
    failed = [ch for ch in checks if ch.level == "fail" or (strict and ch.level == "warn")]
    if failed:
        raise Exit(f"doctor: {len(failed)} problem(s): {', '.join(ch.name for ch in failed)}", code=1)
    print("doctor: ready for 3b/7b" if all(ch.level == "ok" for ch in checks)
          else "doctor: fine for the tiny scale (3b/7b need the warnings fixed; see --strict)")
