"""vLLM backend (GPU only): generation with the LoRA adapter of each checkpoint loaded per request.

It cannot score: vLLM returns top-k log-probs, not full-vocabulary entropies, so teacher-forced
measurements use the Transformers backend. This module is imported only when `vllm` is chosen. Every
argument handed to vLLM comes from `infer.backends.vllm_args` (checked against the real classes in
tests/contract): bf16/fp16 only (vLLM's LoRA kernels), processed log-probs (the sampled distribution),
adapter ids that two checkpoints never share. A completion ends at the first stop token (`stop_tokens`, the
run's data.stop_tokens, handed to vLLM as `stop_token_ids`; without it, the model's own EOS set).
"""

from __future__ import annotations

from typing import Sequence

from infer.backends.base import Completion, SamplingSpec
from infer.backends.vllm_args import AdapterIds, engine_kwargs, lora_request_kwargs, sampling_kwargs


class VLLMBackend:
    def __init__(self, model_path: str, max_lora_rank: int = 32, gpu_memory_utilization: float = 0.5,
                 max_model_len: int = 4096, dtype: str = "bfloat16", seed: int = 0, revision: str | None = None,
                 stop_tokens: Sequence[str] | None = None, **llm_kwargs):
        kwargs = engine_kwargs(model_path, max_lora_rank, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                               max_model_len=max_model_len, seed=seed, revision=revision, **llm_kwargs)
        try:
            from vllm import LLM
        except ImportError as exc:  # pragma: no cover - GPU image only
            raise ImportError("the vllm backend needs vLLM (the GPU infer image); use --backend hf on CPU") from exc
        self.llm = LLM(**kwargs)
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

    def set_adapter(self, adapter: str | None) -> None:
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

    def score(self, prompts, completions, logits_at=None):
        raise NotImplementedError("vLLM gives no full-vocabulary entropies; score with the hf backend")
