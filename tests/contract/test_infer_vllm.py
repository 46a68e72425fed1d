"""infer image (vLLM 0.23.0): every argument the vLLM backend builds is accepted by the real classes."""

import dataclasses
from importlib import metadata
from typing import get_args

import pytest

ROLE = "infer"


@pytest.fixture(scope="module", autouse=True)
def only_in_the_infer_contract_env():
    if not metadata.version("vllm").startswith("0.23."):
        pytest.skip("the infer image's vLLM is 0.23 (this environment has another)")


@pytest.fixture(autouse=True)
def cumem_as_on_a_gpu_host(monkeypatch):
    """Sleep mode needs vLLM's cumem allocator, an extension the wheel ships (vllm/cumem_allocator.abi3.so) that
    loads libcuda, absent here: on a GPU host it loads. The wheel's file is checked, its loading stood in."""
    from importlib.util import find_spec
    from pathlib import Path

    from vllm.platforms.interface import Platform

    assert list(Path(find_spec("vllm").submodule_search_locations[0]).glob("cumem_allocator*.so"))
    monkeypatch.setattr(Platform, "is_cumem_allocator_available", lambda self: True)


def _worker_engine_kwargs():
    """What infer.worker builds for the 3b and 7b scales, through the backend's own function."""
    from infer.backends.vllm_args import engine_kwargs
    from rcea.config import load_config
    from rcea.lora_ranks import max_lora_rank

    out = []
    for scale in ("3b", "7b"):
        cfg = load_config(scale)
        out.append(engine_kwargs(cfg["model.name"], max_lora_rank(cfg["train.lora_rank"]),
                                 max_model_len=2048 + cfg["eval.max_new_tokens"], revision=cfg["model.revision"]))
    out.append(engine_kwargs("m", 8, dtype="float16", gpu_memory_utilization=0.3, enforce_eager=True))  # test_gpu
    return out


def test_engine_arguments_are_engine_args_fields_and_construct():
    from vllm.engine.arg_utils import EngineArgs

    fields = {f.name for f in dataclasses.fields(EngineArgs)}
    for kw in _worker_engine_kwargs():
        assert set(kw) <= fields, set(kw) - fields
        args = EngineArgs(**kw)                     # the object LLM(...) builds from its keyword arguments
        assert args.logprobs_mode == "processed_logprobs" and args.enable_lora


def _worker_engine(scale: str, root):
    """What infer.worker builds for `scale` (its max_model_len: the prompt context plus the longest generation
    budget), with the model a folder of the scale's real shapes (tests/contract/engine_config.py)."""
    from infer.backends.vllm_args import engine_kwargs
    from infer.kinds import token_budget
    from rcea.config import load_config
    from rcea.lora_ranks import max_lora_rank
    from tests.contract.engine_config import model_dir

    from infer.worker import placement

    cfg = load_config(scale)
    return engine_kwargs(str(model_dir(scale, root)), max_lora_rank(cfg["train.lora_rank"]),
                         max_model_len=cfg["data.context_tokens"] + token_budget(cfg),
                         **placement(cfg, "cuda:0", "vllm")["engine"])   # a GPU worker's share and sleep mode


@pytest.mark.parametrize("scale", ["3b", "7b"])
def test_the_workers_engine_config_is_accepted_at_each_scales_real_shapes(monkeypatch, tmp_path, scale):
    """vLLM 0.23's create_engine_config (what LLM(...) runs first) on the worker's arguments and the scale's own
    model shapes: the limits vLLM checks against the model (context, LoRA rank and dtype, scheduler) hold."""
    import torch

    from rcea.device_check import SHAPES
    from tests.contract.engine_config import engine_config

    kw = _worker_engine(scale, tmp_path)
    vc = engine_config(monkeypatch, **kw)
    hf = vc.model_config.hf_config
    assert (hf.hidden_size, hf.num_hidden_layers, hf.num_key_value_heads, hf.vocab_size) == tuple(
        SHAPES[scale][k] for k in ("hidden_size", "num_hidden_layers", "num_key_value_heads", "vocab_size"))
    assert vc.model_config.max_model_len == kw["max_model_len"] and vc.model_config.dtype == torch.bfloat16
    assert vc.lora_config.max_lora_rank == kw["max_lora_rank"] and vc.lora_config.lora_dtype == torch.bfloat16
    assert vc.model_config.logprobs_mode == "processed_logprobs"
    # measure.one_weight_copy: an engine that can sleep (vLLM turns its cumem allocator on for that, on CUDA), at
    # measure.gpu_memory_utilization of the card
    assert kw["enable_sleep_mode"] is True and vc.model_config.enable_sleep_mode
    assert vc.model_config.enable_cumem_allocator
    assert vc.cache_config.gpu_memory_utilization == kw["gpu_memory_utilization"] == 0.8


def test_llm_sleeps_at_level_1_and_wakes_with_every_tag():
    """What infer.backends.vllm_backend calls: LLM.sleep(level=1) and LLM.wake_up() (tags default: all)."""
    import ast

    sleep, wake = _llm_method("sleep"), _llm_method("wake_up")
    assert [a.arg for a in sleep.args.args][:2] == ["self", "level"]
    assert [a.arg for a in wake.args.args] == ["self", "tags"] and ast.unparse(wake.args.defaults[0]) == "None"


def test_create_engine_config_refuses_a_context_longer_than_the_model(monkeypatch, tmp_path):
    """The check above can fail: a max_model_len past the model's positions is refused by vLLM itself."""
    from tests.contract.engine_config import MAX_POSITIONS, engine_config

    kw = {**_worker_engine("7b", tmp_path), "max_model_len": MAX_POSITIONS + 1}
    with pytest.raises(Exception, match="max_model_len"):
        engine_config(monkeypatch, **kw)


def _llm_source():
    """vllm/entrypoints/llm.py, read as text: importing vllm.LLM pulls in the server stack (metrics,
    tokenizers of every kind), which the contract environment leaves out."""
    import ast
    from importlib.util import find_spec
    from pathlib import Path

    path = Path(find_spec("vllm").submodule_search_locations[0]) / "entrypoints" / "llm.py"
    return ast.parse(path.read_text())


def _llm_method(name):
    import ast

    cls = next(n for n in ast.walk(_llm_source()) if isinstance(n, ast.ClassDef) and n.name == "LLM")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_llm_passes_unknown_keywords_to_engine_args():
    init = _llm_method("__init__")
    assert init.args.kwarg is not None and "model" in [a.arg for a in init.args.args + init.args.kwonlyargs]


def test_literal_valued_arguments_are_among_vllm_choices():
    from vllm.config.lora import LoRAConfig, MaxLoRARanks
    from vllm.config.model import LogprobsMode

    from infer.backends.vllm_args import LOGPROBS_MODE, LORA_DTYPES
    from rcea.lora_ranks import VLLM_LORA_RANKS

    assert VLLM_LORA_RANKS["0.23"] == get_args(MaxLoRARanks)
    assert LOGPROBS_MODE in get_args(LogprobsMode)
    for kw in _worker_engine_kwargs():
        LoRAConfig(max_lora_rank=kw["max_lora_rank"], max_loras=kw["max_loras"])   # pydantic-validated
    from vllm.config.lora import LoRADType
    assert set(LORA_DTYPES) <= set(get_args(LoRADType))
    with pytest.raises(Exception):
        LoRAConfig(max_lora_rank=24)               # vLLM itself refuses what rcea.lora_ranks refuses


def test_sampling_params_construct():
    from vllm import SamplingParams

    from infer.backends.vllm_args import sampling_kwargs
    from rcea.config import load_config

    cfg = load_config("3b")
    for kw in (sampling_kwargs(True, cfg["eval.max_new_tokens"], [151643, 151645]),
               sampling_kwargs(False, cfg["passk.max_new_tokens"], [151643], cfg["passk.temperature"],
                               cfg["passk.top_p"], seed=63),
               sampling_kwargs(False, cfg["probe.max_new_tokens"], [151643], cfg["probe.temperature"],
                               cfg["probe.top_p"], seed=2027)):
        sp = SamplingParams(**kw)
        assert sp.max_tokens == kw["max_tokens"] and sp.logprobs == 0 and sp.n == 1


def test_lora_request_constructs(tmp_path):
    from vllm.lora.request import LoRARequest

    from infer.backends.vllm_args import AdapterIds, lora_request_kwargs

    for step in (50, 100):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        (d / "adapter_config.json").write_text("{}")
    ids = AdapterIds()
    reqs = [LoRARequest(**lora_request_kwargs(tmp_path / f"checkpoint-{s}", ids)) for s in (50, 100)]
    assert reqs[0].lora_int_id != reqs[1].lora_int_id and reqs[0].lora_path.endswith("checkpoint-50")


def test_backend_reads_only_attributes_that_exist():
    """VLLMBackend calls llm.get_tokenizer(), llm.generate(..., lora_request=), llm.reset_prefix_cache() (gpu_check)
    and llm.llm_engine.model_config.get_vocab_size()."""
    from vllm.config.model import ModelConfig

    assert callable(getattr(ModelConfig, "get_vocab_size"))
    for name in ("get_tokenizer", "reset_prefix_cache"):
        _llm_method(name)
    gen = _llm_method("generate")
    assert "lora_request" in [a.arg for a in gen.args.args + gen.args.kwonlyargs]
