"""vLLM backend (GPU only): generation with the LoRA adapter of each checkpoint loaded per request.

It cannot score: vLLM returns top-k log-probs, not full-vocabulary entropies, so teacher-forced
measurements use the Transformers backend. This module is imported only when `vllm` is chosen. Every
argument handed to vLLM comes from `infer.backends.vllm_args` (checked against the real classes in
tests/contract): bf16/fp16 only (vLLM's LoRA kernels), processed log-probs (the sampled distribution),
adapter ids that two checkpoints never share. A completion ends at the first stop token (`stop_tokens`, the
run's data.stop_tokens, handed to vLLM as `stop_token_ids`; without it, the model's own EOS set).

A full model folder (`set_model`: an outside run's merged checkpoint) needs an engine whose model is that
folder (`full_model_kwargs`: no LoRA, the base's tokenizer and stop set). One engine is held at a time, keyed
by its model folder's files (None: the base, serving adapters): asking for another model shuts the held engine
down and starts the other, so a worker's jobs on one checkpoint (one group, orchestrate.units) share one start.
"""

from __future__ import annotations

from typing import Sequence

from infer.backends.base import Completion, SamplingSpec
from infer.backends.vllm_args import (AdapterIds, adapter_key, engine_kwargs, full_model_kwargs, lora_request_kwargs,
                                      sampling_kwargs)


class VLLMBackend:
    def __init__(self, model_path: str, max_lora_rank: int = 32, gpu_memory_utilization: float = 0.5,
                 max_model_len: int = 4096, dtype: str = "bfloat16", seed: int = 0, revision: str | None = None,
                 stop_tokens: Sequence[str] | None = None, **llm_kwargs):
        kwargs = engine_kwargs(model_path, max_lora_rank, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                               max_model_len=max_model_len, seed=seed, revision=revision, **llm_kwargs)
        self._kwargs, self._engine = kwargs, None   # the base engine's arguments; the held engine's model key
        self.llm = _start(kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        eos = []
        try:
            from transformers import GenerationConfig

            gen_eos = GenerationConfig.from_pretrained(model_path, revision=revision).eos_token_id
            eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
        except (OSError, ValueError):
            pass
        if self.tokenizer.eos_token_id is not None:
            eos.append(self.tokenizer.eos_token_id)
        if stop_tokens is not None:
            from rcea.config import ConfigError
            from rcea.data import stop_ids_of

            stops = stop_ids_of(self.tokenizer, list(stop_tokens))
            beyond = sorted(set(eos) - set(stops))   # vLLM stops at the model's EOS ids whatever it is asked
            if beyond:
                names = self.tokenizer.convert_ids_to_tokens(beyond)
                raise ConfigError(f"{model_path}'s generation config ends completions at {names}, which "
                                  f"data.stop_tokens = {list(stop_tokens)!r} leaves out; add them to data.stop_tokens")
            eos = stops
        self.eos_ids = sorted(set(eos))   # the stop ids: a completion ends at the first of them
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())
        self._lora = None
        self._ids = AdapterIds()

    def _hold(self, key: str | None, kwargs: dict) -> None:
        """Hold the engine of model `key` (None: the base), shutting the held one down first if it is another."""
        if key == self._engine and self.llm is not None:
            return
        self._close()
        self.llm = _start(kwargs)
        self._engine = key
        vocab = int(self.llm.llm_engine.model_config.get_vocab_size())
        if vocab != self.vocab_size:
            raise ValueError(f"{kwargs['model']}: vocabulary of {vocab} but the base's has {self.vocab_size}")

    def _close(self) -> None:
        """Shut the held engine down and give its memory back (vLLM's own cleanup) before another starts."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
        self.llm, self._engine = None, None
        from vllm.distributed import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()

    def set_model(self, model: str | None) -> None:
        """Generate with the full model folder `model` itself (an engine of its own, no adapter); None: the base."""
        if model is None:
            self.set_adapter(None)
            return
        self._hold(adapter_key(model), full_model_kwargs(self._kwargs, model))
        self._lora = None

    def set_adapter(self, adapter: str | None) -> None:
        self._hold(None, self._kwargs)   # adapters (and None) are served by the base's engine
        if adapter is None:
            self._lora = None
            return
        from vllm.lora.request import LoRARequest

        self._lora = LoRARequest(**lora_request_kwargs(adapter, self._ids))

    def generate(self, prompts: Sequence[list[int]], spec: SamplingSpec,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        from vllm import SamplingParams

        if not spec.greedy and (seeds is None or len(seeds) != len(prompts)):
            raise ValueError("sampling needs one seed per prompt")

        def params(i: int) -> SamplingParams:
            return SamplingParams(**sampling_kwargs(spec.greedy, spec.max_new_tokens, self.eos_ids, spec.temperature,
                                                    spec.top_p, None if spec.greedy else seeds[i]))

        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts],
                                 sampling_params=[params(i) for i in range(len(prompts))],
                                 lora_request=self._lora, use_tqdm=False)
        result = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            finished = c.finish_reason == "stop"
            if finished and (not ids or ids[-1] not in self.eos_ids) and isinstance(c.stop_reason, int):
                ids.append(c.stop_reason)          # keep the terminating EOS as an eligible position
            lps = None
            if c.logprobs:
                lps = [float(d[t].logprob) for d, t in zip(c.logprobs, c.token_ids) if t in d]
            result.append(Completion(ids, finished and bool(ids) and ids[-1] in self.eos_ids, lps))
        return result

    def sleep(self) -> None:
        """vLLM sleep level 1 (an engine built with enable_sleep_mode, CUDA only): its weights offloaded to host
        memory, its KV cache (and prefix cache) dropped, until `wake_up`; no request may run meanwhile."""
        self.llm.sleep(level=1)

    def wake_up(self) -> None:
        """Reallocate the KV cache and bring the weights back (every tag), before the next generation."""
        self.llm.wake_up()

    def score(self, prompts, completions, logits_at=None):
        raise NotImplementedError("vLLM gives no full-vocabulary entropies; score with the hf backend")


def _start(kwargs: dict):
    try:
        from vllm import LLM
    except ImportError as exc:  # pragma: no cover - GPU image only
        raise ImportError("the vllm backend needs vLLM (the GPU infer image); use --backend hf on CPU") from exc
    from infer.vllm_cpu_unpin import require

    require()   # vLLM's CPU build: host memory unpinned, as its CPU platform says (a no-op on a GPU build)
    return LLM(**kwargs)

