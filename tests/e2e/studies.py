"""The two studies that only read the quick demo's folder, run as `scripts/run` subprocesses.

`conftest.py` starts both together in threads as soon as the demo is done (each is a few minutes of
mostly single-threaded work, so side by side they share the two cores); `test_demo_ray.py` and
`test_rehearsal.py` check what each left. Not collected (the name is not test_*.py).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("grpo", "kl_cov")  # what the session fixture `demo` (conftest.py) trains
BENCHMARKS = ("amc23", "aime24", "aime25", "math500", "minerva_math")


def ray_study(data: Path, tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """`scripts/run demo --quick --engine ray` on a copy of the demo's model, training pool and training runs
    (its measurements, labels and results are not copied); returns (the copy's data folder, the run)."""
    ray_data = tmp_path / "data"
    shutil.copytree(data, ray_data, ignore=lambda d, names: [n for n in names if Path(d) == data and
                                                               n in ("infer", "results", "logs")])
    # RAY_ADDRESS=local: a Ray of its own, as with nothing running. Without it, Ray joins the cluster named in
    # /tmp/ray/ray_current_cluster, which tests/cluster's three-node cluster writes while it runs (scripts/test
    # runs that area beside this one).
    env = dict(os.environ, RCEA_DATA=str(ray_data), RCEA_RESULTS=str(tmp_path / "results"),
               RCEA_LEDGER=str(tmp_path / "ledger.sqlite"), RAY_ADDRESS="local")
    env.pop("RCEA_OVERRIDES", None)
    run = subprocess.run([str(ROOT / "scripts" / "run"), "demo", "--quick", "--methods", ",".join(METHODS),
                          "--engine", "ray"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    return ray_data, run


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v) if isinstance(v, str) else repr(v)


def rehearsal_overrides(port: int) -> list[str]:
    """The 3b scale with what a CPU can run in its place (see test_rehearsal.py's docstring)."""
    tiny = tomllib.loads((ROOT / "configs" / "scales" / "tiny.toml").read_text())
    out = [f"{section}.{key}={toml_value(v)}" for section, table in tiny.items() for key, v in table.items()]
    url = f"http://127.0.0.1:{port}/v1"  # the judge service's port 8000, moved to a free host port
    return out + [
        "train.max_steps=4", "train.save_steps=2", "train.per_device_batch=16",
        f"eval.benchmarks={toml_value(['toy', *BENCHMARKS])}", "eval.questions_per_benchmark=2",
        # K = 8 samples per probe question (the tiny scale's): enough valid successes per question for mode
        # retention (m_min = 3) and both outcomes per question for the paired ratios
        "probe.composition={ toy = 12 }", "probe.n_questions=12", "probe.k=8", "passk.questions=6", "passk.n=4",
        "aggregate.bootstrap_resamples=200",
        "judge.labeller=llm", f"judge.base_url={json.dumps(url)}", f"codebook.base_url={json.dumps(url)}",
        "judge.model=scripted", "codebook.model=scripted"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Rehearsal:
    run: subprocess.CompletedProcess
    pids: list[str]   # pid files the study left behind (its judge server must be stopped)
    state: Path       # the docker double's state folder
    results: Path     # RCEA_RESULTS on the host
    volume: Path      # the data volume


def rehearsal_study(models: Path, tmp_path: Path, extra_overrides=()) -> Rehearsal:
    """`invoke study --scale 3b` through compose.yaml and the docker double, with `models` as the model cache."""
    state, results = tmp_path / "docker", tmp_path / "results"
    volume = state / "volumes" / "rcea_data"
    shutil.copytree(models, volume / "models")  # the model cache
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_") and k not in (
        "RCEA_DATA", "RCEA_OVERRIDES", "RCEA_SCALE", "NUM_WORKERS")}  # the study decides these
    env.update(PATH=f"{ROOT}/tests/deploy/fake_docker{os.pathsep}{env['PATH']}", FAKE_DOCKER_STATE=str(state),
               FAKE_DOCKER_STANDINS=str(ROOT / "tests" / "deploy" / "fake_docker" / "standins"),
               FAKE_DOCKER_PORTS=f"8000={port}", RCEA_RESULTS=str(results))
    cmd = [str(ROOT / "scripts" / "run"), "study", "--scale", "3b", "--methods", "grpo", "--num-workers", "2"]
    for o in [*rehearsal_overrides(port), *extra_overrides]:
        cmd += ["--override", o]
    try:
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        pids = sorted(p.name for p in (state / "pids").glob("*.pid"))  # what the study left running
    finally:  # a failed study must not leave the judge server behind
        subprocess.run(["docker", "compose", "down"], cwd=ROOT, env=env, capture_output=True, timeout=120)
    return Rehearsal(run, pids, state, results, volume)
