"""compose.yaml: schema-valid, eight distinct single-GPU workers, shared volumes, images built from docker/."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

import tasks
from orchestrate.ops import commands

ROOT = Path(tasks.__file__).resolve().parent
WORKERS = [f"infer-worker-{i}" for i in range(8)]
SCHEMA = Path(__file__).resolve().parent / "compose-spec.json"  # vendored; source and digest: README.md here


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def services(compose):
    return compose["services"]


def gpu_requests(svc) -> list[dict]:
    devices = svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    return [d for d in devices if "gpu" in d.get("capabilities", [])]


def schema_errors(doc) -> list[str]:
    assert SCHEMA.is_file(), f"the vendored Compose schema {SCHEMA} is missing; restore it from git"
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_vendored_schema_is_the_documented_revision():
    digest = hashlib.sha256(SCHEMA.read_bytes()).hexdigest()
    assert f"`{digest}`" in (SCHEMA.parent / "README.md").read_text(), "schema changed without its note"


def test_compose_validates_against_the_pinned_schema(compose):
    assert schema_errors(compose) == []


def test_the_schema_check_catches_a_typo(compose):
    broken = json.loads(json.dumps(compose))
    broken["services"]["train"]["shm-size"] = "16g"  # the real key is shm_size
    assert any("shm-size" in e for e in schema_errors(broken))


def test_eight_distinct_single_gpu_workers(services):
    assert [s for s in services if s.startswith("infer-worker-")] == WORKERS
    ids = []
    for name in WORKERS:
        reqs = gpu_requests(services[name])
        assert len(reqs) == 1 and len(reqs[0]["device_ids"]) == 1, f"{name} must reserve exactly one GPU"
        ids.append(reqs[0]["device_ids"][0])
        assert services[name]["environment"]["WORKER_RANK"] == name.rsplit("-", 1)[1]
        assert services[name]["environment"]["NUM_WORKERS"] == "${NUM_WORKERS:-8}"
        assert "CUDA_VISIBLE_DEVICES" not in services[name]["environment"], "hides the device in the container"
        assert "replicas" not in services[name].get("deploy", {}), "replicas would all share one GPU"
    assert ids == [f"${{INFER_GPU_{i}:-{i}}}" for i in range(8)]   # worker k on GPU k unless a study moves it


def test_no_device_request_has_both_count_and_device_ids(services):
    for name, svc in services.items():
        for req in gpu_requests(svc):
            assert ("count" in req) != ("device_ids" in req), f"{name}: set exactly one of count, device_ids"
            assert req["driver"] == "nvidia"


def test_train_and_judge_get_one_gpu_each(services):
    for name in ("train", "judge", "infer-gpu-check"):
        (req,) = gpu_requests(services[name])
        assert len(req["device_ids"]) == 1


def test_the_workers_group_brings_num_workers_workers_and_follows_the_queue(compose, services):
    """`docker compose up infer-workers`: workers 0..NUM_WORKERS-1 (worker k in the profiles workers-N, N > k;
    the group in workers-$NUM_WORKERS; what Compose makes of it: test_compose_cli.py), then a follower of the
    queue; no silent scale default (a worker refuses an empty one)."""
    group = services["infer-workers"]
    assert group["profiles"] == ["workers-${NUM_WORKERS:-8}"] and not gpu_requests(group)
    assert group["depends_on"] == {w: {"condition": "service_started", **({"required": False} if i else {})}
                                   for i, w in enumerate(WORKERS)}
    for k, name in enumerate(WORKERS):
        assert services[name]["profiles"] == [f"workers-{n}" for n in range(k + 1, 9)], name
    assert group["command"][:4] == ["python", "-m", "infer", "status"] and "--follow" in group["command"]
    assert group["environment"]["NUM_WORKERS"] == "${NUM_WORKERS:-8}"
    assert [n for n, svc in services.items() if svc.get("depends_on")] == ["infer-workers"]
    assert "RCEA_SCALE:-3b" not in (ROOT / "compose.yaml").read_text()
    for name in [*WORKERS, "infer-workers"]:
        assert services[name]["environment"]["RCEA_SCALE"] == "${RCEA_SCALE:-}"
        assert "--scale" not in services[name]["command"]


def test_overrides_reach_every_container_and_results_reach_the_host(services):
    for name, svc in services.items():
        if name != "judge":
            assert svc["environment"]["RCEA_OVERRIDES"] == "${RCEA_OVERRIDES:-}", name
    assert "${RCEA_RESULTS:-./results}:/workspace/results" in services["aggregate"]["volumes"]


def test_bare_up_starts_nothing(services):
    """Every service sits in a profile, so `docker compose up` alone starts nothing heavy."""
    assert [n for n, s in services.items() if not s.get("profiles")] == []


def test_gpu_services_share_memory_and_memlock(services):
    for name, svc in services.items():
        if gpu_requests(svc):
            assert svc["ipc"] == "host", name
            assert svc["ulimits"]["memlock"] == -1, name


def test_every_service_bind_mounts_the_hosts_data_folder_and_shares_the_model_cache(compose, services):
    """One view of the data (issue 39): no named data volume; every service mounts the host's $RCEA_DATA (./data)
    at /workspace/data, so the driver on the host sees what each container writes."""
    assert "data" not in compose["volumes"] and "hf-cache" in compose["volumes"]
    for name, svc in services.items():
        mounts = dict(v.rsplit(":", 1) for v in svc["volumes"])
        data = [src for src, dst in mounts.items() if dst == "/workspace/data"]
        # Ray nodes span hosts: each names the folder every host shares, its RCEA_DATA unless told otherwise
        assert data == [RAY_DATA if name.startswith("ray-") else DATA], name
        assert not [d for d in mounts.values() if d.startswith("/workspace/data/")], name   # one mount, no nesting
        if name != "aggregate":
            assert mounts.get("hf-cache") == "/cache/hf", name
            assert svc["environment"]["HF_HOME"] == "/cache/hf", name
        assert svc["environment"]["RCEA_DATA"] == "/workspace/data" and svc["working_dir"] == "/workspace", name


def test_every_image_is_built_from_docker_dir(services):
    built = {}
    for name, svc in services.items():
        if "build" in svc:
            dockerfile = svc["build"]["dockerfile"]
            assert dockerfile.startswith("docker/") and (ROOT / dockerfile).is_file(), f"{name}: {dockerfile}"
            assert svc["build"]["context"] == "."
            built[svc["image"]] = dockerfile
    assert sorted(built.values()) == ["docker/aggregate.Dockerfile", "docker/infer.Dockerfile",
                                      "docker/train.Dockerfile"]
    for name, svc in services.items():
        assert svc["image"] in built, f"{name} uses {svc['image']}, which no service builds from docker/"
        assert not re.search(r":latest$", svc["image"])


DATA = "${RCEA_DATA:-./data}"
RAY_DATA = "${RCEA_CLUSTER_DATA:-${RCEA_DATA:-./data}}"


def test_ray_cluster_services(services):
    ray = {n: s for n, s in services.items() if n.startswith("ray-")}
    assert sorted(ray) == ["ray-head", "ray-infer-node", "ray-train-node"]
    for name, svc in ray.items():
        assert svc["profiles"] == ["ray"] and svc["network_mode"] == "host" and svc["ipc"] == "host", name
        assert svc["command"][:2] == ["ray", "start"] and svc["command"][-1] == "--block", name
    assert "--head" in ray["ray-head"]["command"] and "--num-gpus=0" in ray["ray-head"]["command"]
    assert not gpu_requests(ray["ray-head"])
    for name, role, image in (("ray-train-node", "train", "rcea/train"), ("ray-infer-node", "infer", "rcea/infer")):
        svc, gpus = ray[name], "${RAY_%s_GPUS:-%d}" % (role.upper(), 1 if role == "train" else 8)
        assert svc["image"].startswith(image + ":")   # the image whose environment runs the role's units
        assert f"--num-gpus={gpus}" in svc["command"]
        assert f'--resources={{"{role}": {gpus}}}' in svc["command"]
        assert any(a.startswith("--address=") for a in svc["command"]) and gpu_requests(svc)


def test_services_run_as_the_host_user_never_root(services):
    for name, svc in services.items():
        assert svc["user"] == "${UID:-1000}:${GID:-1000}", name
    for name, svc in services.items():
        if "build" in svc:
            extra = {"WITH_WANDB": "${WITH_WANDB:-0}"} if name == "train" else {}  # the optional W&B extra
            assert svc["build"]["args"] == {"APP_UID": "${UID:-1000}", "APP_GID": "${GID:-1000}",
                                            "RCEA_GIT_COMMIT": "${RCEA_GIT_COMMIT:-unknown}", **extra}


def test_judge_serves_vllm_with_a_health_check(services):
    """The judge service starts vLLM's server through infer.judge_server (which reads the configuration for the
    names, revision and seed: tests/infer/test_judge_server.py); its port 8000 stays on the project's network."""
    judge = services["judge"]
    assert judge["command"] == ["python", "-m", "infer.judge_server"]
    assert judge["environment"]["RCEA_SCALE"] == "${RCEA_SCALE:-}"
    assert "ports" not in judge and judge["expose"] == ["8000"]
    check = " ".join(judge["healthcheck"]["test"])
    assert "localhost:8000/health" in check


def test_the_infer_device_check_has_a_gpu(services):
    (req,) = gpu_requests(services["infer-gpu-check"])
    assert req["device_ids"] == ["${INFER_GPU:-0}"]
    assert services["infer-gpu-check"]["command"] == ["python", "-m", "infer.gpu_check"]
    assert not gpu_requests(services["infer-cli"])  # why README runs the check in infer-gpu-check


def test_the_readme_runs_the_train_device_check_in_a_service_of_the_train_image_with_one_gpu(services):
    """README's `docker compose run --rm <service> python -m train.gpu_check` names a service that reserves a GPU
    and runs the train image (vLLM 0.11, TRL 0.29.0, bitsandbytes: what the check drives)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (name,) = re.findall(r"^docker compose run --rm (\S+) python -m train\.gpu_check\b", readme, re.M)
    (req,) = gpu_requests(services[name])
    assert req["device_ids"] == ["${TRAIN_GPU:-0}"] and services[name]["image"].startswith("rcea/train:")


def test_both_llm_keys_pass_into_infer_cli(services):
    """The judge and codebook clients run in infer-cli; each key passes through from the host."""
    env = services["infer-cli"]["environment"]
    assert env["RCEA_JUDGE_API_KEY"] == "${RCEA_JUDGE_API_KEY:-}"
    assert env["RCEA_CODEBOOK_API_KEY"] == "${RCEA_CODEBOOK_API_KEY:-}"


def test_no_secret_value_is_written_into_compose(services):
    for name, svc in services.items():
        for key, value in (svc.get("environment") or {}).items():
            if re.search(r"(TOKEN|KEY|SECRET|PASSWORD)$", key):
                assert re.fullmatch(r"\$\{[A-Z_]+:-\}", value), f"{name}.{key} must pass through from the host"


def test_invoke_names_only_services_that_exist(services):
    names = set(commands.SERVICE_OF.values()) | set(commands.BUILD_SERVICES.values())
    names |= set(commands.worker_services(commands.MAX_WORKERS)) | {"judge", commands.WORKERS_GROUP}
    assert names <= set(services)
