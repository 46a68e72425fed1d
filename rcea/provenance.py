"""Where an artifact came from: git commit, lockfile hash, library versions, device."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from functools import lru_cache
from importlib import metadata

from rcea.paths import project_root

LIBRARIES = ("torch", "transformers", "peft", "trl", "vllm", "datasets", "numpy", "pandas", "scipy",
             "pyarrow", "scikit-learn", "math-verify", "openai")


@lru_cache(maxsize=1)
def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project_root(), capture_output=True,
                             text=True, timeout=5)
        commit = out.stdout.strip()
        if not commit:   # not a checkout (an image has no .git): the commit baked in at build time
            return os.environ.get("RCEA_GIT_COMMIT", "unknown")
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=project_root(),
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("RCEA_GIT_COMMIT", "unknown")


def role() -> str:
    """The role of this environment: RCEA_ROLE, else the virtualenv's folder name."""
    return os.environ.get("RCEA_ROLE") or os.path.basename(sys.prefix)


@lru_cache(maxsize=1)
def lockfile_hash() -> str:
    baked = os.path.join(sys.prefix, "rcea-lockfile.txt")   # written by the image build (docker/*.Dockerfile)
    if os.path.exists(baked):
        with open(baked) as fh:
            return fh.read().strip() or "unknown"
    r = role()
    for name in (f"{r}-cpu.txt", f"{r}.txt"):
        path = project_root() / "lockfiles" / name
        if path.exists():
            return f"{name}:sha256:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    return "unknown"


def library_versions() -> dict[str, str]:
    out = {}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    return out


def device() -> str:
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            return f"cuda:{torch.cuda.get_device_name(0)}"
    return f"cpu:{platform.machine()}:{os.cpu_count()}"


def provenance() -> dict:
    from rcea.hub import resolved

    return {
        "git_commit": git_commit(),
        "lockfile": lockfile_hash(),
        "libraries": library_versions(),
        "device": device(),
        "hub_revisions": resolved(),   # {model|train_pool|judge: "repo@commit"} loaded by this process
        "python": platform.python_version(),
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
