"""Inference backends behind one small interface: `generate` and `score`.

- `hf`   (Transformers): generate and score, CPU or GPU. The only backend that gives full-vocabulary
         entropies, so every teacher-forced measurement goes through it.
- `vllm` (vLLM, GPU only): generate, with the LoRA adapter of each checkpoint loaded per request.

A GPU worker holds one copy of the weights at a time (`infer.backends.one_copy`, measure.one_weight_copy): the
`hf` scorer waits in host memory and scores on the GPU while the `vllm` engine sleeps.

Both also take a full model folder in place of base + adapter (`set_model`: an outside run's merged
checkpoint, infer/outside.py), loaded as the model itself.

Backends are imported lazily by name: `import vllm` happens only inside `get_backend("vllm", ...)`.
"""

from __future__ import annotations

from infer.backends.base import Backend, Completion, SamplingSpec, Scored

__all__ = ["BACKENDS", "Backend", "Completion", "SamplingSpec", "Scored", "get_backend"]

BACKENDS = ("hf", "vllm")


def get_backend(name: str, model_path: str, device: str = "cpu", **kwargs) -> Backend:
    """Build a backend by name; vLLM is imported only here and only when asked for."""
    if name == "hf":
        from infer.backends.hf import HFBackend
        return HFBackend(model_path, device=device, **kwargs)
    if name == "vllm":
        from infer.backends.vllm_backend import VLLMBackend
        return VLLMBackend(model_path, **kwargs)
    raise ValueError(f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)}")
