"""`EngineArgs.create_engine_config()` of the pinned vLLM, on this CPU machine, for a scale's real model shapes.

`create_engine_config` is where vLLM checks an engine's limits against the model: max_model_len against the
model's positions, the scheduler's token budget, the LoRA rank and dtype, sleep mode, the parallel setup. The
weights are not needed: the model folder is a config.json of the scale's real shapes (rcea.device_check.SHAPES,
the published Qwen2.5-3B / 7B configurations), built here, so no download.

Two stand-ins, because the contract environments have vLLM's GPU wheel and no CUDA runtime:
- the platform: the one vLLM finds here is "unspecified" (no device type), so it reports itself as CUDA, the
  platform of the GPU host (device type "cuda"; sleep mode, which vLLM allows on CUDA, follows from that);
- the model class's interfaces: vLLM imports the model module to read them, and that import runs CUDA kernels'
  registration. They are vLLM's own defaults for a class, with the two facts a text-generation model with
  pipeline parallelism has; `check_qwen2_facts` reads both from vLLM's sources (the registry's text-generation
  table and the class's bases), so the stand-in cannot drift from the version installed.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
from pathlib import Path

ARCH = "Qwen2ForCausalLM"
MAX_POSITIONS = 32_768   # Qwen2.5-3B's published max_position_embeddings (7B's is longer): the tighter bound


def model_dir(scale: str, root: Path) -> Path:
    """A folder with the config.json of `scale`'s model (real shapes, no weights)."""
    from rcea.device_check import qwen2_config

    cfg = qwen2_config(scale)
    cfg.architectures = [ARCH]
    cfg.max_position_embeddings = MAX_POSITIONS
    cfg.dtype = "bfloat16"   # the published checkpoints' dtype: what an engine given no dtype ("auto") runs in
    out = root / f"qwen2.5-{scale}-shapes"
    cfg.save_pretrained(out)
    return out


def _vllm_source(rel: str) -> ast.Module:
    root = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
    return ast.parse((root / rel).read_text())


def check_qwen2_facts() -> None:
    """What the interface stand-in asserts, read from vLLM's sources: Qwen2ForCausalLM is in the registry's
    text-generation table, and its class lists SupportsPP among its bases."""
    from vllm.model_executor.models import registry

    assert registry._TEXT_GENERATION_MODELS[ARCH] == ("qwen2", ARCH)
    cls = next(n for n in _vllm_source("model_executor/models/qwen2.py").body
               if isinstance(n, ast.ClassDef) and n.name == ARCH)
    assert "SupportsPP" in {ast.unparse(b) for b in cls.bases}


def engine_config(monkeypatch, **kw):
    """`EngineArgs(**kw).create_engine_config()` with the two stand-ins above (undone by `monkeypatch`)."""
    import torch.nn as nn
    from vllm import platforms
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.models import registry
    from vllm.platforms.interface import PlatformEnum

    check_qwen2_facts()
    here = platforms.current_platform
    if not here.device_type:           # only where vLLM found no platform (never on a GPU host)
        gpu = type("GPUHost", (type(here),), {"_enum": PlatformEnum.CUDA, "device_type": "cuda",
                                              "device_name": "cuda", "dispatch_key": "CUDA"})
        monkeypatch.setattr(here, "__class__", gpu)
    bare = registry._ModelInfo.from_model_cls(type(ARCH, (nn.Module,), {}))   # vLLM's defaults for a class
    info = dataclasses.replace(bare, is_text_generation_model=True, supports_pp=True)
    monkeypatch.setattr(registry._LazyRegisteredModel, "inspect_model_cls", lambda self: info)
    return EngineArgs(**kw).create_engine_config()
