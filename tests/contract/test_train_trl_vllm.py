"""train image (TRL 0.29.0 + vLLM 0.11.0): the colocated engine TRL builds from our GRPOConfig is accepted
by the real vLLM 0.11 classes. (That the GRPOConfig itself validates in TRL: tests/train/test_grpo_config_trl.py.)
Runs where vLLM 0.11 is installed next to the train environment; skipped elsewhere."""

import ast
import dataclasses
import inspect
from importlib import metadata
from pathlib import Path

import pytest

from rcea.config import load_config


@pytest.fixture(scope="module", autouse=True)
def only_in_the_train_contract_env():
    if not metadata.version("vllm").startswith("0.11."):
        pytest.skip("the train image's vLLM is 0.11 (this environment has another)")
    assert metadata.version("trl") == "0.29.0"


@pytest.fixture
def bf16_allowed(monkeypatch):
    """The ONLY patch: Transformers refuses bf16=True without a bf16-capable GPU (training_args checks
    is_torch_bf16_gpu_available); on this CPU-only machine we say the GPU is there. Every other check of
    TrainingArguments and GRPOConfig runs as on the GPU host."""
    import transformers.training_args as ta

    monkeypatch.setattr(ta, "is_torch_bf16_gpu_available", lambda: True)


def _trl_llm_keywords() -> set[str]:
    """The keyword names TRL 0.29.0 passes to vllm.LLM(...) in colocate mode, read from its source."""
    from importlib.util import find_spec

    source = Path(find_spec("trl").submodule_search_locations[0]) / "generation" / "vllm_generation.py"
    tree = ast.parse(source.read_text())   # read, not imported: importing it loads vLLM's whole server stack
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "LLM"]
    assert len(calls) == 1
    return {k.arg for k in calls[0].keywords}


@pytest.mark.parametrize("scale", ["3b", "7b"])
def test_trl_colocated_engine_arguments_are_accepted_by_vllm_011(bf16_allowed, monkeypatch, tmp_path, scale):
    """What TRL passes to LLM(...) (VLLMGeneration.__init__, colocate branch) with this scale's GRPOConfig and a
    model folder of this scale's real shapes, through vLLM 0.11's create_engine_config (what LLM(...) runs
    first: the engine's limits against the model; tests/contract/engine_config.py for the stand-ins)."""
    import torch
    from vllm.engine.arg_utils import EngineArgs

    from rcea.device_check import SHAPES
    from tests.contract.engine_config import engine_config, model_dir
    from train.run import grpo_config

    args = grpo_config(load_config(scale, "grpo"), tmp_path / "run")
    fields = {f.name for f in dataclasses.fields(EngineArgs)}
    assert _trl_llm_keywords() <= fields, _trl_llm_keywords() - fields
    kw = dict(model=str(model_dir(scale, tmp_path)), tensor_parallel_size=args.vllm_tensor_parallel_size,
              gpu_memory_utilization=args.vllm_gpu_memory_utilization, max_model_len=args.vllm_max_model_length,
              max_num_seqs=args.per_device_train_batch_size * args.steps_per_generation,
              enable_sleep_mode=args.vllm_enable_sleep_mode, model_impl=args.vllm_model_impl,
              distributed_executor_backend="external_launcher", seed=0, max_num_batched_tokens=4096,
              logprobs_mode="processed_logprobs", quantization=None)
    assert set(kw) == _trl_llm_keywords()
    vc = engine_config(monkeypatch, **kw)
    hf = vc.model_config.hf_config
    assert (hf.hidden_size, hf.num_hidden_layers, hf.num_attention_heads, hf.vocab_size) == tuple(
        SHAPES[scale][k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    assert vc.model_config.max_model_len == args.vllm_max_model_length >= 204 + args.max_completion_length
    assert vc.model_config.dtype == torch.bfloat16 and vc.scheduler_config.max_num_seqs == kw["max_num_seqs"]
    assert vc.model_config.enable_sleep_mode == args.vllm_enable_sleep_mode


def test_vllm_011_refuses_a_context_longer_than_the_model(monkeypatch, tmp_path):
    """The check above can fail: past the model's positions, create_engine_config refuses (vLLM 0.11's own check)."""
    from tests.contract.engine_config import MAX_POSITIONS, engine_config, model_dir

    with pytest.raises(Exception, match="max_model_len"):
        engine_config(monkeypatch, model=str(model_dir("7b", tmp_path)), max_model_len=MAX_POSITIONS + 1,
                      distributed_executor_backend="external_launcher", seed=0)


def test_trl_sampling_params_are_accepted_by_vllm_011(bf16_allowed, tmp_path):
    from vllm import SamplingParams

    from train.run import grpo_config

    args = grpo_config(load_config("3b", "grpo"), tmp_path)
    sp = SamplingParams(n=1, repetition_penalty=args.repetition_penalty, temperature=args.temperature,
                        top_p=args.top_p, top_k=args.top_k if args.top_k is not None else -1, min_p=0.0,
                        max_tokens=args.max_completion_length, logprobs=0)
    assert sp.max_tokens == 2048 and sp.temperature == 1.0


def test_vllm_011_lora_ranks_match_ours():
    """vLLM 0.11 checks the rank in LoRAConfig.__post_init__ (not a Literal type): probe it."""
    from vllm.config.lora import LoRAConfig

    from rcea.lora_ranks import VLLM_LORA_RANKS

    accepted = []
    for r in (1, 2, 8, 16, 24, 32, 64, 128, 256, 320, 512, 1024):
        try:
            LoRAConfig(max_lora_rank=r)
            accepted.append(r)
        except Exception:
            pass
    assert tuple(accepted) == VLLM_LORA_RANKS["0.11"]
    assert "max_lora_rank" in inspect.signature(LoRAConfig).parameters


def test_vllm_011_sleep_mode_is_what_the_rollout_fix_and_its_stand_in_assume():
    """train/vllm_sync.py and tests/train/vllm_standin.py model vLLM 0.11's sleep mode: `reload_weights`
    re-reads the checkpoint through the model loader, waking an awake engine is a no-op, the worker restores
    its buffers on wake-up, and the offline LLM offers the calls TRL 0.29.0 makes. Read from the sources
    (importing vllm.entrypoints needs packages the contract environment leaves out)."""
    import importlib.util

    root = Path(importlib.util.find_spec("vllm").origin).parent

    def method(rel: str, cls: str, name: str) -> ast.FunctionDef:
        tree = ast.parse((root / rel).read_text())
        klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        return next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)

    reload_src = ast.unparse(method("v1/worker/gpu_model_runner.py", "GPUModelRunner", "reload_weights"))
    assert "get_model_loader(self.load_config)" in reload_src and "load_weights(model" in reload_src
    assert "self.model_runner.reload_weights()" in ast.unparse(method("v1/worker/gpu_worker.py", "Worker",
                                                                      "reload_weights"))
    assert "_sleep_saved_buffers" in ast.unparse(method("v1/worker/gpu_worker.py", "Worker", "wake_up"))
    assert "if not self.is_sleeping:" in ast.unparse(method("executor/executor_base.py", "ExecutorBase", "wake_up"))
    for name in ("sleep", "wake_up", "reset_prefix_cache", "chat", "generate"):
        method("entrypoints/llm.py", "LLM", name)
    rpc = method("entrypoints/llm.py", "LLM", "collective_rpc")
    assert [a.arg for a in rpc.args.args] == ["self", "method", "timeout", "args", "kwargs"]
