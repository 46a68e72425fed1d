"""The studies that only read the quick demo's folder, run as `scripts/run` subprocesses.

`conftest.py` starts them together in threads as soon as the demo is done (each is a few minutes of
mostly single-threaded work, so side by side they share the two cores); `test_demo_ray.py`,
`test_rehearsal.py` and `test_resume.py` check what each left. Two of them are killed -9 at seeded random
points and rerun (`killed_and_rerun`). Not collected (the name is not test_*.py).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from rcea.config import toml_value   # a setting as an override's right-hand side

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("grpo", "kl_cov")  # what the session fixture `demo` (conftest.py) trains
BENCHMARKS = ("amc23", "aime24", "aime25", "math500", "minerva_math")


# Stages in order (orchestrate/ops/study.py). A kill aimed at (stage, progress) lands a seeded random moment after the
# stage began: with a progress, after this run has made some (one more complete checkpoint, one more complete
# table part), plus 0 to KILL_WITHIN[progress] seconds; without, 0.5 to KILL_WITHIN[stage] seconds after its
# banner. A kill drawn later than the stage lasts lands in a later stage: it is recorded as such.
STAGES = ("prepare", "train", "workers", "judge", "modes", "audit", "aggregate", "results")
KILL_WITHIN = {"prepare": 8.0, "train": 12.0, "workers": 20.0, "judge": 6.0, "modes": 6.0, "audit": 4.0,
               "aggregate": 15.0, "results": 2.0, "checkpoints": 1.0, "parts": 20.0}
# (A tiny run's training goes on only seconds past its first checkpoint now that the warm start is shipped: a kill
# drawn up to 12 s after it landed in the workers stage, leaving mid-training unkilled.)
PROGRESS = {"checkpoints": "train/tiny/*/checkpoints/checkpoint-*/*.pt.manifest.json",
            "parts": "infer/tiny/tables/*/*.parquet.manifest.json"}
# Every stage of the local engine; under Ray mid-training and mid-measurement, both in its train stage (each
# run's measurements start there as soon as the run has finished).
LOCAL_KILLS = tuple((s, {"train": "checkpoints", "workers": "parts"}.get(s)) for s in STAGES)
RAY_KILLS = (("train", "checkpoints"), ("train", "parts"))
BANNER = re.compile(r"^=== \[(\d+)/(\d+)\] ")


@dataclass
class KilledStudy:
    run: subprocess.CompletedProcess          # the last, uninterrupted rerun
    kills: list[tuple[str, str, float]] = field(default_factory=list)  # (aimed at, running when killed, delay)
    outputs: list[str] = field(default_factory=list)                    # what each killed run printed
    started: float = 0.0                                                 # time.time() at the first start


def _count(data: Path, progress: str | None) -> int:
    return len(list(data.glob(PROGRESS[progress]))) if progress else 0


def _run_until_killed(cmd, env, data: Path, target, rng: random.Random):
    """Start `cmd` in its own process group, wait for `target` (stage, progress; see KILL_WITHIN), then kill -9
    the whole group. Returns (the stage running at the kill, the delay, the output), or, if the study finished
    first, that uninterrupted run (a CompletedProcess; stderr merged into stdout)."""
    stage, progress = target
    before = _count(data, progress)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines, seen, reached = [], [0], threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            m = BANNER.match(line)
            if m:
                seen[0] = int(m.group(1))
                if seen[0] >= STAGES.index(stage) + 1:
                    reached.set()
        reached.set()   # the output ended: the study finished (or failed)

    def wait(until, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and not until() and time.monotonic() < deadline:
            time.sleep(0.05)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        reached.wait(timeout=1200)
        if progress:
            wait(lambda: _count(data, progress) > before or seen[0] > STAGES.index(stage) + 1, 900)
        delay = rng.uniform(0.0, KILL_WITHIN[progress]) if progress else rng.uniform(0.5, KILL_WITHIN[stage])
        wait(lambda: False, delay)
        finished = proc.poll() is not None
        if not finished:
            os.killpg(proc.pid, signal.SIGKILL)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        proc.wait()
        reader.join(timeout=30)
    out = "".join(lines)
    if finished:
        assert proc.returncode == 0, f"the study failed before its kill in {stage}:\n{out[-4000:]}"
        return subprocess.CompletedProcess(cmd, proc.returncode, out, "")
    return STAGES[max(seen[0], 1) - 1], delay, out


def killed_and_rerun(cmd, env, data: Path, targets, seed: int) -> KilledStudy:
    """Kill the study once at each of `targets` ((stage, progress) in order; each a fresh start of the same
    command, at a seeded random moment of that stage), then run it to the end once more. A start that finished
    before its kill is that last run (rerunning it would only reuse everything again: the demo's second run
    checks that), so the later targets are not tried."""
    rng, result = random.Random(seed), KilledStudy(None, started=time.time())
    for target in targets:
        got = _run_until_killed(cmd, env, data, target, rng)
        if isinstance(got, subprocess.CompletedProcess):
            result.run = got
            return result
        running, delay, out = got
        result.kills.append((target[0], running, round(delay, 1)))
        result.outputs.append(out)
    result.run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    return result


def resumed_study(data: Path, tmp_path: Path, seed: int = 23) -> tuple[Path, KilledStudy]:
    """The quick demo with the local engine from the demo's models only (the warm start is not redone), killed
    -9 at a seeded random point of every stage and rerun each time, then once to the end."""
    new = tmp_path / "data"
    shutil.copytree(data / "models", new / "models")
    env = dict(os.environ, RCEA_DATA=str(new), RCEA_RESULTS=str(tmp_path / "results"))
    env.pop("RCEA_OVERRIDES", None)
    cmd = [str(ROOT / "scripts" / "run"), "demo", "--quick", "--methods", ",".join(METHODS)]
    return new, killed_and_rerun(cmd, env, new, LOCAL_KILLS, seed)


def ray_study(data: Path, tmp_path: Path, seed: int = 7) -> tuple[Path, KilledStudy]:
    """`scripts/run demo --quick --engine ray` on a copy of the demo's models (the warm start is not redone),
    killed -9 at a seeded random point mid-training and again mid-measurement (RAY_KILLS) and rerun each time,
    then once to the end; returns (the copy's data folder, the runs)."""
    ray_data = tmp_path / "data"
    shutil.copytree(data / "models", ray_data / "models")
    # RAY_ADDRESS=local: a Ray of its own, as with nothing running. Without it, Ray joins the cluster named in
    # /tmp/ray/ray_current_cluster, which tests/cluster's three-node cluster writes while it runs (scripts/test
    # runs that area beside this one).
    env = dict(os.environ, RCEA_DATA=str(ray_data), RCEA_RESULTS=str(tmp_path / "results"),
               RCEA_STATE=str(tmp_path / "state.sqlite"), RAY_ADDRESS="local")
    env.pop("RCEA_OVERRIDES", None)
    cmd = [str(ROOT / "scripts" / "run"), "demo", "--quick", "--methods", ",".join(METHODS), "--engine", "ray"]
    return ray_data, killed_and_rerun(cmd, env, ray_data, RAY_KILLS, seed)


def rehearsal_overrides() -> list[str]:
    """The 3b scale with what a CPU can run in its place (see test_rehearsal.py's docstring). The judge and
    codebook keep the configuration's endpoint (the judge service, http://judge:8000/v1) and model names."""
    tiny = tomllib.loads((ROOT / "configs" / "scales" / "tiny.toml").read_text())
    out = [f"{section}.{key}={toml_value(v)}" for section, table in tiny.items() for key, v in table.items()
           if section != "launch"]   # its settings, not where its units run (3b's [launch]: Compose)
    return out + [
        "train.max_steps=4", "train.save_steps=2", "train.per_device_batch=16",
        f"eval.benchmarks={toml_value(['toy', *BENCHMARKS])}", "eval.questions_per_benchmark=2",
        # K = 8 samples per probe question (the tiny scale's): enough valid successes per question for mode
        # retention (m_min = 3) and both outcomes per question for the paired ratios
        "probe.composition={ toy = 12 }", "probe.n_questions=12", "probe.k=8", "passk.questions=6", "passk.n=4",
        "aggregate.bootstrap_resamples=200", "judge.labeller=llm",
        # the codebook on the judge service, said explicitly (it then serves codebook.model too: infer/judge_server.py)
        'codebook.base_url="http://judge:8000/v1"']


CPU_FILES = "compose.yaml:compose.cpu.yaml"
JUDGE_WEIGHTS = "/workspace/data/models/tiny-toy-warm"   # the tiny policy, served under the configured names


# Run in an infer-cli container (the project's network): what the judge service lists at /v1/models, and how
# the project's own LLM client fares with each configured name and with one the server does not serve.
ENDPOINT_CHECK = """
import json, tempfile, urllib.request
from rcea.config import load_config
from infer.llm import LLMClient, LLMFailure, LLMSettings, Request
cfg = load_config("3b")
listed = json.load(urllib.request.urlopen(cfg["judge.base_url"] + "/models", timeout=30))
out = {"listed": sorted(m["id"] for m in listed["data"]), "asked": {}}
for section, model in (("judge", None), ("codebook", None), ("codebook", "Not/Served")):
    s = LLMSettings.from_config(cfg, section, model=model, progress=False, max_retries=0)
    try:   # a name the server does not serve is a permanent failure (HTTP 404): LLMFailure names it
        r = LLMClient(s, tempfile.mkdtemp())._call(Request([{"role": "user", "content": "1+1"}], {**s.params(), "max_tokens": 2}))
        out["asked"][s.model] = r.error or "ok"
    except LLMFailure as exc:
        out["asked"][s.model] = str(exc)
print("ENDPOINTS " + json.dumps(out))
"""


@dataclass
class Rehearsal:
    run: subprocess.CompletedProcess
    project: str                  # the Compose project
    containers: list[dict]        # `docker inspect` of every container the project left (workers, judge, group)
    events: list[dict]            # the daemon's container start events of the project (one-off runs included)
    judge_log: str                # the judge server's output
    endpoints: dict               # ENDPOINT_CHECK's answer, asked before the study (which then reuses the server)
    results: Path                 # RCEA_RESULTS on the host
    volume: Path                  # the data folder every container mounted (the host's, as `host`)
    seconds: float                # wall time of the study
    host: Path                    # the driver's folder on this host (RCEA_DATA: data lock, unit logs, state/)
    started: float                # time.time() at the study's start
    killed: dict = field(default_factory=dict)   # the training container killed once (kill_first_training)


def kill_first_training(env: dict, project: str, done: threading.Event) -> dict:
    """`docker kill` (SIGKILL) the study's train container once it has a complete checkpoint: the study's
    engine must retry the unit, which resumes from that checkpoint. {} if training ended first. The checkpoint is
    looked for in the host's data folder, which every container mounts (one view of the data): polling it through
    `docker exec` cost the Docker daemon, containerd and runc about 10 CPU-s over a rehearsal."""
    label = f"label=com.docker.compose.project={project}"
    pattern = "train/3b/grpo/checkpoints/checkpoint-*/rcea_trainer_state.pt.manifest.json"
    host = Path(env["RCEA_DATA"])
    while not done.is_set():
        found = sorted(str(p.relative_to(host)) for p in host.glob(pattern))
        if found:
            ids = docker("ps", "-q", "--filter", label, "--filter", "label=com.docker.compose.service=train",
                         env=env, check=False).stdout.split()
            if ids:
                kill = docker("kill", ids[0], env=env, check=False)
                return {"container": ids[0], "checkpoints": found, "rc": kill.returncode}
        time.sleep(0.5)
    return {}


def docker(*args, env=None, timeout=600, check=True, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(["docker", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert out.returncode == 0, f"docker {' '.join(args)}: {out.stdout[-3000:]}{out.stderr[-3000:]}"
    return out


def engine() -> None:
    """scripts/engine (Docker Engine, Compose, the local bases), then `invoke build --cpu` (the CPU images of this
    tree; Docker's layer cache keeps the lockfile layers, so a code change rebuilds only the copies)."""
    if os.environ.get("RCEA_NO_ENGINE"):   # scripts/test's opt-out on a host that cannot have an engine
        import pytest
        pytest.skip("RCEA_NO_ENGINE is set: no Docker engine or images (the rehearsal needs scripts/engine)")
    for argv in ([str(ROOT / "scripts" / "engine")], [str(ROOT / "scripts" / "run"), "build", "--cpu"]):
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def rehearsal_env(project: str, results: Path, host: Path | None = None) -> dict:
    """`host`: the study's data folder on this host (RCEA_DATA), which compose.yaml bind-mounts into every
    container at /workspace/data (one view of the data), so the rehearsal writes nothing into the checkout's
    ./data."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_") and k not in (
        "RCEA_DATA", "RCEA_STATE", "RCEA_LEDGER", "RCEA_OVERRIDES", "RCEA_SCALE", "NUM_WORKERS", "JUDGE_MODEL", "JUDGE_ARGS",
        "UID", "GID") and not k.startswith("INFER_GPU")}
    own = {"RCEA_DATA": str(host)} if host else {}
    return dict(env, COMPOSE_FILE=CPU_FILES, COMPOSE_PROJECT_NAME=project, RCEA_RESULTS=str(results),
                JUDGE_MODEL=JUDGE_WEIGHTS, UID="1000", GID="1000", **own)   # what Invoke writes into .env for root


def seed_models(models: Path, host: Path) -> None:
    """The demo's tiny models into the host's data folder, as a model cache would be on a GPU host (the study
    gives what root made there to the containers' user)."""
    shutil.copytree(models, host / "models", dirs_exist_ok=True)


def rehearsal_study(models: Path, tmp_path: Path, extra_overrides=()) -> Rehearsal:
    """`invoke study --scale 3b` through the real `docker compose` with compose.yaml and compose.cpu.yaml, with
    `models` copied into the data folder as the model cache. Everything the project made is removed after."""
    import time

    engine()
    project, results, host = f"rcea-rehearsal-{os.getpid()}", tmp_path / "results", tmp_path / "host"
    env = rehearsal_env(project, results, host)
    results.mkdir()
    os.chown(results, 1000, 1000)   # the aggregate container (uid 1000) writes results/3b there
    overrides = [*rehearsal_overrides(), *extra_overrides]
    cmd = [str(ROOT / "scripts" / "run"), "study", "--scale", "3b", "--methods", "grpo", "--num-workers", "2"]
    for o in overrides:
        cmd += ["--override", o]
    log_out, log_err, log_events = tmp_path / "study.out", tmp_path / "study.err", tmp_path / "events.jsonl"
    # the daemon's container starts of this project as they happen (`--since` replays only its last 256 events)
    with log_events.open("w") as fev:
        watch = subprocess.Popen(["docker", "events", "--format", "{{json .}}", "--filter", "type=container",
                                  "--filter", "event=start", "--filter", f"label=com.docker.compose.project={project}"],
                                 stdout=fev, stderr=subprocess.DEVNULL)
    try:
        seed_models(models, host)
        t0, started = time.monotonic(), time.time()
        # The judge server first, with the study's settings (the study's `up --wait judge` then finds it running
        # and healthy), so the endpoint check costs no second start; it starts while the study trains.
        study_env = dict(env, RCEA_SCALE="3b", RCEA_OVERRIDES=";".join(overrides))
        judge = subprocess.Popen(["docker", "compose", "--profile", "judge", "up", "-d", "--wait", "judge"], cwd=ROOT,
                                 env=study_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with log_out.open("w") as fo, log_err.open("w") as fe:
            study = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fo, stderr=fe, text=True)
        trained, killed = threading.Event(), {}
        killer = threading.Thread(target=lambda: killed.update(kill_first_training(env, project, trained)))
        killer.start()
        judge_up = judge.communicate(timeout=1800)[0]
        check = docker("compose", "run", "--rm", "--no-deps", "-T", "infer-cli", "python", "-c", ENDPOINT_CHECK,
                       env=study_env, check=False)
        line = [ln for ln in check.stdout.splitlines() if ln.startswith("ENDPOINTS ")]
        endpoints = json.loads(line[0].split(" ", 1)[1]) if line else {"error": judge_up + check.stdout + check.stderr}
        study.wait(timeout=1800)
        trained.set()
        killer.join(timeout=120)
        run = subprocess.CompletedProcess(cmd, study.returncode, log_out.read_text(), log_err.read_text())
        took = time.monotonic() - t0
        ids = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={project}").stdout.split()
        containers = json.loads(docker("inspect", *ids).stdout) if ids else []
        watch.terminate()
        watch.wait(timeout=60)
        events = [json.loads(ln) for ln in log_events.read_text().splitlines() if ln.strip()]
        judge_log = docker("compose", "logs", "--no-color", "judge", env=env, check=False).stdout
    finally:  # nothing of the project stays: containers, network, the cache volume
        watch.kill()
        docker("compose", "--profile", "*", "down", "--volumes", "--remove-orphans", env=env, check=False, timeout=300)
    return Rehearsal(run, project, containers, events, judge_log, endpoints, results, host, took, host, started,
                     killed)
