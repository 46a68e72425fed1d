"""How lockfiles/*.txt are compiled (uv 0.13.9, run from inside lockfiles/) and the CPU twins' constraints."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from invoke.exceptions import Exit

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
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)==([^\s;\\]+)", re.M)


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
    return {re.sub(r"[-_.]+", "-", n).lower(): v for n, v in PIN.findall(lock_text)}


def constraints_text(gpu_lock_text: str) -> str:
    """The CPU twin's constraints: every pin of the GPU lock except torch, triton and CUDA wheels."""
    lines = [f"{n}=={v}" for n, v in PIN.findall(gpu_lock_text) if not GPU_ONLY.match(n)]
    return "\n".join(lines) + "\n"


def find_links() -> list[str]:
    """The CPU torch wheel directories: $RCEA_FIND_LINKS, else pip's global.find-links."""
    raw = os.environ.get("RCEA_FIND_LINKS")
    if raw is None:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                             capture_output=True, text=True)
        raw = out.stdout if out.returncode == 0 else ""
    return raw.split()
