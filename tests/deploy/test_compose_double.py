"""The `docker` test double (tests/deploy/fake_docker): it reads a compose file as Compose does, runs each
service as a local process in its role's environment, and refuses what the real CLI refuses."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "tests" / "deploy" / "fake_docker" / "docker"

PROBE = ("import json, os, sys; "
         "open(os.path.join(os.environ['DATA'], 'seen-' + os.environ['NAME'] + '.json'), 'w').write(json.dumps("
         "{'exe': sys.executable, 'cwd': os.getcwd(), 'env': dict(os.environ), 'argv': sys.argv[1:], "
         "'listing': sorted(os.listdir('.'))}))")
COMPOSE = f"""
name: proj
x-env: &env
  DATA: /workspace/data
  SCALE: "${{SCALE_IN:-3b}}"
  RANKLESS: "${{UNSET_VAR-}}"
services:
  a:
    image: rcea/tools:1
    build: {{context: ., dockerfile: D}}
    profiles: [p1]
    working_dir: /workspace
    volumes: [data:/workspace/data]
    environment: {{<<: *env, NAME: a}}
    command: ["python", "-c", {json.dumps(PROBE)}, "/workspace/data/x"]
    deploy: {{resources: {{reservations: {{devices: [{{driver: nvidia, device_ids: ["3"], capabilities: [gpu]}}]}}}}}}
  b:
    image: rcea/tools:1
    profiles: [p2]
    working_dir: /workspace
    volumes: [data:/workspace/data]
    environment: {{<<: *env, NAME: b}}
    command: ["python", "-c", {json.dumps(PROBE)}]
  c:
    image: rcea/tools:1
    profiles: [p3]
    depends_on: {{a: {{condition: service_started}}}}
    command: ["python", "-c", "print('c')"]
volumes:
  data: {{}}
"""


@pytest.fixture
def project(tmp_path):
    proj = tmp_path / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "compose.yaml").write_text(COMPOSE)
    (proj / "D").write_text("FROM scratch\nCOPY lockfiles.txt /tmp/x.txt\nCOPY pkg /workspace/pkg\n")
    return proj


def docker(project: Path, *args, **env):
    full = {**{k: v for k, v in os.environ.items() if k not in ("SCALE_IN", "COMPOSE_PROFILES")},
            "FAKE_DOCKER_STATE": str(project.parent / "state"), **env}
    return subprocess.run([str(DOCKER), *args], cwd=project, env=full, capture_output=True, text=True, timeout=120)


def seen(project: Path, name: str) -> dict:
    return json.loads((project.parent / "state" / "volumes" / "proj_data" / f"seen-{name}.json").read_text())


def test_run_uses_the_role_env_the_service_env_the_image_layout_and_the_volume(project):
    r = docker(project, "compose", "run", "--rm", "a")
    assert r.returncode == 0, r.stderr
    got = seen(project, "a")
    assert got["exe"] == str(ROOT / ".envs" / "tools" / "bin" / "python")
    volume = project.parent / "state" / "volumes" / "proj_data"
    assert got["env"]["DATA"] == str(volume) and got["argv"] == [f"{volume}/x"]  # container paths mapped
    assert got["env"]["SCALE"] == "3b" and got["env"]["RANKLESS"] == ""           # ${X:-default}, ${X-}
    assert got["env"]["NVIDIA_VISIBLE_DEVICES"] == "3"
    assert "HOME" in got["env"] and "FAKE_DOCKER_STATE" not in got["env"]     # only the service's environment
    assert got["listing"] == ["data", "pkg"]  # what the Dockerfile COPYs into /workspace, and the mount
    r = docker(project, "compose", "run", "--rm", "a", SCALE_IN="7b")
    assert r.returncode == 0 and seen(project, "a")["env"]["SCALE"] == "7b"     # the caller's environment wins
    (project / ".env").write_text("SCALE_IN=1.5b\n")
    assert docker(project, "compose", "run", "--rm", "a").returncode == 0
    assert seen(project, "a")["env"]["SCALE"] == "1.5b"                          # then .env
    starts = [json.loads(ln) for ln in (project.parent / "state" / "starts.jsonl").read_text().splitlines()]
    assert [(s["service"], s["env"]["SCALE"], s["devices"]) for s in starts] == [
        ("a", "3b", "3"), ("a", "7b", "3"), ("a", "1.5b", "3")]


def test_attached_up_runs_every_named_service(project):
    r = docker(project, "compose", "--profile", "p1", "up", "a", "b")
    assert r.returncode == 0, r.stderr
    assert seen(project, "a")["env"]["NAME"] == "a" and seen(project, "b")["env"]["NAME"] == "b"
    assert "a exited with code 0" in r.stdout and "b exited with code 0" in r.stdout


@pytest.mark.parametrize("args,message", [
    (("compose", "frobnicate"), 'unknown docker command: "compose frobnicate"'),
    (("compose", "run", "--rm", "nosuch"), "no such service: nosuch"),
    (("compose", "up", "nosuch"), "no such service: nosuch"),
    (("compose", "run", "--bogus", "a"), "unknown flag: --bogus"),
    (("compose", "up", "c"), 'service "a" was pulled in as dependency of service "c" but is not enabled'),
    (("swarm", "init"), "is not a docker command"),
])
def test_refuses_what_the_real_cli_refuses(project, args, message):
    r = docker(project, *args)
    assert r.returncode == 1 and message in r.stderr
    assert not (project.parent / "state" / "starts.jsonl").exists()  # nothing started


def test_a_dependency_runs_once_its_profile_is_enabled(project):
    r = docker(project, "compose", "--profile", "p1", "up", "c")
    assert r.returncode == 0, r.stderr
    assert seen(project, "a")["env"]["NAME"] == "a"


def test_required_variable_stops_the_whole_file(project):
    (project / "compose.yaml").write_text(COMPOSE.replace("${SCALE_IN:-3b}", "${SCALE_IN:?set the scale}"))
    r = docker(project, "compose", "run", "--rm", "b")
    assert r.returncode == 1 and "required variable SCALE_IN is missing a value: set the scale" in r.stderr


def test_the_project_workers_refuse_to_run_without_a_scale(tmp_path):
    """compose.yaml gives the workers no scale default: started bare, a worker says so and exits 2."""
    env = {k: v for k, v in os.environ.items() if k not in ("RCEA_SCALE", "NUM_WORKERS")}
    env["FAKE_DOCKER_STATE"] = str(tmp_path / "state")
    r = subprocess.run([str(DOCKER), "compose", "--profile", "infer", "up", "infer-worker-1"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "infer-worker-1 exited with code 2" in r.stdout and "needs a scale" in r.stdout
    (start,) = [json.loads(ln) for ln in (tmp_path / "state" / "starts.jsonl").read_text().splitlines()]
    assert start["env"]["WORKER_RANK"] == "1" and start["env"]["RCEA_SCALE"] == "" and start["devices"] == "1"
    assert start["env"]["RCEA_DATA"] == "/workspace/data" and start["role"] == "infer"
    assert not list((tmp_path / "state" / "volumes").rglob("queue.sqlite"))
