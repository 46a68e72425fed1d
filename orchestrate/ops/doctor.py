"""`invoke doctor`: the preflight of a GPU host (Docker, driver, GPU count, /dev/shm, disk, volumes, and the
LLM endpoints of a study at --scale: each must list its configured model).

`gather_facts` probes the host; `evaluate` turns the facts into checks, each failing one with its fix (pure,
so it is unit-tested in tests/deploy/test_doctor.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from orchestrate.ops.commands import MAX_WORKERS
from invoke.exceptions import Exit

from orchestrate.ops.shell import ROOT, _probe, compose_available, engine_available

@dataclass
class Check:
    name: str
    level: str  # ok | warn (this machine cannot run real scales) | fail (present but broken) | skip (not checked)
    detail: str
    fix: str = ""


DRIVER_FLOOR = {"train": 525, "infer": 580}  # CUDA 12.8 (minor-version compat) / CUDA 13.x
HELP = {"strict": "exit non-zero also when Docker or a GPU is missing (readiness for 3b/7b)",
        "num-workers": f"workers you plan to start (default $NUM_WORKERS or {MAX_WORKERS})",
        "min-disk-gb": "free disk wanted at the project root, GiB",
        "ray-address": "a Ray head HOST:PORT to check it is reachable (invoke study --engine ray)",
        "scale": "whose LLM endpoints (judge, codebook) to ask for their models (default 3b)"}   # invoke doctor's
TINY_DISK_GB = 5  # the CPU environments and tiny runs; images, 3B/7B weights and checkpoints want ~100


def gather_facts(path: Path = ROOT) -> dict:
    """Probe the host: Docker, nvidia-smi, /dev/shm, disk. Side-effect free."""
    facts = {"compose": compose_available(), "engine": engine_available(), "gpus": None}
    facts["buildkit"] = _buildkit() if facts["engine"] else None
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


def _buildkit() -> bool:
    """A client here builds with BuildKit (what the Dockerfiles' secret and bind mounts need)."""
    from orchestrate.ops.images import buildkit_client
    try:
        buildkit_client()
        return True
    except Exit:
        return False


def evaluate(facts: dict, num_workers: int = MAX_WORKERS, min_disk_gb: int = 100,
             volumes_ok: bool | None = None) -> list[Check]:
    """Turn host facts into checks, each failing one with its fix. Pure, so it is unit-tested."""
    checks = []
    if facts["compose"] and facts["engine"]:
        checks.append(Check("docker", "ok", "engine and compose plugin present"))
    else:
        missing = "compose plugin" if facts["engine"] else "Docker engine"
        checks.append(Check("docker", "warn", f"no {missing}: 3b/7b tasks cannot run here",
                            "scripts/engine (or `invoke engine`) installs and starts what is missing (Debian's "
                            "docker.io, Compose v2, dockerd); here the tiny scale runs without (invoke demo)"))
    if facts.get("buildkit") is False:
        checks.append(Check("image builds", "warn", "no Docker client here builds with BuildKit",
                            "install the buildx plugin (docker-buildx-plugin), or run scripts/engine "
                            "(Debian's docker.io client has BuildKit built in)"))
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
                                                      " (the containers' view not checked: no Docker engine)"),
                            "" if facts["data_writable"] else "chown -R $(id -u):$(id -g) data"))
    else:
        checks.append(Check("volumes", "ok" if volumes_ok else "fail",
                            "the data folder ($RCEA_DATA, else ./data, bind-mounted at /workspace/data) writable "
                            "by the containers' UID:GID (hf-cache takes the train/infer images' owner when first "
                            "mounted)" + ("" if volumes_ok else " failed"),
                            "" if volumes_ok else "chown -R $(id -u):$(id -g) ${RCEA_DATA:-data}, or rebuild with "
                            "`invoke build` (images take UID/GID from .env)"))
    return checks


# Through the aggregate service, which mounts only the data folder (compose.yaml): probing /cache/hf there
# failed on every host (an unmounted, root-owned folder), measured with the real Compose.
VOLUME_PROBE = ["run", "--rm", "--no-deps", "aggregate", "python", "-c",
                "import os,sys; sys.exit(0 if os.access('/workspace/data', os.W_OK) else 1)"]


def endpoint_checks(scale: str, timeout_s: float = 5.0) -> list[Check]:
    """The LLM endpoints of a `scale` study (rcea.endpoints), each asked for its model at /v1/models: ok when
    listed, else a warning (3b/7b cannot label; tiny does not call them) with the fix. The judge server a
    3b/7b study starts itself is usually not running yet: its names are checked against the configuration,
    and unless a server answers at its URL now, it is reported as not checked (`--`), never as serving."""
    from rcea.config import load_config
    from rcea.endpoints import EndpointError, endpoints, problem, served_models, study_judge

    cfg = load_config(scale)
    judge, out = study_judge(cfg, scale), []
    for ep in endpoints(cfg):
        name = f"{ep.section} endpoint ({scale})"
        found = problem(ep, judge, timeout_s)     # by name for the study's judge server, asked otherwise
        later = judge is not None and ep.base_url.rstrip("/") == judge[0].rstrip("/")
        if not found and later:
            try:
                served_models(ep.base_url, ep.key(), timeout_s)
            except EndpointError as exc:
                out.append(Check(name, "skip", f"not checked: {exc}; the study starts the judge server at its "
                                 f"judge stage (serving {', '.join(map(repr, judge[1]))}) and asks it then"))
                continue
            found = problem(ep, None, timeout_s)   # a server answers there now: ask it
        out.append(Check(name, "warn", found.split(" Fix: ")[0], found.split(" Fix: ")[-1]) if found else
                   Check(name, "ok", f"{ep.base_url} serves {ep.model!r} (asked: /v1/models lists it)"))
    return out


LABEL = {"skip": "--"}   # a check that could not be made here (not a problem: said, never shown as OK)


def run_doctor(num_workers: int, strict: bool = False, min_disk_gb: int = 100, ray_address: str | None = None,
               scale: str = "3b") -> None:
    """Print every check (with its fix); stop with exit 1 on a failure (with `strict`, also on a warning)."""
    from orchestrate.engines.preflight import ray_checks, ray_facts

    facts = gather_facts()
    volumes_ok = _probe(["docker", "compose", *VOLUME_PROBE]) if facts["compose"] and facts["engine"] else None
    checks = evaluate(facts, num_workers, min_disk_gb, volumes_ok)
    checks += [Check(*c) for c in ray_checks(ray_facts(ray_address))]   # Ray's version; the head when given
    try:
        checks += endpoint_checks(scale)
    except ValueError as exc:   # rcea.config.ConfigError: a TOML syntax error, an unknown key (names the file)
        checks.append(Check(f"configuration ({scale})", "fail", str(exc), "fix the file and line it names"))
    for ch in checks:
        print(f"[{LABEL.get(ch.level, ch.level.upper()):4}] {ch.name}: {ch.detail}"
              + (f"\n       fix: {ch.fix}" if ch.fix else ""))
    failed = [ch for ch in checks if ch.level == "fail" or (strict and ch.level == "warn")]
    if failed:
        raise Exit(f"doctor: {len(failed)} problem(s): {', '.join(ch.name for ch in failed)}", code=1)
    print("doctor: ready for 3b/7b" if all(ch.level in ("ok", "skip") for ch in checks)
          else "doctor: fine for the tiny scale (3b/7b need the warnings fixed; see --strict)")
