"""How lockfiles/*.txt are compiled (uv 0.13.9, run from inside lockfiles/) and the CPU twins' constraints."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from invoke.exceptions import Exit

from rcea.ops.shell import ROOT, is_dry, run_all

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


def compile_locks(c, names: list[str]) -> None:
    """`invoke lock`: recompile each lockfile (a CPU twin after writing its GPU lock's constraints)."""
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
